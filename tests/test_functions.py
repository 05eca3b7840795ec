"""ONNX functions inlined at load (frontend/functions.py): a model's own functions and the
bodies of standard ops without an OpenCL kernel run on the device, node by node, with the host
fallback off; results against onnx.reference on the original (uninlined) model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.frontend.functions import FUNCTION_DOMAIN, inline_functions
from clglow.lower import has_kernel

RNG = np.random.default_rng(5)


def _run_both(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5) -> clglow.InferenceSession:
    sess = clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-5)
    return sess


def _local_function_model() -> onnx.ModelProto:
    """y = ScaledTanh(x; alpha=2) + ScaledTanh(x; alpha omitted: the function's default 0.5), a
    local function whose Constant reads the attribute through ref_attr_name."""
    const = helper.make_node("Constant", [], ["a"])
    ref = onnx.AttributeProto(name="value_float", type=onnx.AttributeProto.FLOAT, ref_attr_name="alpha")
    const.attribute.append(ref)
    body = [const, helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "a"], ["y"])]
    fn = helper.make_function("custom", "ScaledTanh", ["x"], ["y"], body, [helper.make_opsetid("", 18)])
    fn.attribute_proto.append(helper.make_attribute("alpha", 0.5))
    nodes = [helper.make_node("ScaledTanh", ["x"], ["y1"], domain="custom", alpha=2.0),
             helper.make_node("ScaledTanh", ["x"], ["y2"], domain="custom"),
             helper.make_node("Add", ["y1", "y2"], ["y"])]
    g = helper.make_graph(nodes, "local", [helper.make_tensor_value_info("x", T.FLOAT, [3, 7])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 7])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("custom", 1)],
                          functions=[fn])
    m.ir_version = 10
    return m


def test_local_functions_run_inlined_on_the_device(monkeypatch):
    """(onnx.reference does not apply a function's attribute defaults either: numpy is the oracle)"""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    m = _local_function_model()
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString())
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], 2.5 * np.tanh(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes", [None, [0, 1, 2, 3], [1]])
def test_mean_variance_normalization_expands_to_device_ops(axes, monkeypatch):
    """No kernel of its own: its function body (ReduceMean, Sub, Pow, Sqrt, Div) runs instead,
    with the schema's default axes [0, 2, 3] written in when the node omits them."""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    kw = {} if axes is None else {"axes": axes}
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **kw)
    g = helper.make_graph([node], "mvn", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4, 5])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3, 4, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = (RNG.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)
    sess = _run_both(m, {"x": x})
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
    ax = tuple(axes or [0, 2, 3])
    want = (x - x.mean(axis=ax, keepdims=True)) / np.sqrt(x.var(axis=ax, keepdims=True) + 1e-9)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_flex_attention_builds_its_body_for_the_node(monkeypatch):
    """ai.onnx.preview FlexAttention: a context-dependent body (built for the node's attributes
    and input types) expanded and run on the device."""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    q, k, v = ((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8))
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview")
    g = helper.make_graph([node], "flex", [helper.make_tensor_value_info(n, T.FLOAT, s)
                                           for n, s in (("Q", q), ("K", k), ("V", v))],
                          [helper.make_tensor_value_info("Y", T.FLOAT, [1, 2, 4, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 11
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in (("Q", q), ("K", k), ("V", v))}
    sess = _run_both(m, feeds)
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
    qf, kf, vf = feeds["Q"], feeds["K"], feeds["V"]
    s = qf @ kf.transpose(0, 1, 3, 2) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(sess.run(None, feeds)[0], (p / p.sum(-1, keepdims=True)) @ vf, rtol=1e-4, atol=1e-5)


def test_ops_with_kernels_and_models_without_functions_are_left_alone():
    node = helper.make_node("Relu", ["x"], ["y"])
    g = helper.make_graph([node], "plain", [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    assert inline_functions(m, has_kernel) is m
    mvn = helper.make_model(helper.make_graph([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], "g",
                                              [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 4])],
                                              [helper.make_tensor_value_info("y", T.FLOAT, [1, 2, 3, 4])]),
                            opset_imports=[helper.make_opsetid("", 13)])
    kept = inline_functions(mvn, lambda d, op: True)  # a kernel for everything: nothing expanded
    assert [n.op_type for n in kept.graph.node] == ["MeanVarianceNormalization"]
    expanded = inline_functions(mvn, has_kernel)
    assert "MeanVarianceNormalization" not in [n.op_type for n in expanded.graph.node]
    assert all(o.domain != FUNCTION_DOMAIN for o in expanded.opset_import) and not expanded.functions
    onnx.checker.check_model(expanded)
