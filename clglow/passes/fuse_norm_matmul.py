"""LayerNormalization of one row -> the prologue of the GEMV that consumes it; an elementwise
expression of a GEMV's result -> its epilogue (fuse_gemv_epilogue, below).

A decode step normalises one token's hidden state before each projection (GPT-2's ln_1, ln_2,
ln_f): a launch that reads and writes a few hundred floats, then the GEMV reads them again.
As the GEMV's prologue (kernels_cl/gemv.cl LN_PRO) each work-group normalises x once into local
memory before streaming its panels, and the launch disappears.

Fused when: a LayerNormalization (ai.onnx, or clglow's from fuse_layernorm) over the last axis
of a static float32 tensor with one row, only its Y used; Y consumed only by a MatMul or a
FusedMatMul (no transposed views, no prologue yet) as A, with constant 2-D weights. The result is
a clglow.FusedMatMul with inputs 4 and 5 (the norm's scale and bias) and attribute ln_epsilon;
it falls back to the two nodes where the GEMV does not run (the GPU family, say).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from .fuse_conv import rewrite_to_fixed_point, splice_fused

_PLAIN = {"alpha": 1.0, "activation": "", "act_alpha": 0.0, "act_beta": 0.0}


def _one_row_norm(g: Graph, ln: Node, outputs: set, consumers: dict) -> Optional[int]:
    """K (the normalised length) when `ln` qualifies, else None."""
    if ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx", "clglow"):
        return None
    if any(o and (o in outputs or consumers.get(o)) for o in ln.outputs[1:]):
        return None
    v = g.values.get(ln.input(0))
    if v is None or not v.is_static or v.dtype != np.float32 or not v.shape:
        return None
    shape = tuple(v.shape)
    axis = int(ln.attr("axis", -1))
    if axis not in (-1, len(shape) - 1) or int(np.prod(shape[:-1], dtype=np.int64)) != 1:
        return None
    return int(shape[-1])


def _gemv_user(g: Graph, y: str, k: int, outputs: set, consumers: dict) -> Optional[Node]:
    users = consumers.get(y, [])
    if len(users) != 1 or y in outputs:
        return None
    c = users[0]
    plain = c.op_type == "MatMul" and c.domain in ("", "ai.onnx")
    fused = c.op_type == "FusedMatMul" and c.domain == "clglow"
    if not (plain or fused) or c.input(0) != y or c.input(1) == y:
        return None
    if fused and (any(c.attrs.get(p) for p in ("perm_a", "perm_b", "perm_c")) or "ln_epsilon" in c.attrs):
        return None
    w = g.const(c.input(1))
    return c if w is not None and w.ndim == 2 and w.shape[0] == k else None


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for ln in g.nodes:
        k = _one_row_norm(g, ln, outputs, consumers)
        if k is None:
            continue
        c = _gemv_user(g, ln.outputs[0], k, outputs, consumers)
        if c is None:
            continue
        attrs = dict(_PLAIN) if c.op_type == "MatMul" else dict(c.attrs)
        attrs["ln_epsilon"] = float(ln.attr("epsilon", 1e-5))
        inputs = ([ln.input(0)] + (list(c.inputs) + ["", "", ""])[1:4] + [ln.input(1), ln.input(2)])
        fused = Node("FusedMatMul", c.name, inputs, list(c.outputs), attrs, "clglow", None)
        if splice_fused(g, ln, [c], fused):
            return True
    return False


def fuse_layernorm_gemv(graph: Graph) -> Graph:
    """Every one-row LayerNormalization feeding a GEMV (see the module doc) as its prologue."""
    return rewrite_to_fixed_point(graph, _fuse_one)


# --- the epilogue: a FusedElementwise of the GEMV's result alone ---------------------------------------
def _one_row_gemv(g: Graph, c: Node) -> bool:
    """A MatMul / plain FusedMatMul (no views, no activation, no epilogue yet) of one output row
    with constant 2-D weights."""
    plain = c.op_type == "MatMul" and c.domain in ("", "ai.onnx")
    fused = c.op_type == "FusedMatMul" and c.domain == "clglow"
    if not (plain or fused):
        return False
    if fused and (any(c.attrs.get(p) for p in ("perm_a", "perm_b", "perm_c")) or "epilogue" in c.attrs
                  or c.attrs.get("activation", "") not in ("", b"")):
        return False
    w, y = g.const(c.input(1)), g.values.get(c.outputs[0])
    return (w is not None and w.ndim == 2 and y is not None and y.is_static and y.dtype == np.float32
            and bool(y.shape) and int(np.prod(y.shape[:-1], dtype=np.int64)) == 1)


def _fuse_epilogue_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for c in g.nodes:
        if not _one_row_gemv(g, c):
            continue
        users = consumers.get(c.outputs[0], [])
        if len(users) != 1 or c.outputs[0] in outputs:
            continue
        e = users[0]
        if e.op_type != "FusedElementwise" or e.domain != "clglow" or list(e.inputs) != [c.outputs[0]]:
            continue
        attrs = dict(_PLAIN) if c.op_type == "MatMul" else dict(c.attrs)
        attrs["epilogue"] = e.attrs.get("expr")
        fused = Node("FusedMatMul", c.name, list(c.inputs), list(e.outputs), attrs, "clglow", None)
        if splice_fused(g, c, [e], fused):
            return True
    return False


def fuse_gemv_epilogue(graph: Graph) -> Graph:
    """A one-row GEMV's result used only by a one-input FusedElementwise (GPT-2's tanh GELU):
    the expression becomes the GEMV's epilogue (FusedMatMul attribute `epilogue`, gemv.cl
    EPI_EXPR); it falls back to the two nodes where the GEMV does not run."""
    return rewrite_to_fixed_point(graph, _fuse_epilogue_one)
