"""Lowering of data-movement ops to OpenCL launches (see lower/base.py for the contract).

Every layout op is expressed as a strided copy over an iteration space (dims, source strides,
destination strides), collapsed so that contiguous runs become one dim; the kernel moves bits,
so programs depend only on element size and rank. Reshape & co. are views (no kernel).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32, view_op
from .common import (BIT_TYPES, STORAGE_CL, attr_str, check_int32_sizes, dtype_of, fill_bits, grid, plan_constants,
                     storage_type, work_size)
from .index_space import ROW_GROUP, ROW_VEC, collapse, collapse_copy, contiguous_strides, row_layout
from .parts import parts_launch

log = logging.getLogger(__name__)


def copy_launches(ctx: LowerCtx, src, dst, dtype: np.dtype, dims: Sequence[int], src_strides: Sequence[int],
                  dst_strides: Sequence[int], src_off: int = 0, dst_off: int = 0) -> list:
    """One launch copying the iteration space `dims` from src to dst (element strides/offsets)."""
    n = int(np.prod(dims, dtype=np.int64))
    if n == 0:
        return []
    d, s, t = collapse_copy(dims, src_strides, dst_strides)
    if (np.dtype(dtype).itemsize == 4 and len(d) in (2, 3) and t[-1] == 1 and s[-2] == 1
            and min(d[-2], d[-1]) >= 16 and s[-1] >= d[-2] and t[-2] >= d[-1]):
        # the last two axes swapped (NCHW <-> NHWC): 16 x 16 tiles, vectors on both sides
        z, sz, tz = (d[0], s[0], t[0]) if len(d) == 3 else (1, 0, 0)
        return [Launch("movement", "transpose_tiles", (-(-d[-2] // 16), -(-d[-1] // 16), z),
                       [src, dst, i32(d[-2]), i32(d[-1]), i32(s[-1]), i32(t[-2]), i32(sz), i32(tz), i32(src_off),
                        i32(dst_off)], (1, 1, 1), {"T": "uint"}, ctx.label())]
    g, l = work_size(ctx, n)
    if len(d) == 1 and s[0] == 1 and t[0] == 1:
        return [Launch("movement", "copy", g, [src, dst, i32(n), i32(src_off), i32(dst_off)], l,
                       {"T": storage_type(dtype)}, ctx.label())]
    rl = row_layout(ctx.device, d, [s, t], base=[src_off, dst_off])
    if rl is not None:  # rows of the innermost dim, offsets from the host (BERT's head transposes 2x faster)
        gsize, group, inner, rows, rowoff, last, row_defines = rl
        return [Launch("movement", "strided_copy_rows", gsize,
                       [src, dst, i32(inner), i32(rows), ctx.const_buffer(rowoff), ctx.const_buffer(last)], group,
                       {"T": storage_type(dtype), **row_defines}, ctx.label())]
    meta = ctx.const_buffer(np.array(d + s + t, dtype=np.int32))
    return [Launch("movement", "strided_copy", g, [src, dst, i32(n), i32(src_off), i32(dst_off), meta], l,
                   {"T": storage_type(dtype), "RANK": len(d)}, ctx.label())]


# Moves copy bits: each output is stored as the data input is, half or float (and Concat's
# inputs all so: passes/precision.py casts the others).
MOVES_HALF = HalfIO((0,), tuple(range(64)), follows=0)


def supports_movable(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """supports() of the ops that only move bits: input 0 and the outputs are bool, integer or
    float tensors of 1, 2, 4 or 8 bytes (the storage types), bfloat16 and the float8 types too."""
    for name in list(node.inputs[:1]) + list(node.outputs):
        dt = dtype_of(graph, name)
        if dt is not None and dt.name not in BIT_TYPES and (dt.kind not in "biuf" or dt.itemsize not in STORAGE_CL):
            return f"tensor {name!r} has dtype {dt}, not movable by the OpenCL kernels"
    return None


# --- Transpose -----------------------------------------------------------------------------------
@device_op("Transpose", supports=supports_movable, half=MOVES_HALF)
def lower_transpose(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(x.shape)
    perm = ctx.attr("perm") or list(range(r - 1, -1, -1))
    ins = contiguous_strides(x.shape)
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, out.shape, [ins[p] for p in perm],
                         contiguous_strides(out.shape))


# --- Concat / Split ------------------------------------------------------------------------------
@device_op("Concat", supports=supports_movable, half=HalfIO(tuple(range(1024)), (0,), follows=0))
def lower_concat(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(out.shape)
    axis = int(ctx.attr("axis", 1 if ctx.opset < 4 else 0))
    axis = axis + r if axis < 0 else axis
    ost = contiguous_strides(out.shape)
    present = [i for i, t in enumerate(ctx.inputs) if t is not None and t.size]
    one = parts_launch(ctx, "concat_parts", ctx.out(0), [ctx.buf(i) for i in present],
                       [tuple(ctx.inputs[i].shape) for i in present], axis, out.dtype)
    if one is not None:
        return [one]
    launches, pos = [], 0
    for i, t in enumerate(ctx.inputs):
        if t is None:
            continue
        if t.size:
            launches += copy_launches(ctx, ctx.buf(i), ctx.out(0), out.dtype, t.shape, contiguous_strides(t.shape),
                                      ost, 0, pos * ost[axis])
        pos += int(t.shape[axis]) if len(t.shape) else 0
    return launches


def _supports_split(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return supports_movable(node, graph, target)


@device_op("Split", supports=_supports_split, half=MOVES_HALF)
def lower_split(ctx: LowerCtx) -> list:
    """Output sizes come from the concrete output shapes, so `split` needs no parsing."""
    x = ctx.inputs[0]
    check_int32_sizes(ctx)
    r = len(x.shape)
    axis = int(ctx.attr("axis", 0))
    axis = axis + r if axis < 0 else axis
    ist = contiguous_strides(x.shape)
    if all(t is not None for t in ctx.outputs) and x.size:
        one = parts_launch(ctx, "split_parts", ctx.buf(0), [ctx.out(j) for j in range(len(ctx.outputs))],
                           [tuple(t.shape) for t in ctx.outputs], axis, x.dtype)
        if one is not None:
            return [one]
    launches, pos = [], 0
    for j, t in enumerate(ctx.outputs):
        if t is None:
            continue
        if t.size:
            launches += copy_launches(ctx, ctx.buf(0), ctx.out(j), x.dtype, t.shape, ist,
                                      contiguous_strides(t.shape), pos * ist[axis], 0)
        pos += int(t.shape[axis])
    return launches


# --- Slice ---------------------------------------------------------------------------------------
def slice_params(node: Node, graph: Graph, opset: int) -> Optional[tuple]:
    """(starts, axes, steps) when known without running the graph, else None."""
    if opset < 10:
        starts = node.attr("starts")
        axes = node.attr("axes")
        return None if starts is None else (list(starts), None if axes is None else list(axes), None)
    starts = graph.const(node.input(1))
    if starts is None:
        return None
    axes = graph.const(node.input(3)) if node.input(3) else None
    if node.input(3) and axes is None:
        return None
    steps = graph.const(node.input(4)) if node.input(4) else None
    if node.input(4) and steps is None:
        return None
    return ([int(v) for v in starts.reshape(-1)], None if axes is None else [int(v) for v in axes.reshape(-1)],
            None if steps is None else [int(v) for v in steps.reshape(-1)])


def _supports_slice(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if slice_params(node, graph, graph.opset(node.domain)) is None and not plan_constants(node, graph, (1, 2, 3, 4)):
        return "Slice with computed starts, ends, axes or steps runs on the host"
    return supports_movable(node, graph, target)


@device_op("Slice", supports=_supports_slice, half=MOVES_HALF)
def lower_slice(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    params = slice_params(ctx.node, ctx.graph, ctx.opset)
    if params is None:
        raise ValueError(f"{ctx.node.name}: Slice parameters are not constant")
    starts, axes, steps = params
    r = len(x.shape)
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    ist = contiguous_strides(x.shape)
    src_st, off = list(ist), 0
    for s, a, st in zip(starts, axes, steps):
        a = a + r if a < 0 else a
        dim = int(x.shape[a])
        s = s + dim if s < 0 else s
        s = min(max(s, 0), dim) if st > 0 else min(max(s, 0), dim - 1)
        off += s * ist[a]
        src_st[a] = st * ist[a]
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, out.shape, src_st, contiguous_strides(out.shape),
                         off, 0)


# --- Expand / Tile -------------------------------------------------------------------------------
@device_op("Expand", supports=supports_movable, half=MOVES_HALF)
def lower_expand(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dims, (st,) = collapse(out.shape, [x.shape])
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, dims, st, contiguous_strides(dims))


@device_op("Tile", supports=supports_movable, half=MOVES_HALF)
def lower_tile(ctx: LowerCtx) -> list:
    """Tile as a broadcast over interleaved (repeat, dim) pairs; repeats come from the output shape."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    ist = contiguous_strides(x.shape)
    dims, st = [], []
    for d, od, s in zip(x.shape, out.shape, ist):
        dims += [int(od) // int(d), int(d)]
        st += [0, s]
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, dims, st, contiguous_strides(dims))


