"""Shape-derived and generated tensors on the device: Shape, Size, ConstantOfShape, Range,
EyeLike, Trilu, OneHot, plus DepthToSpace/SpaceToDepth as strided copies.

Shape/Size/ConstantOfShape of concrete shapes are normally folded at plan time; these
lowerings cover what remains (and keep such nodes off the host when fallback is disabled).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import (BOOL, F16, INDEX, check_dtypes, cl_type, fill_bits, floats, norm_axis, numeric, storage_type,
                     type_defines, work_size)
from .index_space import contiguous_strides
from .movement import copy_launches, supports_movable

log = logging.getLogger(__name__)


def _const_to_output(ctx: LowerCtx, arr: np.ndarray) -> list:
    out = ctx.outputs[0]
    arr = np.ascontiguousarray(np.asarray(arr, dtype=out.dtype).reshape(-1))
    if arr.size == 0:
        return []
    src = ctx.const_buffer(arr)
    return copy_launches(ctx, src, ctx.out(0), np.dtype(out.dtype), [arr.size], [1], [1])


@device_op("Shape")
def lower_shape(ctx: LowerCtx) -> list:
    shape = np.array(ctx.inputs[0].shape, dtype=np.int64)
    r = len(shape)
    start, end = int(ctx.attr("start", 0)), int(ctx.attr("end", r))
    start = max(0, min(r, start + r if start < 0 else start))
    end = max(0, min(r, end + r if end < 0 else end))
    return _const_to_output(ctx, shape[start:end])


@device_op("Size")
def lower_size(ctx: LowerCtx) -> list:
    return _const_to_output(ctx, np.array([ctx.inputs[0].size], dtype=np.int64))


def _fill(ctx: LowerCtx, value: np.ndarray) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    dt = np.dtype(out.dtype)
    g, l = work_size(ctx, out.size)
    return [Launch("movement", "fill", g, [ctx.out(0), i32(out.size), fill_bits(value, dt)], l,
                   {"T": storage_type(dt)}, ctx.label())]


def _supports_cos(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target) | {BOOL, F16}, [], outputs=True)


@device_op("ConstantOfShape", supports=_supports_cos)
def lower_constant_of_shape(ctx: LowerCtx) -> list:
    value = ctx.attr("value")
    return _fill(ctx, np.zeros(1, np.float32) if value is None else np.asarray(value))


def _supports_range(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target))


@device_op("Range", supports=_supports_range)
def lower_range(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    dt = np.dtype(out.dtype)
    g, l = work_size(ctx, out.size)
    return [Launch("generate", "range", g, [ctx.buf(0), ctx.buf(2), ctx.out(0), i32(out.size)], l,
                   type_defines(T=dt), ctx.label())]


def _supports_eyelike(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target) | {BOOL}, [], outputs=True)


@device_op("EyeLike", supports=_supports_eyelike)
def lower_eyelike(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    rows, cols = int(out.shape[0]), int(out.shape[1])
    g, l = work_size(ctx, out.size)
    return [Launch("generate", "eye", g, [ctx.out(0), i32(out.size), i32(rows), i32(cols), i32(int(ctx.attr("k", 0)))],
                   l, type_defines(T=np.dtype(out.dtype)), ctx.label())]


def _supports_trilu(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target) | {BOOL}, [0])


@device_op("Trilu", supports=_supports_trilu)
def lower_trilu(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    k = 0
    if ctx.has_input(1):
        c = ctx.const(1)
        if c is None:
            raise ValueError(f"{ctx.node.name}: Trilu with a run-time k")
        k = int(np.asarray(c).reshape(-1)[0])
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    k = max(min(k, cols + 1), -rows - 1)
    g, l = work_size(ctx, out.size)
    return [Launch("generate", "trilu", g, [ctx.buf(0), ctx.out(0), i32(out.size), i32(rows), i32(cols), i32(k),
                                            i32(int(ctx.attr("upper", 1)))], l,
                   {"T": storage_type(x.dtype)}, ctx.label())]


def _supports_onehot(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Integer or float indices (a float index is truncated to an integer, as onnx.reference
    casts it), numeric values."""
    return check_dtypes(node, graph, set(INDEX) | floats(target), [0]) or \
        check_dtypes(node, graph, numeric(target), [2])


@device_op("OneHot", supports=_supports_onehot)
def lower_onehot(ctx: LowerCtx) -> list:
    ind, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    r = len(out.shape)
    axis = norm_axis(ctx.attr("axis", -1), r)
    depth = int(out.shape[axis])
    inner = int(np.prod(out.shape[axis + 1:], dtype=np.int64))
    defines = type_defines(T=np.dtype(out.dtype))
    defines["TI"] = cl_type(np.dtype(ind.dtype)) if np.dtype(ind.dtype).kind == "f" else \
        "int" if np.dtype(ind.dtype) == np.int32 else "long"
    if np.dtype(ind.dtype) == np.float64:
        defines["USE_FP64"] = None
    g, l = work_size(ctx, out.size)
    return [Launch("generate", "onehot", g, [ctx.buf(0), ctx.buf(2), ctx.out(0), i32(out.size), i32(depth),
                                             i32(inner)], l, defines, ctx.label())]


# --- DepthToSpace / SpaceToDepth: reshape + transpose as one strided copy ------------------------
@device_op("DepthToSpace", "SpaceToDepth", supports=supports_movable)
def lower_depth_space(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    b = int(ctx.attr("blocksize"))
    if ctx.node.op_type == "DepthToSpace":
        n, c, h, w = (int(d) for d in x.shape)
        oc = c // (b * b)
        if ctx.attr("mode", "DCR") == "CRD":
            src_shape, perm = (n, oc, b, b, h, w), (0, 1, 4, 2, 5, 3)
        else:
            src_shape, perm = (n, b, b, oc, h, w), (0, 3, 4, 1, 5, 2)
    else:
        n, c, h, w = (int(d) for d in x.shape)
        src_shape = (n, c, h // b, b, w // b, b)
        # DCR: (n, b, b, c, h/b, w/b); CRD (opset 28): (n, c, b, b, h/b, w/b)
        perm = (0, 1, 3, 5, 2, 4) if ctx.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    st = contiguous_strides(src_shape)
    dims = [src_shape[p] for p in perm]
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, dims, [st[p] for p in perm],
                         contiguous_strides(dims))
