"""The GPU family's local-memory convolutions and attention on Oclgrind (tests/kernels/test_gpu_conv.py
and test_gpu_attention.py at small shapes): gpu_dwconv.cl's halo tiles and xgemm.cl's implicit GEMM
(B gathered from X per tile) at a few points of both search spaces (the rest on pocl), Winograd
F(2x2, 3x3) (gpu_winograd.cl's transforms around a batched xgemm) and gpu_attention.cl's blocks of
query rows; bounds and data races checked everywhere, zero reports.

The uninitialised-value checker is on for all but Winograd: with it on, each Winograd case is
clean alone, while after a smaller case xgemm's reads of the transformed input V (a grown scratch
buffer) are reported uninitialised (the grown-buffer false positive of test_oclgrind.py's
docstring), so that process runs with it off. (xgemm.cl's B_CONV divides by float reciprocals,
not integers: Oclgrind 21.10's checker stops fatally on the `freeze` LLVM emits for an integer
division paired with its remainder.) The selection tests (the CPU family's paths on the same
device) are left out: they are lowering choices, tested on pocl. About 60 s on this shared
machine, in three processes.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


def test_gpu_conv_kernels(oclgrind_env):  # noqa: F811
    """The halo depthwise and the implicit GEMM, every checker on."""
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gpu_conv.py", "-k", "not winograd and not only_with"))


def test_gpu_winograd_kernels(oclgrind_env):  # noqa: F811
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gpu_conv.py", "-k", "winograd"), uninitialized=False)


def test_gpu_attention_kernels(oclgrind_env):  # noqa: F811
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gpu_attention.py"))
