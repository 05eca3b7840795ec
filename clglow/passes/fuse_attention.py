"""Scores -> Softmax -> context of a few query rows -> one clglow.FusedAttention node.

After fuse_matmul and fold_transposes a transformer's attention is three launches or more:
FusedMatMul(q, k^T) with the scale and the mask as its bias (q and k read through the head
split's transposes), Softmax over the keys, and MatMul(p, v) stored through the head merge's
transpose, plus the packing of k^T. A decode step has one query row per head: the three are
then tiny and each costs a launch. Fused, one work-item per (batch, head, query row) computes
the row's scores, softmax and context (kernels_cl/attention.cl, ONNX Softmax semantics).

Fused when (static shapes, float32): the scores are a rank-4 FusedMatMul with perm_b =
[0, 1, 3, 2] on a contiguous K, an optional per-column or broadcast bias (the mask), no
residual or activation, a positive scale, and a perm_a that keeps the head size last; the
Softmax is over the last axis; the context is a MatMul (or a plain FusedMatMul, perm_c
keeping the last axis) of the probabilities and a contiguous V; query rows at most
MAX_ROWS; batch and heads equal for Q, K and V. Each intermediate has that one consumer and
is not a graph output. The fused node falls back to the three nodes when it cannot lower.

Then a decode step's K and V, each Concat(past, new) along the key axis read by the attention
alone (the present tensors are graph outputs), become inputs 4, 5 (past) and 1, 2 (new) of the
FusedAttention, which writes the concatenations as its outputs 1 and 2 (the row kernel as it
reads them): GPT-2 decode's two Concat launches per layer go. Its fallback is the two Concats
and the attention.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import GENERIC_TARGET, lookup
from .fuse_conv import in_graph_order, rewrite_to_fixed_point, splice_fused

MAX_ROWS = 16  # query rows: more, and the GEMM kernels' tiles beat one work-item per row


def _static(g: Graph, name: str) -> Optional[tuple]:
    v = g.values.get(name) if name else None
    if v is None or v.shape is None or v.dtype != np.float32 or any(not isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def _perm(node: Node, key: str) -> list:
    return [int(p) for p in (node.attrs.get(key) or [])]


def _only_user(consumers: dict, outputs: set, name: str) -> Optional[Node]:
    users = consumers.get(name, [])
    if len(users) != 1 or name in outputs or users[0].domain not in ("", "ai.onnx", "clglow"):
        return None
    return users[0]


def _scores_ok(g: Graph, s: Node) -> bool:
    if s.op_type != "FusedMatMul" or s.domain != "clglow" or (s.input(3) or ""):
        return False
    if s.attrs.get("activation", "") not in ("", b"") or float(s.attrs.get("alpha", 1.0)) <= 0:
        return False
    pa, pb = _perm(s, "perm_a"), _perm(s, "perm_b")
    if _perm(s, "perm_c") or pb != [0, 1, 3, 2] or (pa and pa[-1] != 3):
        return False
    return all(_static(g, x) is not None and len(_static(g, x)) == 4 for x in (s.input(0), s.input(1), s.outputs[0]))


def _softmax_ok(g: Graph, sm: Node) -> bool:
    if sm.op_type != "Softmax" or sm.domain not in ("", "ai.onnx"):
        return False
    return int(sm.attr("axis", -1 if g.opset() >= 13 else 1)) in (-1, 3)


def _context_ok(g: Graph, c: Node, p: str) -> bool:
    if c.input(0) != p or c.input(1) == p or _static(g, c.input(1)) is None or len(_static(g, c.input(1))) != 4:
        return False
    if c.op_type == "MatMul" and c.domain in ("", "ai.onnx"):
        return True
    if c.op_type != "FusedMatMul" or c.domain != "clglow" or any(c.input(i) for i in (2, 3)):
        return False
    pc = _perm(c, "perm_c")
    return (float(c.attrs.get("alpha", 1.0)) == 1.0 and c.attrs.get("activation", "") in ("", b"")
            and not _perm(c, "perm_a") and not _perm(c, "perm_b") and (not pc or pc[-1] == 3))


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for s in g.nodes:
        if not _scores_ok(g, s):
            continue
        sm = _only_user(consumers, outputs, s.outputs[0])
        if sm is None or not _softmax_ok(g, sm):
            continue
        c = _only_user(consumers, outputs, sm.outputs[0])
        if c is None or not _context_ok(g, c, sm.outputs[0]):
            continue
        sshape, kshape, vshape = _static(g, s.outputs[0]), _static(g, s.input(1)), _static(g, c.input(1))
        if sshape[2] > MAX_ROWS or kshape[:2] != sshape[:2] or vshape[:3] != kshape[:3]:
            continue
        attrs = {"scale": float(s.attrs.get("alpha", 1.0)), "perm_q": _perm(s, "perm_a"),
                 "perm_y": _perm(c, "perm_c") if c.op_type == "FusedMatMul" else []}
        fused = Node("FusedAttention", s.name, [s.input(0), s.input(1), c.input(1), s.input(2) or ""],
                     [c.outputs[0]], attrs, "clglow", None)
        if splice_fused(g, s, [sm, c], fused):  # where the context was: V may be computed after the scores
            return True
    return False


def _kv_concat(g: Graph, producers: dict, consumers: dict, name: str, attn: Node) -> Optional[Node]:
    """The Concat(past, new) along the key axis that makes `name` (K or V of `attn`), read by
    `attn` alone (a graph output too: the present tensor), both parts static float32 4-D."""
    c = producers.get(name)
    if c is None or c.op_type != "Concat" or c.domain not in ("", "ai.onnx") or len(c.inputs) != 2:
        return None
    users = consumers.get(name, [])
    if len(users) != 1 or users[0] is not attn or int(c.attr("axis", 0)) not in (2, -2):
        return None
    shapes = [_static(g, x) for x in c.inputs]
    if any(s is None or len(s) != 4 for s in shapes) or shapes[0][:2] + shapes[0][3:] != shapes[1][:2] + shapes[1][3:]:
        return None
    return c


def _append_one(g: Graph, consumers: dict, outputs: set) -> bool:
    producers = {o: n for n in g.nodes for o in n.outputs if o}
    for a in g.nodes:
        if a.op_type != "FusedAttention" or a.domain != "clglow" or any(a.input(i) for i in (4, 5)):
            continue
        ck, cv = (_kv_concat(g, producers, consumers, a.input(i), a) for i in (1, 2))
        if ck is None or cv is None or ck is cv or _static(g, ck.inputs[0])[2] != _static(g, cv.inputs[0])[2]:
            continue
        fused = Node("FusedAttention", a.name, [a.input(0), ck.inputs[1], cv.inputs[1], a.input(3) or "",
                                                ck.inputs[0], cv.inputs[0]],
                     [a.outputs[0], ck.outputs[0], cv.outputs[0]], dict(a.attrs), "clglow", None)
        op = lookup(fused)
        if op is None or op.supports(fused, g, GENERIC_TARGET) is not None:
            continue
        fused.unfused = in_graph_order(g, [ck, cv, a])  # partition.unfuse: the Concats and the attention
        g.nodes = [fused if n is a else n for n in g.nodes if n is not ck and n is not cv]
        return True
    return False


def fuse_attention(graph: Graph) -> Graph:
    """Every attention block that fits (see the module doc) as one clglow.FusedAttention, then
    a decode step's Concat(past, new) of K and V taken into it (past tensors as inputs 4 and 5,
    the concatenations as outputs 1 and 2: two launches fewer per layer)."""
    return rewrite_to_fixed_point(rewrite_to_fixed_point(graph, _fuse_one), _append_one)


def output_shape(node: Node, graph: Graph) -> dict:
    """{output: (dtype, shape)} of a FusedAttention: [B, H, rows, V's head size] through perm_y
    (shapes.infer_node's rule for it); {} while Q or V is not static."""
    q, v = graph.values.get(node.input(0)), graph.values.get(node.input(2))
    if q is None or v is None or q.shape is None or v.shape is None:
        return {}
    if any(not isinstance(d, int) for d in tuple(q.shape) + tuple(v.shape)):
        return {}
    pq, py = _perm(node, "perm_q"), _perm(node, "perm_y")
    ql = [q.shape[p] for p in pq] if pq else list(q.shape)
    y = [ql[0], ql[1], ql[2], v.shape[3]]
    out = {node.outputs[0]: (np.dtype(np.float32), tuple(y[p] for p in py) if py else tuple(y))}
    for new, past, j in ((1, 4, 1), (2, 5, 2)):  # the present tensors: past + new rows
        n, pt = graph.values.get(node.input(new)), graph.values.get(node.input(past)) if node.input(past) else None
        if pt is None or j >= len(node.outputs) or not node.outputs[j]:
            continue
        if n is None or n.shape is None or pt.shape is None or any(not isinstance(d, int) for d in tuple(n.shape) + tuple(pt.shape)):
            return {}
        out[node.outputs[j]] = (np.dtype(np.float32), tuple(n.shape[:2]) + (pt.shape[2] + n.shape[2], n.shape[3]))
    return out
