"""Normalisation kernels vs onnx.reference: BatchNormalization (const and run-time stats), LRN,
LayerNormalization, InstanceNormalization."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check, run_node  # noqa: E402
except ImportError:
    from run_launches import check, run_node  # type: ignore  # noqa: E402

RNG = np.random.default_rng(4)


def rand(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def _bn_params(C):
    return {"s": rand(C), "b": rand(C), "m": rand(C), "v": rand(C, lo=0.1, hi=2.0)}


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 4), (1, 3, 9), (2, 3, 2, 2, 3)], ids=str)
def test_batchnorm_const(opset, shape):
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    # onnx.reference's BatchNormalization before opset 14 fails or disagrees with the spec; onnxruntime agrees
    oracle = "onnxruntime" if opset < 14 else "reference"
    check(node, {"x": rand(*shape)}, _bn_params(shape[1]), opset=opset, rtol=1e-5, atol=1e-5, oracle=oracle)


def test_batchnorm_runtime_params():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    check(node, {"x": rand(2, 5, 3, 4), **_bn_params(5)}, opset=15, rtol=1e-5, atol=1e-5)


def test_batchnorm_training_declined():
    from clglow.ir import Graph, Node
    from clglow.lower.base import GENERIC_TARGET, lookup

    g = Graph([], {}, [], [], {"": 15})
    n = Node("BatchNormalization", "bn", ["x", "s", "b", "m", "v"], ["y"], {"training_mode": 1})
    assert lookup(n).supports(n, g, GENERIC_TARGET) is not None
    n2 = Node("BatchNormalization", "bn", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"])
    assert lookup(n2).supports(n2, g, GENERIC_TARGET) is not None


@pytest.mark.parametrize("size", [1, 3, 5])  # even sizes: test_lrn_numpy_spec (onnxruntime refuses them)
def test_lrn(size):
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=1e-2, beta=0.75, bias=2.0)
    # onnx.reference's LRN window differs from the spec's (c - floor((size-1)/2) .. c + ceil((size-1)/2))
    check(node, {"x": rand(2, 7, 3, 4)}, rtol=1e-5, atol=1e-6, oracle="onnxruntime")


def test_lrn_defaults():
    check(helper.make_node("LRN", ["x"], ["y"], size=3), {"x": rand(1, 4, 5, 5)}, rtol=1e-5, atol=1e-6,
          oracle="onnxruntime")


def test_lrn_numpy_spec():
    """An independent numpy transcription of the spec formula, for the even window case."""
    x = rand(1, 6, 2, 3)
    size, alpha, beta, bias = 4, 0.1, 0.6, 1.5
    sq = np.zeros_like(x)
    for c in range(6):
        lo, hi = max(0, c - (size - 1) // 2), min(5, c + (size - 1 + 1) // 2)
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(1)
    want = x / (bias + alpha / size * sq) ** beta
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    got, _ = run_node(node, {"x": x}, expected=[want])
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis,bias,pshape", [((2, 3, 8), -1, True, None), ((2, 3, 8), 1, False, None),
                                                    ((4, 6), 0, True, None), ((2, 3, 4), -2, True, (1, 4))],
                         ids=str)
def test_layernorm(shape, axis, bias, pshape):
    ns = shape[axis:]
    ps = pshape or ns
    consts = {"s": rand(*ps), "b": rand(*ps)}
    ins = ["x", "s", "b"] if bias else ["x", "s"]
    if not bias:
        consts.pop("b")
    check(helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-4), {"x": rand(*shape)}, consts,
          opset=17, rtol=1e-4, atol=1e-5)


def test_layernorm_runtime_params():
    check(helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"]),
          {"x": rand(3, 5, 16), "s": rand(16), "b": rand(16)}, opset=17, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 9)], ids=str)
def test_instancenorm(shape):
    C = shape[1]
    check(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3), {"x": rand(*shape)},
          {"s": rand(C), "b": rand(C)}, rtol=1e-4, atol=1e-5)
