"""Fusion of float32 elementwise chains (passes/fuse_elementwise.py): what is fused, what is not,
and that the fused kernel computes what onnxruntime computes; a forged FusedElementwise node in a
user's model is refused, never compiled."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.errors import ClglowError

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def _fused(sess):
    return [n for n in sess.graph.nodes if n.op_type == "FusedElementwise"]


def _check(model, feeds, n_fused, n_nodes=None):
    sess = clglow.InferenceSession(model.SerializeToString())
    fused = _fused(sess)
    assert len(fused) == n_fused, [n.op_type for n in sess.graph.nodes]
    if n_nodes is not None:
        assert len(sess.graph.nodes) == n_nodes
    got = sess.run(None, feeds)
    want = models.ort_run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    return fused


def test_gelu_with_broadcast_constants_is_one_node():
    c = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
         (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    x = np.random.default_rng(0).standard_normal((2, 33, 70)).astype(np.float32) * 3
    (f,) = _check(_model(nodes, [_vi("x", [2, 33, 70])], [_vi("y", [2, 33, 70])], c), {"x": x}, 1, 1)
    assert f.attrs["expr"].count("X0") == 2  # x is read twice, loaded once


def test_broadcast_chain_over_rows_and_channels():
    nodes = [helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["d"]), helper.make_node("Sub", ["d", "z"], ["y"])]
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 5, 7, 9)).astype(np.float32),
             "s": rng.standard_normal((5, 1, 1)).astype(np.float32),
             "b": rng.standard_normal((9,)).astype(np.float32),
             "z": rng.standard_normal((2, 1, 7, 1)).astype(np.float32)}
    m = _model(nodes, [_vi("x", [2, 5, 7, 9]), _vi("s", [5, 1, 1]), _vi("b", [9]), _vi("z", [2, 1, 7, 1])],
               [_vi("y", [2, 5, 7, 9])])
    _check(m, feeds, 1, 1)


def test_row_layout_chain():
    """Broadcasting with a long last dim: the row layout (offsets per row from the host)."""
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Mul", ["t", "g"], ["y"])]
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((3, 4, 40)).astype(np.float32),
             "b": rng.standard_normal((40,)).astype(np.float32),
             "g": rng.standard_normal((3, 1, 40)).astype(np.float32)}
    m = _model(nodes, [_vi("x", [3, 4, 40]), _vi("b", [40]), _vi("g", [3, 1, 40])], [_vi("y", [3, 4, 40])])
    _check(m, feeds, 1, 1)


def test_outputs_and_shared_values_end_groups():
    """An intermediate that is a graph output, or read twice, is not folded away."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Neg", ["e"], ["n"]), helper.make_node("Mul", ["n", "e"], ["y"]),
             helper.make_node("Abs", ["y"], ["z"])]
    x = np.random.default_rng(2).standard_normal((4, 17)).astype(np.float32)
    m = _model(nodes, [_vi("x", [4, 17])], [_vi("r", [4, 17]), _vi("z", [4, 17])])
    sess = clglow.InferenceSession(m.SerializeToString())
    kept = {o for n in sess.graph.nodes for o in n.outputs}
    assert "r" in kept and "e" in kept  # r is an output, e has two readers
    got = sess.run(None, {"x": x})
    for g, w in zip(got, models.ort_run(m, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_more_inputs_than_the_kernel_takes_is_left_alone():
    names = ["a", "b", "c", "d", "e"]
    nodes = [helper.make_node("Add", ["a", "b"], ["t1"]), helper.make_node("Add", ["t1", "c"], ["t2"]),
             helper.make_node("Add", ["t2", "d"], ["t3"]), helper.make_node("Add", ["t3", "e"], ["y"])]
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((3, 8)).astype(np.float32) for n in names}
    m = _model(nodes, [_vi(n, [3, 8]) for n in names], [_vi("y", [3, 8])])
    sess = clglow.InferenceSession(m.SerializeToString())
    assert not _fused(sess) or all(len(n.inputs) <= 4 for n in _fused(sess))
    np.testing.assert_allclose(sess.run(None, feeds)[0], models.ort_run(m, feeds)[0], rtol=1e-5, atol=1e-6)


def test_no_fusion_without_graph_optimizations():
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["y"])]
    m = _model(nodes, [_vi("x", [5])], [_vi("y", [5])])
    opts = clglow.SessionOptions()
    opts.graph_optimization_level = 0
    assert not _fused(clglow.InferenceSession(m.SerializeToString(), opts))


@pytest.mark.parametrize("expr", ["X0);}__kernel void evil(__global float* p){p[0]=1;", "SYSTEM(X0)",
                                  "MUL(X0,X1)", "ADD(X0,X0", "X0 + X0", ""])
def test_forged_fused_node_is_refused(expr):
    """A model may name clglow's internal op; its expression reaches the compiler only when it is
    well formed over the node's inputs (the session reports the node, and stays usable)."""
    node = helper.make_node("FusedElementwise", ["x"], ["y"], domain="clglow", expr=expr, name="forged")
    g = helper.make_graph([node], "g", [_vi("x", [4])], [_vi("y", [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("clglow", 1)])
    with pytest.raises(ClglowError, match="forged"):
        clglow.InferenceSession(m.SerializeToString()).run(None, {"x": np.ones(4, np.float32)})
    ok = _model([helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["y"])],
                [_vi("x", [4])], [_vi("y", [4])])
    out = clglow.InferenceSession(ok.SerializeToString()).run(None, {"x": np.zeros(4, np.float32)})[0]
    np.testing.assert_allclose(out, -np.ones(4))


@pytest.mark.parametrize("shape", [(37,), (3, 53), (2, 4, 16)], ids=str)
def test_every_operation_flat_runs(shape):
    """One fused_flat chain through every operation the kernel has, on sizes with and without a
    partial last run of 16 (the kernel evaluates 16 elements as one vector)."""
    c = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("one", 1.0), ("two", 2.0))]
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Add", ["a", "one"], ["b"]),
             helper.make_node("Log", ["b"], ["l"]), helper.make_node("Neg", ["l"], ["n"]),
             helper.make_node("Exp", ["n"], ["e"]), helper.make_node("Sqrt", ["e"], ["s"]),
             helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Sub", ["r", "x"], ["d"]),
             helper.make_node("Tanh", ["d"], ["t"]), helper.make_node("Relu", ["d"], ["u"]),
             helper.make_node("Sigmoid", ["u"], ["g"]), helper.make_node("Erf", ["t"], ["f"]),
             helper.make_node("Mul", ["g", "f"], ["m"]), helper.make_node("Div", ["m", "two"], ["y"])]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 2
    _check(_model(nodes, [_vi("x", list(shape))], [_vi("y", list(shape))], c), {"x": x}, 2, 2)  # d is read twice
