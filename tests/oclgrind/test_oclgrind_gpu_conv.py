"""The GPU family's local-memory convolutions and attention on Oclgrind (tests/kernels/test_gpu_conv.py
and test_gpu_attention.py at small shapes): gpu_attention.cl's blocks of query rows (every checker
on); gpu_dwconv.cl's halo tiles, xgemm.cl's implicit GEMM (B gathered from X per tile) at
points of both search spaces (a few each: the rest on pocl), and Winograd F(2x2, 3x3) (gpu_winograd.cl's transforms around
a batched xgemm); bounds and data races checked, zero reports.

The depthwise tiles run with the uninitialised-value checker on. The implicit GEMM runs with it
off: Oclgrind 21.10's checker stops fatally on LLVM's `freeze` instruction, which the compiler
emits for xgemm's tap decomposition (k / (KH*KW) and its remainder; the same stop as in the
spectral and attention kernels), and the kernel's results are then wrong. Winograd runs in that
process too: with the checker on, each of its cases is clean alone, while after a smaller case
xgemm's reads of the transformed input V (a grown scratch buffer) are reported uninitialised
(the grown-buffer false positive of test_oclgrind.py's docstring). The selection test
(the CPU family's paths on the same device) is left out: it is a lowering choice, tested on pocl.
About 60 s on this shared machine, in three processes.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


def test_gpu_depthwise_kernels(oclgrind_env):  # noqa: F811
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gpu_conv.py", "-k", "depthwise or dwconv"))


def test_gpu_implicit_conv_kernels(oclgrind_env):  # noqa: F811
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gpu_conv.py", "-k",
                                          "not depthwise and not dwconv and not only_with"), uninitialized=False)


def test_gpu_attention_kernels(oclgrind_env):  # noqa: F811
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gpu_attention.py"))
