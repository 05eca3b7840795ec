"""Add(x, bias) -> Softmax over the last axis -> one clglow.BiasSoftmax (softmax.cl BIAS).

A transformer's attention mask is added to the scores before the Softmax. fuse_matmul takes a
per-column mask into the scores' FusedMatMul as its bias; a mask with rows of its own (CLIP's
causal [1, 1, T, T] mask, a padding mask computed at run time over [B, 1, 1, T] of batched
heads the GEMM cannot broadcast) stays an Add: one launch and one pass over the scores per
layer. Fused, the softmax kernel adds the bias row as it reads x (lower/softmax.py).

Fused when: the Add's output is read by the Softmax alone and is not a graph output, x has the
Add's (static, float32) shape, the bias is static float32, broadcasts to x and spans its last
axis, which the Softmax normalises (opset 13+ axis -1 / rank - 1; older opsets the same axis),
of at least 16 elements (the vector row kernel). The GPU family refuses the fused node, which
then runs as the Add and the Softmax (partition.unfuse).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.softmax import bias_strides
from .fuse_conv import rewrite_to_fixed_point, splice_fused

MIN_LEN = 16  # the row kernel's vector width: shorter rows keep the plain Softmax


def _static(g: Graph, name: str) -> Optional[tuple]:
    v = g.values.get(name) if name else None
    if v is None or v.shape is None or v.dtype != np.float32 or any(not isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def _operands(g: Graph, add: Node) -> Optional[tuple]:
    """(x, bias) of an Add whose output has x's shape and whose other input broadcasts along rows."""
    out = _static(g, add.outputs[0])
    if out is None or len(out) == 0 or out[-1] < MIN_LEN or len(add.inputs) != 2:
        return None
    for x, b in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        xs, bs = _static(g, x), _static(g, b)
        if xs == out and bs is not None and bias_strides(xs, bs) is not None:
            return x, b
    return None


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for sm in g.nodes:
        if sm.op_type != "Softmax" or sm.domain not in ("", "ai.onnx") or _static(g, sm.inputs[0]) is None:
            continue
        rank = len(_static(g, sm.inputs[0]))
        axis = int(sm.attr("axis", -1 if g.opset() >= 13 else 1))
        if axis not in (-1, rank - 1):
            continue
        add = next((n for n in g.nodes if sm.inputs[0] in n.outputs), None)
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx") or sm.inputs[0] in outputs:
            continue
        if consumers.get(sm.inputs[0], []) != [sm]:
            continue
        ops = _operands(g, add)
        if ops is None:
            continue
        fused = Node("BiasSoftmax", sm.name, list(ops), [sm.outputs[0]], {}, "clglow", None)
        if splice_fused(g, add, [sm], fused):
            return True
    return False


def fuse_softmax(graph: Graph) -> Graph:
    """Every Add -> Softmax that fits (see the module doc) as one clglow.BiasSoftmax."""
    return rewrite_to_fixed_point(graph, _fuse_one)
