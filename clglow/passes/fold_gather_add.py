"""Add(Gather(W, ids), P) with W and P constants, P the same for every gathered row -> a Gather
from the constant W + P (plan time; no Add launch).

A decode step's embedding: the token's row of the embedding table plus the position's row, and
with the past length static the position row is a folded constant, so the Add costs a launch on
every run for a sum that could be made once per table row. Taken only when W has no other user
(the summed table replaces it: no extra copy of the table stays) and P broadcasts over the
gathered rows alone (its index axes of size 1). Each element of the new table is W + P rounded
to the dtype once, as the Add computed it: the same bits.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node, Value


def _row_term(g: Graph, gather: Node, p: Value) -> Optional[np.ndarray]:
    """P as the term added to every gathered row (broadcasting to W.shape[1:]), else None."""
    w, ids = g.values.get(gather.input(0)), g.values.get(gather.input(1))
    out = g.values.get(gather.outputs[0])
    if w is None or w.const is None or ids is None or out is None or not out.is_static or ids.shape is None:
        return None
    if int(gather.attr("axis", 0)) != 0 or np.asarray(p.const).dtype != np.asarray(w.const).dtype:
        return None
    o, pc = tuple(out.shape), np.asarray(p.const)
    if pc.ndim > len(o):
        return None
    try:
        if np.broadcast_shapes(o, pc.shape) != o:
            return None
    except ValueError:
        return None
    full = pc.reshape((1,) * (len(o) - pc.ndim) + pc.shape)
    r = len(o) - (w.const.ndim - 1)  # the index axes come first
    if any(d != 1 for d in full.shape[:r]):
        return None
    return full.reshape(full.shape[r:])


def _fold_one(g: Graph) -> bool:
    producers, consumers, outputs = g.producers(), g.consumers(), set(g.outputs)
    for add in g.nodes:
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.inputs) != 2:
            continue
        for j in (0, 1):
            gather, p = producers.get(add.inputs[j]), g.values.get(add.inputs[1 - j])
            if gather is None or gather.op_type != "Gather" or gather.domain not in ("", "ai.onnx"):
                continue
            if p is None or p.const is None or add.inputs[j] in outputs or gather.input(0) in outputs:
                continue
            if len(consumers.get(add.inputs[j], [])) != 1 or len(consumers.get(gather.input(0), [])) != 1:
                continue
            term = _row_term(g, gather, p)
            if term is None:
                continue
            w = np.asarray(g.values[gather.input(0)].const)
            table = (w + term).astype(w.dtype)
            name = g.unique_name(gather.input(0) + "_plus_row")
            g.values[name] = Value(name, table.dtype, table.shape, table)
            g.values.pop(gather.input(0), None)  # its one user was this Gather
            gather.inputs = [name, gather.input(1)]
            g.values.pop(gather.outputs[0], None)
            gather.outputs = [add.outputs[0]]
            g.nodes.remove(add)
            return True
    return False


def fold_gather_add(graph: Graph) -> Graph:
    """Every Add of a constant row to a constant table's Gather folded into the table."""
    g = graph.copy()
    while _fold_one(g):
        pass
    return g


__all__ = ["fold_gather_add"]
