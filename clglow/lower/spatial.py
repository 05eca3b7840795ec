"""Lowering of CenterCropPad, ReverseSequence, MaxUnpool, AffineGrid and Upsample to OpenCL
(see lower/base.py).

- CenterCropPad is a Pad with centred (possibly negative) pads: the movement kernels' zero fill
  and strided copy of the overlap (no kernel of its own).
- ReverseSequence: one work-item per element reads its source along the time axis
  (spatial.cl reverse_sequence); sequence_lens stays a device tensor.
- MaxUnpool: zero fill, then one work-item per input element scatters it to its index
  (spatial.cl max_unpool); the index counts in the inferred shape, placed in a larger
  output_shape by its coordinates, as onnx.reference does.
- AffineGrid: one work-item per grid point (spatial.cl affine_grid).
- Upsample (opset 7-9, deprecated) is Resize with asymmetric coordinates and floor rounding:
  lowered by lower/resize.py's own functions on a Resize view of the node.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node, Value
from ..target import Target
from . import resize
from .base import Launch, LowerCtx, device_op, i32, lookup
from .common import (INDEX, attr_str, check_dtypes, check_int32_sizes, fill_bits, floats,
                     grid, norm_axis, shape_of, storage_type, type_defines, work_size)
from .index_space import contiguous_strides
from .movement import copy_launches, supports_movable


# ONNX element types without a numpy kind of their own (ml_dtypes, kind 'V') whose bits these
# ops move as they move any other 1- or 2-byte element (castlut.py computes with them)


def check_out_type(ctx: LowerCtx, src: int = 0) -> None:
    """Output 0 has input `src`'s dtype (the kernels write that type: a mismatched output buffer
    would be overrun)."""
    i, o = ctx.inputs[src], ctx.outputs[0]
    if np.dtype(i.dtype) != np.dtype(o.dtype):
        raise InvalidModel(f"{ctx.node.op_type} output {o.name!r} is {np.dtype(o.dtype).name}, its input "
                           f"{i.name!r} {np.dtype(i.dtype).name}", node=ctx.label(), tensor=o.name)


def _fill_zero(ctx: LowerCtx) -> Launch:
    """The movement kernel's fill of output 0 with zeros."""
    out = ctx.outputs[0]
    g, l = work_size(ctx, out.size)
    return Launch("movement", "fill", g, [ctx.out(0), i32(out.size), fill_bits(np.zeros(1, out.dtype), out.dtype)],
                  l, {"T": storage_type(out.dtype)}, ctx.label())