# --- Pad (constant, edge, reflect, wrap) -------------------------------------------------------------------------
def _pad_params(node: Node, graph: Graph, opset: int) -> Optional[tuple]:
    """(pads, value, axes) when constant."""
    if opset < 11:
        return list(node.attr("pads", [])), float(node.attr("value", 0.0)), None
    pads = graph.const(node.input(1))
    if pads is None:
        return None
    value = None
    if node.input(2):
        value = graph.const(node.input(2))
        if value is None:
            return None
    axes = None
    if node.input(3):
        axes = graph.const(node.input(3))
        if axes is None:
            return None
        axes = [int(a) for a in axes.reshape(-1)]
    return [int(p) for p in pads.reshape(-1)], value, axes


def _supports_pad(node: Node, graph: Graph, target: Target) -> Optional[str]:
    mode = node.attr("mode", "constant")
    mode = attr_str(mode)
    if mode not in _PAD_MODES:
        return f"Pad mode {mode!r} runs on the host"
    if _pad_params(node, graph, graph.opset(node.domain)) is None and not plan_constants(node, graph, (1, 2, 3)):
        return "Pad with computed pads, value or axes runs on the host"
    return supports_movable(node, graph, target)


@device_op("Pad", supports=_supports_pad, half=MOVES_HALF)
def lower_pad(ctx: LowerCtx) -> list:
    """Fill the output with the pad value, then copy the (possibly cropped) input into it."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    params = _pad_params(ctx.node, ctx.graph, ctx.opset)
    if params is None:
        raise ValueError(f"{ctx.node.name}: Pad parameters are not constant")
    pads, value, axes = params
    r = len(x.shape)
    axes = [a + r if a < 0 else a for a in (axes if axes is not None else range(r))]
    begin, end = [0] * r, [0] * r
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + len(axes)]
    mode = ctx.attr("mode", "constant")
    mode = attr_str(mode)
    if _PAD_MODES[mode]:
        if x.size == 0:
            raise ValueError(f"{ctx.node.name}: Pad mode {mode!r} of an empty tensor")
        meta = ctx.const_buffer(np.array([int(d) for d in out.shape] + [int(d) for d in x.shape]
                                         + contiguous_strides(x.shape) + begin, np.int32))
        g, l = work_size(ctx, out.size)
        return [Launch("movement", "pad_index", g, [ctx.buf(0), ctx.out(0), i32(out.size), meta], l,
                       {"T": storage_type(x.dtype), "RANK": max(r, 1), "MODE": _PAD_MODES[mode]}, ctx.label())]
    dt = np.dtype(out.dtype)
    bits = fill_bits(np.zeros(1, dt) if value is None else value, dt)
    g, l = work_size(ctx, out.size)
    launches = [Launch("movement", "fill", g, [ctx.out(0), i32(out.size), bits], l, {"T": storage_type(dt)},
                       ctx.label())]
    ist, ost = contiguous_strides(x.shape), contiguous_strides(out.shape)
    dims, soff, doff = [], 0, 0
    for a in range(r):
        lo = max(0, -begin[a])  # negative pads crop the input
        hi = int(x.shape[a]) - max(0, -end[a])
        dims.append(max(0, hi - lo))
        soff += lo * ist[a]
        doff += max(0, begin[a]) * ost[a]
    if all(d > 0 for d in dims):
        launches += copy_launches(ctx, ctx.buf(0), ctx.out(0), dt, dims, ist, ost, soff, doff)
    return launches


_PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}


# --- Gather --------------------------------------------------------------------------------------
def _supports_gather(node: Node, graph: Graph, target: Target) -> Optional[str]:
    dt = dtype_of(graph, node.input(1))
    if dt is not None and dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        return f"Gather indices of dtype {dt.name}"
    return supports_movable(node, graph, target)


@device_op("Gather", supports=_supports_gather, half=MOVES_HALF)
def lower_gather(ctx: LowerCtx) -> list:
    x, ind, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(x.shape)
    axis = int(ctx.attr("axis", 0))
    axis = axis + r if axis < 0 else axis
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    axis_len = int(x.shape[axis])
    if axis_len == 0:
        raise ValueError(f"{ctx.node.name}: Gather from an empty axis")
    nidx = ind.size
    ti = "int" if np.dtype(ind.dtype) == np.int32 else "long"
    if inner >= ROW_VEC:
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        gsize, ls = grid(ctx.device, (-(-inner // ROW_VEC), nidx, outer), (1, ROW_GROUP[1], 1))
        head = [ctx.buf(0), ctx.buf(1), ctx.out(0)]
        tail = [i32(nidx), i32(axis_len), i32(outer)]
        return [Launch("movement", "gather_rows", gsize, head + [i32(inner)] + tail, ls,
                       {"T": storage_type(x.dtype), "TI": ti}, ctx.label(),
                       noop_args=head + [i32(0)] + tail)]  # inner = 0: code generated early
    g, l = work_size(ctx, out.size)
    return [Launch("movement", "gather", g, [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(out.size), i32(inner),
                                             i32(nidx), i32(axis_len)], l, {"T": storage_type(x.dtype), "TI": ti},
                   ctx.label())]


# --- views ---------------------------------------------------------------------------------------
def _supports_dropout(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if len(node.outputs) > 1 and node.outputs[1]:
        return "Dropout's mask output is not produced on the device"
    if node.input(2):
        tm = graph.const(node.input(2))
        if tm is None:
            return "Dropout with a run-time training_mode runs on the host"
        if bool(np.asarray(tm).reshape(-1)[0]):
            return "Dropout in training mode runs on the host"
    return None


view_op("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
view_op("Dropout", supports=_supports_dropout)
