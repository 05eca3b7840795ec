"""Lowering of normalisation ops to OpenCL launches (see lower/base.py for the contract).

BatchNormalization (inference) becomes a per-channel affine y = x*a + b: with constant
parameters (a, b) are computed here once, else a tiny kernel computes them into scratch.
LRN, LayerNormalization and InstanceNormalization have one kernel each.
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, f32, i32
from .common import F16, F32, check_dtypes, check_int32_sizes, grid, work_size

log = logging.getLogger(__name__)

_F32 = {F32}


def _big(ctx: LowerCtx) -> None:
    check_int32_sizes(ctx)


def _used_outputs(node: Node) -> int:
    return sum(1 for o in node.outputs[1:] if o)


# --- BatchNormalization --------------------------------------------------------------------------
def _supports_bn(node: Node, graph: Graph, target: Target) -> Optional[str]:
    opset = graph.opset(node.domain)
    if opset < 7 and int(node.attr("is_test", 0)) == 0:
        return "BatchNormalization before opset 7 without is_test=1 is training mode"
    if int(node.attr("training_mode", 0)):
        return "BatchNormalization training_mode=1 runs on the host"
    if int(node.attr("spatial", 1)) == 0:
        return "BatchNormalization spatial=0 runs on the host"
    if _used_outputs(node):
        return "BatchNormalization's running statistics outputs run on the host"
    return check_dtypes(node, graph, _F32)


@device_op("BatchNormalization", supports=_supports_bn)
def lower_batchnorm(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    eps = float(ctx.attr("epsilon", 1e-5))
    C = int(x.shape[1]) if len(x.shape) > 1 else 1
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    params = [ctx.const(i) for i in range(1, 5)]
    launches = []
    if all(p is not None for p in params):
        scale, bias, mean, var = (np.asarray(p, np.float32).reshape(-1) for p in params)
        a = scale / np.sqrt(var + np.float32(eps))
        ab = ctx.const_buffer(np.concatenate([a, bias - mean * a]).astype(np.float32))
    else:
        ab = ctx.scratch(8 * C)
        g, l = work_size(ctx, C, cap=64)
        launches.append(Launch("norm", "bn_prepare", g, [ctx.buf(1), ctx.buf(2), ctx.buf(3), ctx.buf(4), ab,
                                                         i32(C), f32(eps)], l, {}, ctx.label()))
    planes = out.size // max(inner, 1)
    gsize, ls = grid(ctx.device, (-(-inner // 16), planes), (1, 8))  # 8 planes per group
    launches.append(Launch("norm", "channel_affine", gsize,
                           [ctx.buf(0), ab, ctx.out(0), i32(planes), i32(C), i32(inner)], ls, {}, ctx.label()))
    return launches


# --- LRN -----------------------------------------------------------------------------------------
def _supports_f32(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, _F32)


@device_op("LRN", supports=_supports_f32)
def lower_lrn(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    size = int(ctx.attr("size"))
    C = int(x.shape[1])
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    g, l = work_size(ctx, out.size)
    return [Launch("norm", "lrn", g, [ctx.buf(0), ctx.out(0), i32(out.size), i32(C), i32(inner), i32(size),
                                      f32(ctx.attr("alpha", 1e-4)), f32(ctx.attr("beta", 0.75)),
                                      f32(ctx.attr("bias", 1.0))], l, {}, ctx.label())]


# --- LayerNormalization --------------------------------------------------------------------------
def _supports_ln(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if node.op_type == "LayerNormalization" and _used_outputs(node):
        for o in node.outputs[1:]:
            v = graph.values.get(o) if o else None
            if v is not None and v.dtype is not None and np.dtype(v.dtype) != np.float32:
                return f"LayerNormalization output {o!r} of dtype {np.dtype(v.dtype).name}"
    # X and Y may be half storage (SessionOptions.precision); scale, bias and statistics float32
    return check_dtypes(node, graph, _F32 | {F16}, [0]) or check_dtypes(node, graph, _F32, [1, 2])


_LN_HALF = HalfIO((0,), (0,))


@device_op("LayerNormalization", "RMSNormalization", supports=_supports_ln, half=_LN_HALF)
@device_op("LayerNormalization", "RMSNormalization", supports=_supports_ln, domain="clglow",
           half=_LN_HALF)  # passes/fuse_layernorm.py
def lower_layernorm(ctx: LowerCtx) -> list:
    """Scale/bias broadcastable to the normalised shape are expanded here when constant."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(x.shape)
    axis = int(ctx.attr("axis", -1))
    axis = axis + r if axis < 0 else axis
    norm_shape = tuple(int(d) for d in x.shape[axis:])
    length = int(np.prod(norm_shape, dtype=np.int64))
    rows = x.size // length if length else 0

    def param(i: int):
        t = ctx.inputs[i]
        if t.size == length:
            return ctx.buf(i)
        c = ctx.const(i)
        if c is None:
            raise ValueError(f"{ctx.node.name}: run-time LayerNormalization input {i} of shape {t.shape} "
                             f"must have the normalised shape {norm_shape}")
        return ctx.const_buffer(np.broadcast_to(np.asarray(c, np.float32), norm_shape).copy())

    args = [ctx.buf(0), param(1)]
    defines: dict = {"XH": 1} if x.dtype == F16 else {}
    if out.dtype == F16:
        defines["YH"] = 1
    if ctx.node.op_type == "RMSNormalization":
        defines["RMS"] = None
    elif ctx.has_input(2):
        args.append(param(2))
        defines["HAS_BIAS"] = None
    args.append(ctx.out(0))
    if ctx.node.op_type == "LayerNormalization" and _used_outputs(ctx.node):
        outs = ctx.node.outputs
        args += [ctx.out(1) if len(outs) > 1 and outs[1] else ctx.scratch(4 * rows),
                 ctx.out(2) if len(outs) > 2 and outs[2] else ctx.scratch(4 * rows)]
        defines["HAS_STATS"] = None
    g, l = work_size(ctx, rows, cap=64)
    eps = f32(ctx.attr("epsilon", 1e-5))
    return [Launch("norm", "layernorm", g, args + [i32(rows), i32(length), eps], l, defines, ctx.label(),
                   noop_args=args + [i32(0), i32(length), eps])]  # rows = 0: code generated early


