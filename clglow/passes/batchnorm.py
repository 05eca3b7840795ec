"""Fold an inference BatchNormalization into the Conv that feeds it (new W and B)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Value


def fold_batchnorm(graph: Graph) -> Graph:
    g = graph.copy()
    producers = g.producers()
    consumers = g.consumers()
    outputs = set(g.outputs)
    removed: set = set()
    for bn in g.nodes:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if bn.attr("training_mode", 0) or len([o for o in bn.outputs if o]) != 1:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or id(conv) in removed:
            continue
        if len(consumers.get(conv.outputs[0], [])) != 1 or conv.outputs[0] in outputs:
            continue
        params = [g.const(bn.input(i)) for i in range(1, 5)]
        w = g.const(conv.input(1))
        b = g.const(conv.input(2)) if conv.input(2) else None
        if w is None or any(p is None for p in params) or (conv.input(2) and b is None):
            continue
        if w.dtype != np.float32:
            continue
        scale, bias, mean, var = (np.asarray(p, dtype=np.float64) for p in params)
        eps = float(bn.attr("epsilon", 1e-5))
        factor = scale / np.sqrt(var + eps)
        if factor.shape != (w.shape[0],):
            continue
        new_w = (w.astype(np.float64) * factor.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        old_b = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
        new_b = ((old_b - mean) * factor + bias).astype(np.float32)
        wn = g.unique_name(conv.input(1) + "_bnfold")
        g.values[wn] = Value(wn, new_w.dtype, new_w.shape, new_w)
        bname = g.unique_name((conv.input(2) or conv.name + "_bias") + "_bnfold")
        g.values[bname] = Value(bname, new_b.dtype, new_b.shape, new_b)
        conv.inputs = [conv.inputs[0], wn, bname]
        # the conv now produces the BN output directly
        old_out = conv.outputs[0]
        conv.outputs = [bn.outputs[0]]
        conv.proto = None
        g.values.pop(old_out, None)
        removed.add(id(bn))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
