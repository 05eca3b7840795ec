"""One-row MatMul / FusedMatMul with constant weights (lower/gemv.py, kernels_cl/gemv.cl) vs
numpy: ragged N (not a multiple of the panel width), K not a multiple of the unroll, bias
(per column and broadcast scalar), residual, activations; the launch is gemv.cl under the CPU
family, gemm/xgemm otherwise (a second row, live weights, a batch of weight matrices)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check
    from .run_launches import device_info, execute, lower_ctx
except ImportError:
    from harness import check  # type: ignore
    from run_launches import device_info, execute, lower_ctx  # type: ignore

from clglow.target import Target

RNG = np.random.default_rng(19)
CPU = Target(family="cpu", preferred_vector_width_float=16)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _kernels(node, feeds, consts, out_shape, dev=CPU):
    op, lctx = lower_ctx(node, feeds, consts, {"y": (out_shape, np.float32)}, 17, dev)
    return [ln.program for ln in op.lower(lctx)]  # gemv.cl's program (gpu_gemv.cl's kernel is named gemv too)


@pytest.mark.parametrize("a_shape,k,n", [((1, 256), 256, 8000), ((1, 1, 37), 37, 70), ((5,), 5, 3),
                                         ((1, 1, 64), 64, 1), ((1, 300), 300, 16)])
def test_matmul_row(a_shape, k, n):
    x, w = rand(*a_shape), rand(k, n)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    want = np.matmul(x, w)
    assert _kernels(node, {"x": x}, {"w": w}, want.shape) == ["gemv"]
    check(node, {"x": x}, {"w": w}, expected=[want], device=device_info())


@pytest.mark.parametrize("act", ["", "Relu", "Gelu", "Tanh"])
@pytest.mark.parametrize("bias_shape", [(70,), (1,), None])
def test_fused_row(act, bias_shape):
    """alpha, bias, residual and activation in the GEMV's epilogue."""
    x, w, r = rand(1, 1, 33), rand(33, 70), rand(1, 1, 70)
    consts = {"w": w}
    want = 0.5 * np.matmul(x, w) + r
    if bias_shape is not None:
        consts["b"] = rand(*bias_shape)
        want = want + consts["b"]
    if act == "Relu":
        want = np.maximum(want, 0)
    elif act == "Tanh":
        want = np.tanh(want)
    elif act == "Gelu":
        from math import erf
        want = 0.5 * want * (1 + np.vectorize(erf)(want / np.sqrt(2)))
    node = helper.make_node("FusedMatMul", ["x", "w", "b" if bias_shape else "", "r"], ["y"], domain="clglow",
                            alpha=0.5, activation=act)
    assert _kernels(node, {"x": x, "r": r}, consts, want.shape) == ["gemv"]
    check(node, {"x": x, "r": r}, consts, expected=[want.astype(np.float32)], device=device_info())


def test_residual_in_place():
    """y written over its residual: each output read and then written by one work-item."""
    import dataclasses

    from clglow.lower.base import Buf

    x, w, r = rand(1, 40), rand(40, 50), rand(1, 50)
    node = helper.make_node("FusedMatMul", ["x", "w", "", "r"], ["y"], domain="clglow")
    op, lctx = lower_ctx(node, {"x": x, "r": r}, {"w": w}, {"y": ((1, 50), np.float32)}, 17, CPU)
    launches = [dataclasses.replace(ln, args=[Buf("r") if isinstance(a, Buf) and a.name == "y" else a
                                              for a in ln.args]) for ln in op.lower(lctx)]
    got = execute(launches, {"x": x, "r": r, "w": w}, {"r": r.copy()})["r"]
    np.testing.assert_allclose(got, x @ w + r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,w_const,w_shape", [((2, 16), True, (16, 20)), ((1, 16), False, (16, 20)),
                                                     ((1, 16), True, (3, 16, 20))])
def test_not_taken(a_shape, w_const, w_shape):
    """Two rows, live weights, or a batch of weight matrices: the GEMM paths (still correct)."""
    x, w = rand(*a_shape), rand(*w_shape)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    want = np.matmul(x, w)
    feeds, consts = ({"x": x}, {"w": w}) if w_const else ({"x": x, "w": w}, {})
    assert "gemv" not in _kernels(node, feeds, consts, want.shape)
    check(node, feeds, consts, expected=[want], device=device_info())


def test_gpu_family_keeps_xgemm():
    x, w = rand(1, 16), rand(16, 20)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    assert "gemv" not in _kernels(node, {"x": x}, {"w": w}, (1, 20), Target(family="gpu"))