# --- ChannelNorm (passes/fuse_layernorm.fuse_channel_norm) -----------------------------------------
def _supports_channel_norm(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """X [N, C, ...] float32 or half storage, scale and bias [C] float32 constants or values."""
    why = check_dtypes(node, graph, _F32 | {F16}, [0], outputs=True) or check_dtypes(node, graph, _F32, [1, 2])
    if why:
        return why
    x = graph.values.get(node.input(0))
    if x is not None and x.shape is not None and len(x.shape) < 2:
        return "ChannelNorm needs [N, C, ...]"
    return None


@device_op("ChannelNorm", supports=_supports_channel_norm, domain="clglow", half=_LN_HALF)
def lower_channel_norm(ctx: LowerCtx) -> list:
    """LayerNormalization across axis 1 of [N, C, inner] (norm.cl channelnorm): 16 pixels a
    work-item."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    n, c = int(x.shape[0]), int(x.shape[1])
    inner = int(np.prod(x.shape[2:], dtype=np.int64))

    def param(i: int, fill: float):
        if not (ctx.has_input(i) and ctx.node.input(i)):
            return ctx.const_buffer(np.full(c, fill, np.float32))
        if ctx.inputs[i].size == c:
            return ctx.buf(i)
        raise InvalidModel(f"ChannelNorm input {i} of shape {ctx.inputs[i].shape} for {c} channels",
                           node=ctx.label())

    defines: dict = {"XH": 1} if x.dtype == F16 else {}
    if out.dtype == F16:
        defines["YH"] = 1
    items = n * -(-inner // 16)
    g, l = work_size(ctx, items, cap=64)
    args = [ctx.buf(0), param(1, 1.0), param(2, 0.0), ctx.out(0)]
    eps = f32(ctx.attr("epsilon", 1e-5))
    return [Launch("norm", "channelnorm", g, args + [i32(n), i32(c), i32(inner), eps], l, defines, ctx.label(),
                   noop_args=args + [i32(0), i32(c), i32(inner), eps])]


# --- InstanceNormalization -----------------------------------------------------------------------
@device_op("InstanceNormalization", supports=_supports_f32)
def lower_instancenorm(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    C = int(x.shape[1])
    planes = int(x.shape[0]) * C
    length = int(np.prod(x.shape[2:], dtype=np.int64))
    g, l = work_size(ctx, planes, cap=64)
    return [Launch("norm", "instancenorm", g, [ctx.buf(0), ctx.buf(1), ctx.buf(2), ctx.out(0), i32(planes), i32(C),
                                               i32(length), f32(ctx.attr("epsilon", 1e-5))], l, {}, ctx.label())]


# --- GroupNormalization / LpNormalization ---------------------------------------------------------
@device_op("GroupNormalization", supports=_supports_f32)
def lower_groupnorm(ctx: LowerCtx) -> list:
    """Opset 18 gives scale/bias per group: constant ones are expanded per channel here."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    N, C = int(x.shape[0]), int(x.shape[1])
    G = int(ctx.attr("num_groups"))
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    cpg = C // G

    def param(i: int):
        t = ctx.inputs[i]
        if t.size == C:
            return ctx.buf(i)
        c = ctx.const(i)
        if c is None:
            raise ValueError(f"{ctx.node.name}: run-time per-group GroupNormalization parameters")
        return ctx.const_buffer(np.repeat(np.asarray(c, np.float32).reshape(-1), cpg))

    g, l = work_size(ctx, N * G, cap=64)
    return [Launch("norm", "groupnorm", g, [ctx.buf(0), param(1), param(2), ctx.out(0), i32(N * G), i32(G),
                                            i32(cpg), i32(inner), f32(ctx.attr("epsilon", 1e-5))], l, {},
                   ctx.label())]


def _supports_lp(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if int(node.attr("p", 2)) not in (1, 2):
        return "LpNormalization with p other than 1 or 2"
    return check_dtypes(node, graph, _F32)


@device_op("LpNormalization", supports=_supports_lp)
def lower_lpnorm(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(x.shape)
    axis = int(ctx.attr("axis", -1))
    axis = axis + r if axis < 0 else axis
    length = int(x.shape[axis])
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    rows = x.size // length
    g, l = work_size(ctx, rows, cap=64)
    return [Launch("norm", "lpnorm", g, [ctx.buf(0), ctx.out(0), i32(rows), i32(length), i32(inner),
                                         i32(ctx.attr("p", 2))], l, {}, ctx.label())]
