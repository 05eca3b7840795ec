"""The decode-step kernels on Oclgrind: gemv.cl (every point of its tunable family too),
parts.cl (Concat/Split of a few parts) and attention.cl's attention_rows
(tests/kernels/test_gemv.py, test_gemv_family.py, test_parts.py,
tests/passes/test_pass_fuse_attention.py) and rotate_half.cl (test_pass_rotary.py), under the CPU family's paths (CLGLOW_TARGET=cpu: Oclgrind is a
GPU, whose family takes xgemm/gpu_gemv instead of these kernels)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


def test_gemv_and_parts_kernels(oclgrind_env):  # noqa: F811
    """Every check on; test_gemv's cases that take gemm.cl instead are left to that kernel's own runs."""
    tests = ("tests/kernels/test_gemv.py", "tests/kernels/test_gemv_family.py", "tests/kernels/test_parts.py")
    env = dict(oclgrind_env, CLGLOW_TARGET="cpu")
    run_checked(env, pytest_args(*tests) + ["-k", "not not_taken and not gpu and not prologue"])
    # the LayerNormalization prologue: bounds and races (the uninitialised-value checker segfaults
    # in its statistics' lane sums, as in norm.cl's layernorm: test_checker_crashes_on_lane_arithmetic)
    run_checked(env, pytest_args("tests/kernels/test_gemv_family.py") + ["-k", "prologue"], uninitialized=False)


def test_fused_attention(oclgrind_env):  # noqa: F811
    """Bounds and races; the uninitialised-value checker stops with "Unsupported instruction:
    freeze" in attention_rows (a fatal error, not a report), as in test_oclgrind_spectral.py."""
    run_checked(dict(oclgrind_env, CLGLOW_TARGET="cpu"),
                pytest_args("tests/passes/test_pass_fuse_attention.py") + ["-k", "test_fused"], uninitialized=False)


def test_fused_attention_kv_append(oclgrind_env):  # noqa: F811
    """The decode step's KV append (the row kernel writing the present tensors, the copies before
    the generic kernel): bounds and races, as above."""
    run_checked(dict(oclgrind_env, CLGLOW_TARGET="cpu"),
                pytest_args("tests/test_fuse_attention_kv.py") + ["-k", "fused"], uninitialized=False)


def test_bias_softmax(oclgrind_env):  # noqa: F811
    """softmax.cl's softmax_last with BIAS (passes/fuse_softmax.py): bounds and races (the
    uninitialised-value checker stops with a fatal error in it, as in attention_rows above)."""
    run_checked(dict(oclgrind_env, CLGLOW_TARGET="cpu"), pytest_args("tests/test_fuse_softmax.py") + ["-k", "test_fused"],
                uninitialized=False)


def test_rotate_half(oclgrind_env):  # noqa: F811
    """rotate_half.cl (passes/fuse_rotary.py's clglow.RotateHalf; the kernel is the same for both
    families): bounds and races. The uninitialised-value checker is off: it takes the uploaded graph
    inputs for uninitialised in these sessions (its reports: the Relu on x in fused_flat, then
    rotate_half storing values computed from x, cos and sin), while the results match onnxruntime."""
    run_checked(oclgrind_env, pytest_args("tests/passes/test_pass_rotary.py") + ["-k", "test_fused"],
                uninitialized=False)


def test_state_space_ops(oclgrind_env):  # noqa: F811
    """causal_conv.cl and linear_attention.cl (opset 27's CausalConvWithState and LinearAttention,
    tests/kernels/test_state_space_ops.py): every check on."""
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_state_space_ops.py"))


def test_channel_norm(oclgrind_env):  # noqa: F811
    """norm.cl's channelnorm (passes/fuse_layernorm.fuse_channel_norm: 16-pixel vectors and the
    per-pixel tail): bounds and races (the uninitialised-value checker crashes on the lane sums of
    norm.cl, test_checker_crashes_on_lane_arithmetic)."""
    run_checked(oclgrind_env, pytest_args("tests/passes/test_pass_channel_norm.py") + ["-k", "onnxruntime"],
                uninitialized=False)
