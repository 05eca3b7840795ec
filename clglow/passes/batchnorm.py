"""Per-channel affine maps folded into the weights of the Conv or MatMul that feeds them: an
inference BatchNormalization after a Conv (new W and B) or after a MatMul with constant weights,
directly or through a flattening Reshape (LeViT's Linear + BatchNorm1d: the columns of W scaled,
the shift an Add that fuse_matmul makes the bias); a constant per-channel Mul after a Conv (a
layer scale: fold_channel_scale)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node, Value


def fold_batchnorm(graph: Graph) -> Graph:
    g = graph.copy()
    producers = g.producers()
    consumers = g.consumers()
    outputs = set(g.outputs)
    removed: set = set()
    for bn in list(g.nodes):  # the MatMul fold inserts an Add
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if bn.attr("training_mode", 0) or len([o for o in bn.outputs if o]) != 1:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is not None and conv.op_type != "Conv" and _fold_into_matmul(g, bn, producers, consumers, outputs):
            removed.add(id(bn))
            continue
        if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
            continue
        if not _only_user(conv.outputs[0], consumers, outputs) or not _float32_weights(g, conv):
            continue
        fs = _bn_factors(g, bn)
        if fs is None or fs[0].shape != (g.const(conv.input(1)).shape[0],):
            continue
        _rescale_conv(g, conv, fs[0], fs[1], bn.outputs[0], "_bnfold")  # the conv writes the BN's output
        removed.add(id(bn))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g


def _bn_factors(g: Graph, bn) -> Optional[tuple]:
    """(factor, shift) of an inference BatchNormalization with constant parameters, float64."""
    params = [g.const(bn.input(i)) for i in range(1, 5)]
    if any(p is None for p in params):
        return None
    scale, bias, mean, var = (np.asarray(p, dtype=np.float64).reshape(-1) for p in params)
    if not scale.size == bias.size == mean.size == var.size:
        return None
    factor = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
    return factor, bias - mean * factor


def _only_user(name: str, consumers: dict, outputs: set) -> bool:
    return len(consumers.get(name, [])) == 1 and name not in outputs


def _fold_into_matmul(g: Graph, bn, producers: dict, consumers: dict, outputs: set) -> bool:
    """BN over [M, C] whose input is MatMul(x, W [K, C] constant) [..., C], directly or through
    one Flatten / Reshape to [M, C] (which keeps the last index): W's columns scaled by the BN's
    factor, its shift added right after the MatMul, the BN gone (the reshape writes its output)."""
    v = g.values.get(bn.input(0))
    if v is None or not v.is_static or len(v.shape) != 2:
        return False
    c = int(v.shape[1])
    mid = producers.get(bn.input(0))
    mm = mid
    if mid is not None and mid.op_type in ("Flatten", "Reshape") and mid.domain in ("", "ai.onnx"):
        if not _only_user(mid.outputs[0], consumers, outputs):
            return False
        mm = producers.get(mid.input(0))
    else:
        mid = None
    if mm is None or mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
        return False
    w = g.const(mm.input(1))
    mv = g.values.get(mm.outputs[0])
    if (w is None or w.dtype != np.float32 or w.ndim != 2 or int(w.shape[1]) != c or mv is None
            or not mv.is_static or int(mv.shape[-1]) != c or not _only_user(mm.outputs[0], consumers, outputs)):
        return False
    fs = _bn_factors(g, bn)
    if fs is None or fs[0].shape != (c,):
        return False
    factor, shift = fs
    wn = g.unique_name(mm.input(1) + "_bnfold")
    new_w = (w.astype(np.float64) * factor.reshape(1, -1)).astype(np.float32)
    g.values[wn] = Value(wn, new_w.dtype, new_w.shape, new_w)
    sn = g.unique_name(bn.name + "_shift")
    g.values[sn] = Value(sn, np.dtype(np.float32), (c,), shift.astype(np.float32))
    raw = g.unique_name(mm.outputs[0] + "_bnfold")
    g.values[raw] = Value(raw, mv.dtype, mv.shape)
    add = Node("Add", g.unique_name(bn.name + "_shift_add"), [raw, sn], [mm.outputs[0]])
    mm.inputs = [mm.inputs[0], wn]
    mm.outputs = [raw]
    mm.proto = None
    last = mid if mid is not None else add
    g.values.pop(last.outputs[0], None)
    last.outputs = [bn.outputs[0]]
    if mid is not None:
        mid.proto = None
    g.nodes.insert(g.nodes.index(mm) + 1, add)
    return True


def fold_channel_scale(graph: Graph) -> Graph:
    """A Mul of a Conv's output by a constant per output channel ([C, 1, ...] or [1, C, 1, ...],
    or one value), the Conv's only reader, folded into its weights and bias: ConvNeXt's and
    PoolFormer's layer scale (gamma * branch + x), after which fuse_conv makes the residual Add
    the Conv's epilogue. Scaling W and B in float64 and rounding once may differ from the
    unfolded product by an ulp."""
    g = graph.copy()
    producers, consumers, outputs = g.producers(), g.consumers(), set(g.outputs)
    removed: set = set()
    for mul in list(g.nodes):
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2:
            continue
        for k in (0, 1):
            conv, s = producers.get(mul.inputs[k]), g.const(mul.inputs[1 - k])
            if conv is None or s is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
                continue
            if id(conv) in removed or not _only_user(conv.outputs[0], consumers, outputs):
                continue
            factor = _channel_factor(g, conv, s)
            if factor is None:
                continue
            _rescale_conv(g, conv, factor, None, mul.outputs[0], "_scaled")
            removed.add(id(mul))
            break
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g


def _float32_weights(g: Graph, conv) -> bool:
    """The Conv's weights (and bias, when given) are float32 constants: they can be rescaled."""
    w = g.const(conv.input(1))
    return w is not None and w.dtype == np.float32 and not (conv.input(2) and g.const(conv.input(2)) is None)


