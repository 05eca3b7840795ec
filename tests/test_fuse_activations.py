"""Two-node and newer activations fused into the GEMM / depthwise epilogues: Swish (SiLU) as
exporters write it, x * Sigmoid(x), and the HardSwish op, after convolutions (GEMM and depthwise
paths) and MatMuls; against onnxruntime. A Sigmoid whose result is used elsewhere is left alone."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(11)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def _c(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _run(model, feeds):
    sess = clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    for g, w in zip(got, models.ort_run(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    return [(n.op_type, n.attrs.get("activation")) for n in sess.graph.nodes]


def _swish(x, y):
    return [helper.make_node("Sigmoid", [x], [x + "_s"]), helper.make_node("Mul", [x, x + "_s"], [y])]


@pytest.mark.parametrize("group", [1, 8], ids=["gemm", "depthwise"])
def test_conv_swish_is_one_node(group):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group)] + _swish("c", "y")
    x = RNG.standard_normal((1, 8, 20, 36)).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [1, 8, 20, 36])], [_vi("y", [1, 8, 20, 36])],
                      [_c("w", 8, 8 // group, 3, 3), _c("b", 8)]), {"x": x})
    assert ops == [("FusedConv", "Swish")]


def test_conv_hardswish_op():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("HardSwish", ["c"], ["y"])]
    x = (RNG.standard_normal((2, 6, 9, 40)) * 4).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [2, 6, 9, 40])], [_vi("y", [2, 12, 9, 40])], [_c("w", 12, 6, 1, 1)],
                      opset=14), {"x": x})
    assert ops == [("FusedConv", "HardSwish")]


def test_matmul_bias_swish():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
    nodes += _swish("h", "y")
    x = RNG.standard_normal((33, 20)).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [33, 20])], [_vi("y", [33, 48])], [_c("w", 20, 48), _c("b", 48)]), {"x": x})
    assert ops == [("FusedMatMul", "Swish")]


def test_sigmoid_used_elsewhere_is_not_swish():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"]), helper.make_node("Neg", ["s"], ["z"])]
    x = RNG.standard_normal((1, 4, 10, 10)).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [1, 4, 10, 10])], [_vi("y", [1, 4, 10, 10]), _vi("z", [1, 4, 10, 10])],
                      [_c("w", 4, 4, 1, 1)]), {"x": x})
    assert ("FusedConv", "Swish") not in ops
