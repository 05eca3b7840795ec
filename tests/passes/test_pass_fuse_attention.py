"""passes/fuse_attention.py + lower/attention.py FusedAttention: scores (scale, mask, head-split
transposes) -> Softmax -> context (head-merge transpose) of a few query rows is one launch;
results against onnxruntime for the vector row kernel (head sizes 64, 24) and the generic one
(head size 5); what must not fuse (many query rows, probabilities also a graph output)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(13)


def _attention(s, t, h, d, probs_out=False):
    """q [1, s, h, d] -> [1, h, s, d]; k, v [1, h, t, d]; y [1, s, h, d]; mask [1, 1, 1, t]."""
    nodes = [helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qt", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["qs"]),
             helper.make_node("Add", ["qs", "mask"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["ctx"]),
             helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3])]
    mask = np.where(RNG.random((1, 1, 1, t)) < 0.2, np.float32(-3.4e38), np.float32(0)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale"), numpy_helper.from_array(mask, "mask")]
    ins = [helper.make_tensor_value_info("q", T.FLOAT, [1, s, h, d]),
           helper.make_tensor_value_info("k", T.FLOAT, [1, h, t, d]),
           helper.make_tensor_value_info("v", T.FLOAT, [1, h, t, d])]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [1, s, h, d])]
    if probs_out:
        outs.append(helper.make_tensor_value_info("p", T.FLOAT, [1, h, s, t]))
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits), opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"q": RNG.standard_normal((1, s, h, d)).astype(np.float32),
             "k": RNG.standard_normal((1, h, t, d)).astype(np.float32),
             "v": RNG.standard_normal((1, h, t, d)).astype(np.float32)}
    return m, feeds


def _run(m, feeds):
    sess = clglow.InferenceSession(m.SerializeToString())
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("s,t,h,d", [(1, 64, 4, 64), (3, 17, 2, 24), (1, 9, 3, 5), (16, 40, 2, 16)])
def test_fused(s, t, h, d):
    ops = _run(*_attention(s, t, h, d))
    assert ops.count("FusedAttention") == 1 and "Softmax" not in ops, ops


@pytest.mark.parametrize("case", ["many_rows", "probs_out"])
def test_not_fused(case):
    m, feeds = _attention(40, 40, 2, 16) if case == "many_rows" else _attention(1, 20, 2, 16, probs_out=True)
    ops = _run(m, feeds)
    assert "FusedAttention" not in ops and "Softmax" in ops, ops


@pytest.mark.parametrize("how", ["lowering", "refused", "build"])
def test_fallback_runs_the_original_nodes(how, monkeypatch):
    """The fused node falls back to scores, Softmax and context when it cannot lower, is refused
    by the session's Target, or its program fails to build."""
    import dataclasses

    from clglow.lower.base import GENERIC_TARGET, REGISTRY

    key = ("clglow", "FusedAttention")
    op = REGISTRY[key]

    def broken(ctx):
        raise RuntimeError("forced lowering failure")

    def refuse(node, graph, target):
        return op.supports(node, graph, target) if target is GENERIC_TARGET else "refused for this test"

    def unbuildable(ctx):
        return [dataclasses.replace(la, defines={**la.defines, "__kernel": "!"}) for la in op.lower(ctx)]

    patched = {"lowering": dataclasses.replace(op, lower=broken), "refused": dataclasses.replace(op, supports=refuse),
               "build": dataclasses.replace(op, lower=unbuildable)}[how]
    monkeypatch.setitem(REGISTRY, key, patched)
    m, feeds = _attention(1, 30, 2, 16)
    sess = clglow.InferenceSession(m.SerializeToString())
    np.testing.assert_allclose(sess.run(None, feeds)[0], models.ort_run(m, feeds)[0], rtol=1e-4, atol=1e-5)
    kinds = {p.op_type for p in sess.placement}
    assert "FusedAttention" not in kinds and "Softmax" in kinds, kinds
    assert all(p.where == "opencl" for p in sess.placement)
