"""Models declared in float16 (as onnxconverter-common or torch `.half()` export them) run on
OpenCL with the host fallback off: their convolution weights are widened to float32 constants
once (passes/half_weights.py), the activations stay float16. Against onnxruntime on the same
float16 model, within float16's rounding."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

import clglow

RNG = np.random.default_rng(16)


def _h(name: str, shape, scale: float = 0.2):
    return nh.from_array((RNG.standard_normal(shape) * scale).astype(np.float16), name)


def _cnn(transpose: bool):
    """Conv + BatchNorm + Relu, a residual Add, (ConvTranspose,) global pooling and a Gemm head."""
    inits = [_h("W1", (8, 3, 3, 3)), _h("B1", (8,)), _h("W2", (8, 8, 3, 3), 0.1),
             nh.from_array((RNG.random(8) + 0.5).astype(np.float16), "g"), _h("b", (8,)), _h("mu", (8,), 0.1),
             nh.from_array((RNG.random(8) + 0.5).astype(np.float16), "var"), _h("WT", (8, 4, 2, 2)),
             _h("Wg", (10, 8 if not transpose else 4), 0.3), _h("Bg", (10,))]
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c2", "g", "b", "mu", "var"], ["n2"]),
             helper.make_node("Add", ["n2", "r1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r2"])]
    last = "r2"
    if transpose:
        nodes.append(helper.make_node("ConvTranspose", ["r2", "WT"], ["t"], strides=[2, 2]))
        last = "t"
    nodes += [helper.make_node("GlobalAveragePool", [last], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "Wg", "Bg"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "half_cnn", [helper.make_tensor_value_info("x", T.FLOAT16, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", T.FLOAT16, [2, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("transpose", [False, True], ids=["conv", "conv_transpose"])
def test_float16_cnn_runs_on_the_device(transpose, monkeypatch):
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    m = _cnn(transpose)
    sess = clglow.InferenceSession(m.SerializeToString())
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
    x = RNG.standard_normal((2, 3, 12, 12)).astype(np.float16)
    (got,) = sess.run(None, {"x": x})
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-3)


def _bf16(arr: np.ndarray):
    import ml_dtypes

    return arr.astype(ml_dtypes.bfloat16)


def test_bfloat16_model_runs_on_the_device(monkeypatch):
    """A bfloat16 block (embedding Gather, MatMul + bias, Softmax, Transpose, Concat, LayerNorm):
    the arithmetic in float32 between Casts (passes/half_islands.py), the bfloat16 values moved as
    16-bit bits; against onnx.reference on the same model, within bfloat16's rounding."""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    from onnx.reference import ReferenceEvaluator

    emb = nh.from_array(_bf16(RNG.standard_normal((32, 16)).astype(np.float32)), "emb")
    w = nh.from_array(_bf16((RNG.standard_normal((16, 16)) * 0.3).astype(np.float32)), "w")
    b = nh.from_array(_bf16(RNG.standard_normal(16).astype(np.float32)), "b")
    g = nh.from_array(_bf16((RNG.random(32) + 0.5).astype(np.float32)), "g")
    beta = nh.from_array(_bf16(RNG.standard_normal(32).astype(np.float32)), "beta")
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Softmax", ["mb"], ["s"], axis=-1),
             helper.make_node("Transpose", ["e"], ["et"], perm=[1, 0]),
             helper.make_node("Concat", ["s", "e"], ["c"], axis=1),
             helper.make_node("LayerNormalization", ["c", "g", "beta"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("ids", T.INT64, [5])],
                              [helper.make_tensor_value_info("y", T.BFLOAT16, [5, 32]),
                               helper.make_tensor_value_info("et", T.BFLOAT16, [16, 5])], [emb, w, b, g, beta])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    sess = clglow.InferenceSession(m.SerializeToString())
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
    feeds = {"ids": np.array([3, 0, 31, 7, 7], np.int64)}
    got = sess.run(None, feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for gv, wv in zip(got, want):
        assert gv.dtype == wv.dtype and gv.shape == wv.shape
        np.testing.assert_allclose(gv.astype(np.float32), wv.astype(np.float32), rtol=2e-2, atol=2e-2)
    np.testing.assert_array_equal(got[1].view(np.uint16), want[1].view(np.uint16))  # moved bits, exact
