"""passes/fuse_softmax.py + lower/softmax.py BiasSoftmax: Add(x, bias) -> Softmax over the last
axis as one launch (softmax.cl's softmax_last with BIAS). Against onnxruntime: CLIP's causal
[1, 1, T, T] mask over heads, a per-batch padding mask, a bias on either side of the Add, a row
length with a scalar tail, opset 11; what must not fuse (the sum also a graph output, another
axis, short rows, a bias that broadcasts along the row); the GPU family runs Add and Softmax."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)


def _model(xs, bs, axis=-1, opset=17, swap=False, sum_out=False, const_bias=False, seed=0):
    rng = np.random.default_rng(seed)
    bias = np.where(rng.random(bs) < 0.3, np.float32(-1e9), rng.standard_normal(bs)).astype(np.float32)
    ins = [helper.make_tensor_value_info("x", T.FLOAT, list(xs))]
    inits = []
    if const_bias:
        inits.append(numpy_helper.from_array(bias, "b"))
    else:
        ins.append(helper.make_tensor_value_info("b", T.FLOAT, list(bs)))
    nodes = [helper.make_node("Add", ["b", "x"] if swap else ["x", "b"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=axis)]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, list(xs))]
    if sum_out:
        outs.append(helper.make_tensor_value_info("s", T.FLOAT, list(xs)))
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits), opset_imports=[helper.make_opsetid("", opset)])
    feeds = {"x": (3 * rng.standard_normal(xs)).astype(np.float32)}
    if not const_bias:
        feeds["b"] = bias
    return m, feeds


def _run(m, feeds, options=None) -> list:
    sess = clglow.InferenceSession(m.SerializeToString(), options)
    for g, w in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("xs,bs,kw", [
    ((1, 4, 77, 77), (1, 1, 77, 77), {}),  # CLIP's causal mask over 4 heads
    ((2, 3, 5, 40), (2, 1, 1, 40), {"swap": True}),  # a padding mask per batch, the bias first
    ((6, 33), (33,), {"const_bias": True}),  # a constant row bias, a tail past 32
    ((2, 16, 16), (16, 16), {"opset": 11, "axis": 2}),  # the legacy Softmax over the last axis
])
def test_fused(xs, bs, kw):
    ops = _run(*_model(xs, bs, **kw))
    assert ops == ["BiasSoftmax"], ops


@pytest.mark.parametrize("xs,bs,kw", [
    ((1, 2, 20, 20), (1, 1, 20, 20), {"sum_out": True}),
    ((1, 2, 20, 20), (1, 1, 20, 20), {"axis": 2}),
    ((3, 8), (3, 8), {}),  # rows shorter than the vector kernel
    ((3, 20), (3, 1), {}),  # the bias broadcasts along the row
])
def test_not_fused(xs, bs, kw):
    ops = _run(*_model(xs, bs, **kw))
    assert "BiasSoftmax" not in ops and "Softmax" in ops, ops


def test_gpu_family_runs_add_and_softmax(monkeypatch):
    """Where the GPU family's work-group softmax applies (forced here: pocl's local memory is
    not dedicated) the fused node is refused and runs as the Add and the Softmax."""
    from clglow.lower import gpu_reduce

    monkeypatch.setattr(gpu_reduce, "applicable", lambda t: None if not t.is_cpu_family else "the CPU family")
    m, feeds = _model((1, 2, 20, 20), (1, 1, 20, 20))
    sess = clglow.InferenceSession(m.SerializeToString(), clglow.SessionOptions(target="gpu"))
    np.testing.assert_allclose(sess.run(None, feeds)[0], models.ort_run(m, feeds)[0], rtol=1e-5, atol=1e-6)
    kinds = [p.op_type for p in sess.placement]
    assert "BiasSoftmax" not in kinds and "Softmax" in kinds and "Add" in kinds, kinds
    assert all(p.where == "opencl" for p in sess.placement)


def test_gpu_family_without_dedicated_local_memory_fuses():
    m, feeds = _model((1, 2, 20, 20), (1, 1, 20, 20))
    sess = clglow.InferenceSession(m.SerializeToString(), clglow.SessionOptions(target="gpu"))
    np.testing.assert_allclose(sess.run(None, feeds)[0], models.ort_run(m, feeds)[0], rtol=1e-5, atol=1e-6)
