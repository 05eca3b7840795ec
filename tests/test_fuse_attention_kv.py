"""passes/fuse_attention.py's KV append: a decode step's Concat(past, new) of K and V, each read
by the attention alone (the present tensors graph outputs), taken into the FusedAttention (past
tensors as inputs 4, 5, the concatenations as outputs 1, 2). Against onnxruntime: the row kernel
that writes the present tensors as it reads them (head size 64, one and three query rows), the
copies before the generic kernel (head size 5), an empty past; what must not fuse (a present
tensor read by another node); the fallback to the Concats when the fused node cannot lower."""
from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)


def _decode(s: int, past: int, h: int, d: int, extra_reader: bool = False, seed: int = 0) -> tuple:
    """(model, feeds): q, k, v [1, h, s, d]; past_k, past_v [1, h, past, d]; outputs y [1, h, s, d]
    and the present tensors [1, h, past + s, d]; a float mask [1, 1, 1, past + s]."""
    rng = np.random.default_rng(seed)
    t = past + s
    nodes = [helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=-2),
             helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2),
             helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["qs"]),
             helper.make_node("Add", ["qs", "mask"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "present_v"], ["y"])]
    outs = [helper.make_tensor_value_info(n, T.FLOAT, shape)
            for n, shape in (("y", [1, h, s, d]), ("present_k", [1, h, t, d]), ("present_v", [1, h, t, d]))]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["present_k"], ["neg_k"]))
        outs.append(helper.make_tensor_value_info("neg_k", T.FLOAT, [1, h, t, d]))
    mask = np.where(rng.random((1, 1, 1, t)) < 0.2, np.float32(-3.4e38), np.float32(0)).astype(np.float32)
    mask[..., -1] = 0  # the new key is always visible
    inits = [numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale"), numpy_helper.from_array(mask, "mask")]
    names = {"q": s, "k": s, "v": s, "past_k": past, "past_v": past}
    ins = [helper.make_tensor_value_info(n, T.FLOAT, [1, h, r, d]) for n, r in names.items()]
    m = helper.make_model(helper.make_graph(nodes, "decode", ins, outs, inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    feeds = {n: rng.standard_normal((1, h, r, d)).astype(np.float32) for n, r in names.items()}
    return m, feeds


def _run(m, feeds) -> clglow.InferenceSession:
    sess = clglow.InferenceSession(m.SerializeToString())
    for _ in range(2):  # a second run over the same buffers
        got = sess.run(None, feeds)
    for g, w in zip(got, models.ort_run(m, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return sess


def _attention_nodes(sess) -> list:
    return [n for n in sess.graph.nodes if n.op_type == "FusedAttention"]


@pytest.mark.parametrize("s,past,h,d", [(1, 63, 4, 64), (3, 20, 2, 16), (1, 9, 3, 5), (2, 0, 2, 16)])
def test_kv_append_fused(s, past, h, d):
    sess = _run(*_decode(s, past, h, d))
    ops = [n.op_type for n in sess.graph.nodes]
    assert "Concat" not in ops and "Softmax" not in ops, ops
    (a,) = _attention_nodes(sess)
    assert a.inputs[4:6] == ["past_k", "past_v"] and a.outputs[1:] == ["present_k", "present_v"], a


def test_row_kernel_writes_present_itself():
    """Head size 64: one launch, the present tensors written by the attention kernel (no copies)."""
    sess = _run(*_decode(1, 31, 4, 64))
    kernels = [st.kernel_name for st in sess._last_plan.steps if hasattr(st, "kernel_name")]
    assert kernels == ["attention_rows"], kernels


def test_present_read_elsewhere_not_fused():
    sess = _run(*_decode(1, 12, 2, 16, extra_reader=True))
    ops = [n.op_type for n in sess.graph.nodes]
    assert ops.count("Concat") >= 1, ops


def test_fallback_runs_the_concats(monkeypatch):
    """A FusedAttention with past tensors that cannot lower runs as the two Concats and the
    attention of three inputs (tried again on its own)."""
    from clglow.lower.base import REGISTRY

    key = ("clglow", "FusedAttention")
    op = REGISTRY[key]

    def no_past(ctx):
        if ctx.node.input(4):
            raise RuntimeError("forced lowering failure")
        return op.lower(ctx)

    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(op, lower=no_past))
    m, feeds = _decode(1, 17, 2, 16)
    sess = clglow.InferenceSession(m.SerializeToString())
    for g, w in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    kinds = [p.op_type for p in sess.placement]
    assert kinds.count("Concat") == 2 and "FusedAttention" in kinds, kinds
    assert all(p.where == "opencl" for p in sess.placement)