def _rescale_conv(g: Graph, conv, factor: np.ndarray, shift: Optional[np.ndarray], out: str, tag: str) -> None:
    """The Conv's weights scaled per output channel by `factor` and its bias made bias * factor
    (+ `shift`; a bias created when there is a shift and none), in float64 rounded once; the
    Conv then writes `out`, the output of the node it absorbs."""
    w = g.const(conv.input(1))
    b = g.const(conv.input(2)) if conv.input(2) else None
    wn = g.unique_name(conv.input(1) + tag)
    new_w = (w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    g.values[wn] = Value(wn, new_w.dtype, new_w.shape, new_w)
    inputs = [conv.input(0), wn]
    if b is not None or shift is not None:
        new_b = (np.zeros(w.shape[0]) if b is None else b.astype(np.float64)) * factor
        new_b = (new_b if shift is None else new_b + shift).astype(np.float32)
        bname = g.unique_name((conv.input(2) or conv.name + "_bias") + tag)
        g.values[bname] = Value(bname, new_b.dtype, new_b.shape, new_b)
        inputs.append(bname)
    g.values.pop(conv.outputs[0], None)
    conv.inputs, conv.outputs, conv.proto = inputs, [out], None


def _channel_factor(g: Graph, conv, s: np.ndarray) -> Optional[np.ndarray]:
    """The per-output-channel factor (float64, [C]) a constant `s` multiplies the Conv's output
    [N, C, ...] by, when it is one (float32 weights and bias, C = W's first dim)."""
    out = g.values.get(conv.outputs[0])
    if not _float32_weights(g, conv) or s.dtype != np.float32 or out is None or out.shape is None:
        return None
    c, rank = int(g.const(conv.input(1)).shape[0]), len(out.shape)
    if s.size == 1:
        return np.full(c, float(s.reshape(-1)[0]))
    shape = tuple(int(d) for d in s.shape)
    if len(shape) > rank:
        return None
    padded = (1,) * (rank - len(shape)) + shape
    if padded[1] != c or any(d != 1 for i, d in enumerate(padded) if i != 1):
        return None
    return s.astype(np.float64).reshape(-1)