# --- CenterCropPad -------------------------------------------------------------------------------
@device_op("CenterCropPad", supports=supports_movable)
def lower_center_crop_pad(ctx: LowerCtx) -> list:
    """Per axis the centred offset of the output in the input (crop: the input starts later,
    pad: the output does; the odd element goes to the end either way), then one copy of the
    overlap into the zero-filled output."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    r = len(x.shape)
    ist, ost = contiguous_strides(x.shape), contiguous_strides(out.shape)
    dims, soff, doff = [], 0, 0
    for a in range(r):
        i_d, o_d = int(x.shape[a]), int(out.shape[a])
        crop, pad = max(0, i_d - o_d) // 2, max(0, o_d - i_d) // 2
        dims.append(min(i_d, o_d))
        soff += crop * ist[a]
        doff += pad * ost[a]
    launches = [] if out.size == x.size and dims == [int(d) for d in out.shape] else [_fill_zero(ctx)]
    if all(d > 0 for d in dims):
        launches += copy_launches(ctx, ctx.buf(0), ctx.out(0), x.dtype, dims, ist, ost, soff, doff)
    return launches


# --- ReverseSequence -----------------------------------------------------------------------------
def _supports_reverse(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, INDEX, inputs=[1]) or supports_movable(node, graph, target)


@device_op("ReverseSequence", supports=_supports_reverse)
def lower_reverse_sequence(ctx: LowerCtx) -> list:
    x, lens, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    r = len(x.shape)
    if r < 2:
        raise InvalidModel(f"ReverseSequence input of rank {r}; at least 2 required", node=ctx.label())
    ta, ba = norm_axis(ctx.attr("time_axis", 0), r), norm_axis(ctx.attr("batch_axis", 1), r)
    if {ta, ba} != {0, 1}:
        raise InvalidModel(f"ReverseSequence time_axis {ta} and batch_axis {ba}: the spec allows 0 and 1",
                           node=ctx.label())
    if lens.size != int(x.shape[ba]):
        raise InvalidModel(f"sequence_lens has {lens.size} entries for a batch of {x.shape[ba]}",
                           node=ctx.label(), tensor=lens.name)
    st = contiguous_strides(x.shape)
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    gsize, ls = grid(ctx.device, (inner, int(x.shape[ba]), int(x.shape[ta])), (64, 1, 1))
    return [Launch("spatial", "reverse_sequence", gsize,
                   [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(inner), i32(x.shape[ba]), i32(x.shape[ta]), i32(st[ta]),
                    i32(st[ba])], ls,
                   {"T": storage_type(x.dtype), "TI": "int" if lens.dtype == np.int32 else "long"}, ctx.label())]


# --- MaxUnpool -----------------------------------------------------------------------------------
def _supports_unpool(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, INDEX, inputs=[1]) or supports_movable(node, graph, target)


def _inferred_shape(ctx: LowerCtx) -> list:
    """The output shape MaxUnpool infers from kernel_shape, strides and pads (what indices count in)."""
    x = ctx.inputs[0]
    ks = [int(k) for k in ctx.attr("kernel_shape", [])]
    nd = len(x.shape) - 2
    if len(ks) != nd:
        raise InvalidModel(f"MaxUnpool kernel_shape {ks} does not match {nd} spatial dims", node=ctx.label())
    st = [int(s) for s in ctx.attr("strides", [1] * nd)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
    return [int(x.shape[0]), int(x.shape[1])] + [(int(x.shape[2 + d]) - 1) * st[d] - (pads[d] + pads[nd + d]) + ks[d]
                                                 for d in range(nd)]


@device_op("MaxUnpool", supports=_supports_unpool)
def lower_max_unpool(ctx: LowerCtx) -> list:
    x, ind, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    if tuple(ind.shape) != tuple(x.shape):
        raise InvalidModel(f"MaxUnpool indices of shape {ind.shape} for X of shape {x.shape}",
                           node=ctx.label(), tensor=ind.name)
    inferred = _inferred_shape(ctx)
    if len(out.shape) != len(inferred) or any(int(o) < i for o, i in zip(out.shape, inferred)):
        raise InvalidModel(f"MaxUnpool output_shape {list(out.shape)} is smaller than the inferred {inferred}",
                           node=ctx.label())
    launches = [_fill_zero(ctx)]
    if x.size:
        meta = ctx.const_buffer(np.array(inferred + contiguous_strides(out.shape), np.int32))
        g, l = work_size(ctx, x.size)
        args = [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(x.size), i32(np.prod(inferred)), meta]
        defines = {"T": storage_type(x.dtype), "TI": "int" if ind.dtype == np.int32 else "long", "RANK": len(inferred)}
        if [int(o) for o in out.shape] == inferred:
            defines["SAME_SHAPE"] = None  # the index is the output offset: no coordinates
        launches.append(Launch("spatial", "max_unpool", g, args, l, defines, ctx.label()))
    return launches


# --- AffineGrid ----------------------------------------------------------------------------------
def _supports_affine(node: Node, graph: Graph, target: Target) -> Optional[str]:
    shp = shape_of(graph, node.input(0))
    if shp is not None and (len(shp) != 3 or shp[1] not in (2, 3, None)):
        return f"AffineGrid theta of shape {shp}"
    return check_dtypes(node, graph, floats(target), inputs=[0])


@device_op("AffineGrid", supports=_supports_affine)
def lower_affine_grid(ctx: LowerCtx) -> list:
    theta, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    sd = len(out.shape) - 2
    if sd not in (2, 3) or tuple(theta.shape) != (int(out.shape[0]), sd, sd + 1):
        raise InvalidModel(f"AffineGrid theta of shape {theta.shape} for a grid of shape {out.shape}",
                           node=ctx.label(), tensor=theta.name)
    defines = type_defines(F=theta.dtype)
    defines["SD"] = sd
    n, w, h = int(out.shape[0]), int(out.shape[-2]), int(out.shape[-3])
    d = int(out.shape[1]) if sd == 3 else 1
    align = bool(int(ctx.attr("align_corners", 0)))
    steps = []
    for s in (w, h, d):  # as onnx.reference's arange: start, step (float64, then theta's type)
        step = (2.0 / (s - 1) if s > 1 else 0.0) if align else 2.0 / s
        steps += [-1.0, step] if align else [-1.0 + step / 2, step]
    gsize, ls = grid(ctx.device, (w, h, n * d), (64, 1, 1))
    return [Launch("spatial", "affine_grid", gsize,
                   [ctx.buf(0), ctx.out(0), i32(n), i32(d), i32(h), i32(w),
                    ctx.const_buffer(np.array(steps, theta.dtype))], ls, defines, ctx.label())]


# --- Upsample ------------------------------------------------------------------------------------
def _resize_view(node: Node, graph: Graph) -> Optional[tuple]:
    """(node, graph) of the Resize (opset 9 semantics: scales as input 1) that this Upsample is;
    None when its scales are not known (Upsample-7's attribute, or a constant input 1)."""
    mode = attr_str(node.attr("mode"), "nearest")
    attrs = {"mode": "linear" if mode in ("linear", "bilinear") else mode,
             "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    values = graph.values
    scales = node.input(1)
    if not scales:
        sc = node.attr("scales")
        if sc is None:
            return None
        scales = f"{node.name}::scales"
        values = dict(values)
        values[scales] = Value(scales, np.dtype(np.float32), (len(sc),), np.asarray(sc, np.float32))
    rnode = Node("Resize", node.name, [node.input(0), scales], list(node.outputs), attrs)
    return rnode, Graph([rnode], values, list(graph.inputs), list(graph.outputs), {"": 9}, graph.name)


def _supports_upsample(node: Node, graph: Graph, target: Target) -> Optional[str]:
    view = _resize_view(node, graph)
    if view is None:
        return "Upsample without scales"
    if attr_str(view[0].attr("mode")) not in ("nearest", "linear"):
        return f"Upsample mode {attr_str(node.attr('mode'))!r}"
    if view[0].inputs[1] in graph.inputs and graph.const(view[0].inputs[1]) is None:
        # a graph input: a constant of each plan (runtime.engine.SHAPE_INPUTS), judged again then
        return check_dtypes(node, graph, floats(target), inputs=[0])
    return lookup(view[0]).supports(*view, target)  # Resize's own judgement of its view


@device_op("Upsample", supports=_supports_upsample)
def lower_upsample(ctx: LowerCtx) -> list:
    view = _resize_view(ctx.node, ctx.graph)
    if view is None:
        raise InvalidModel("Upsample without scales", node=ctx.label())
    rctx = LowerCtx(view[0], view[1], ctx.inputs[:1] + [None] * (len(view[0].inputs) - 1), ctx.outputs, ctx.device,
                    ctx.options)
    rctx.derived_memo = ctx.derived_memo
    return resize.lower_resize(rctx)
