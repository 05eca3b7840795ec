"""Lowering of index-driven movement: GatherElements, ScatterElements (and legacy Scatter),
GatherND, ScatterND (see lower/base.py for the contract).

Gathers are one work-item per output element. Scatters copy data into the output, then apply
the updates: one work-item per update without a reduction, else one work-item applying them in
order (repeated indices then accumulate exactly as the reference does).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..dtypes import cl_type
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32, i64
from .common import (F64, INDEX, attr_str, check_dtypes, check_int32_sizes, dtype_of, norm_axis, numeric, storage_type,
                     work_size)
from .index_space import contiguous_strides
from .movement import copy_launches, supports_movable


def _reduction(node: Node) -> str:
    r = node.attr("reduction", "none")
    return attr_str(r)


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    r = check_dtypes(node, graph, INDEX, inputs=[1])
    if r:
        return r
    red = _reduction(node)
    if red != "none":
        dt = dtype_of(graph, node.input(0))
        if dt is not None and dt not in numeric(target):
            return f"{node.op_type} reduction {red!r} over dtype {dt.name} runs on the host"
    return supports_movable(node, graph, target)


def _defines(ctx: LowerCtx, dt, idx_dt, **extra) -> dict:
    d = {"T": storage_type(dt), "TI": cl_type(idx_dt)}
    red = _reduction(ctx.node)
    if red != "none":
        d["TV"] = cl_type(dt)
        d[f"REDUCE_{red.upper()}"] = None
        if np.dtype(dt) == F64:
            d["USE_FP64"] = None
    d.update(extra)
    return d


@device_op("GatherElements", supports=_supports)
def lower_gather_elements(ctx: LowerCtx) -> list:
    x, ind, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(x.shape)
    axis = norm_axis(ctx.attr("axis", 0), r)
    meta = ctx.const_buffer(np.array(list(ind.shape) + contiguous_strides(x.shape), np.int32))
    g, l = work_size(ctx, out.size)
    return [Launch("indexing", "gather_elements", g, [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(out.size), meta,
                                                       i32(axis), i32(x.shape[axis])], l,
                   _defines(ctx, x.dtype, ind.dtype, RANK=max(r, 1)), ctx.label())]


def _copy_data(ctx: LowerCtx) -> list:
    x = ctx.inputs[0]
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, [x.size], [1], [1])


@device_op("ScatterElements", "Scatter", supports=_supports)
def lower_scatter_elements(ctx: LowerCtx) -> list:
    x, ind, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    launches = _copy_data(ctx)
    if ind.size == 0:
        return launches
    r = len(x.shape)
    axis = norm_axis(ctx.attr("axis", 0), r)
    meta = ctx.const_buffer(np.array(list(ind.shape) + contiguous_strides(x.shape), np.int32))
    serial = _reduction(ctx.node) != "none"
    g, l = ((1,), (1,)) if serial else work_size(ctx, ind.size)
    extra = {"RANK": max(r, 1)}
    if serial:
        extra["SERIAL"] = None
    launches.append(Launch("indexing", "scatter_elements", g, [ctx.buf(1), ctx.buf(2), ctx.out(0), i32(ind.size),
                                                                meta, i32(axis), i32(x.shape[axis])], l,
                           _defines(ctx, x.dtype, ind.dtype, **extra), ctx.label()))
    return launches


def _nd_meta(ctx: LowerCtx, shape, first: int, k: int):
    st = contiguous_strides(shape)
    return ctx.const_buffer(np.array([int(d) for d in shape[first:first + k]] + st[first:first + k] or [0],
                                     np.int32))


@device_op("ScatterND", supports=_supports)
def lower_scatter_nd(ctx: LowerCtx) -> list:
    x, ind, upd, out = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    launches = _copy_data(ctx)
    if upd.size == 0:
        return launches
    k = int(ind.shape[-1])
    inner = int(np.prod(x.shape[k:], dtype=np.int64))
    serial = _reduction(ctx.node) != "none"
    g, l = ((1,), (1,)) if serial else work_size(ctx, upd.size)
    extra = {"RANK": max(k, 1)}
    if serial:
        extra["SERIAL"] = None
    if k == 0:
        raise ValueError(f"{ctx.node.name}: ScatterND with empty index tuples")
    launches.append(Launch("indexing", "scatter_nd", g, [ctx.buf(1), ctx.buf(2), ctx.out(0), i32(upd.size),
                                                          i32(inner), _nd_meta(ctx, x.shape, 0, k)], l,
                           _defines(ctx, x.dtype, ind.dtype, **extra), ctx.label()))
    return launches


@device_op("GatherND", supports=_supports)
def lower_gather_nd(ctx: LowerCtx) -> list:
    x, ind, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    b = int(ctx.attr("batch_dims", 0))
    k = int(ind.shape[-1])
    if k == 0:
        raise ValueError(f"{ctx.node.name}: GatherND with empty index tuples")
    inner = int(np.prod(x.shape[b + k:], dtype=np.int64))
    per_batch = int(np.prod(ind.shape[b:-1], dtype=np.int64))
    batch_stride = int(np.prod(x.shape[b:], dtype=np.int64))
    g, l = work_size(ctx, out.size)
    return [Launch("indexing", "gather_nd", g, [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(out.size), i32(inner),
                                                 i32(max(per_batch, 1)), i64(batch_stride),
                                                 _nd_meta(ctx, x.shape, b, k)], l,
                   _defines(ctx, x.dtype, ind.dtype, RANK=k), ctx.label())]
