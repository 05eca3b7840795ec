"""The DFT/STFT (direct sums and the Stockham FFT), window, MelWeightMatrix, Det, SwiGLU and
TensorScatter kernel tests on Oclgrind: out-of-bounds accesses and data races checked
(tests/kernels/test_spectral.py, test_signal_linalg.py).

The uninitialised-value checker stays off: Oclgrind 21.10's checker stops with "Unsupported
instruction: freeze" (a fatal error, not a report) in stft, as in the kernels of
test_oclgrind_spatial.py; and it reports reads of det's scratch matrix (filled from x before any
read) only when a Det test follows another in one process, each Det test alone being clean.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


def test_spectral_and_linalg_kernels(oclgrind_env):  # noqa: F811
    tests = ("tests/kernels/test_spectral.py", "tests/kernels/test_signal_linalg.py")
    run_checked(oclgrind_env, pytest_args(*tests), uninitialized=False)
