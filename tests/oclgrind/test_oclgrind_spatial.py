"""The RoiAlign, Col2Im, DeformConv, MaxUnpool, ReverseSequence, AffineGrid (and CenterCropPad /
Upsample through the movement and resize kernels) tests on Oclgrind: bounds and races checked.

The uninitialised-value checker stays off here: Oclgrind 21.10's checker stops with "Unsupported
instruction: freeze" (a fatal error, not a report) in max_unpool and affine_grid, as its crash
in pooling (test_oclgrind.py's docstring).
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


def test_spatial_kernels(oclgrind_env):  # noqa: F811
    tests = ("tests/kernels/test_spatial.py", "tests/kernels/test_roialign_col2im_deform.py")
    run_checked(oclgrind_env, pytest_args(*tests), uninitialized=False)
