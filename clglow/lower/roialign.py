"""Lowering of RoiAlign (opset 10, 16, 22) and MaxRoiPool to OpenCL (see lower/base.py).

One work-item per output element (roialign.cl) samples its bin as onnx.reference and onnxruntime
do: mode avg or max (the largest weighted tap, their definition), coordinate_transformation_mode
half_pixel (opset 16's default) or output_half_pixel (opset 10's only behaviour, with malformed
rois forced to 1 x 1), sampling_ratio 0 = ceil(roi size / output size) samples per bin,
spatial_scale. A batch index outside X gives zeros (the kernel cannot raise).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, f32, i32
from .common import INDEX, attr_str, check_dtypes, check_int32_sizes, floats, grid, type_defines
from .spatial import check_out_type

_CTM = ("half_pixel", "output_half_pixel")


def _ctm(node: Node, opset: int) -> str:
    return attr_str(node.attr("coordinate_transformation_mode"), "half_pixel" if opset >= 16 else "output_half_pixel")


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if attr_str(node.attr("mode"), "avg").lower() not in ("avg", "max"):
        return f"RoiAlign mode {attr_str(node.attr('mode'))!r}"
    if _ctm(node, graph.opset(node.domain)).lower() not in _CTM:
        return f"RoiAlign coordinate_transformation_mode {_ctm(node, graph.opset(node.domain))!r}"
    return (check_dtypes(node, graph, floats(target), inputs=[0, 1])
            or check_dtypes(node, graph, INDEX, inputs=[2]))


@device_op("RoiAlign", supports=_supports)
def lower_roi_align(ctx: LowerCtx) -> list:
    x, rois, bidx, out = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    if len(x.shape) != 4:
        raise InvalidModel(f"RoiAlign X of shape {x.shape}; [N, C, H, W] required", node=ctx.label(), tensor=x.name)
    r = int(out.shape[0])
    if tuple(rois.shape) != (r, 4) or tuple(bidx.shape) != (r,):
        raise InvalidModel(f"RoiAlign rois {rois.shape} and batch_indices {bidx.shape} for {r} rois "
                           f"([{r}, 4] and [{r}] required)", node=ctx.label(), tensor=rois.name)
    if np.dtype(rois.dtype) != np.dtype(x.dtype):
        raise InvalidModel("RoiAlign rois dtype differs from X", node=ctx.label(), tensor=rois.name)
    defines = type_defines(T=x.dtype)
    defines["TI"] = "int" if np.dtype(bidx.dtype) == np.int32 else "long"
    if attr_str(ctx.attr("mode"), "avg").lower() == "max":
        defines["MAXMODE"] = None
    if _ctm(ctx.node, ctx.opset).lower() == "half_pixel":
        defines["HALF"] = None
    n, c, h, w = (int(d) for d in x.shape)
    ph, pw = int(out.shape[2]), int(out.shape[3])
    g, l = grid(ctx.device, (ph * pw, c, r), (64, 1, 1))
    sampling, scale = int(ctx.attr("sampling_ratio", 0)), f32(ctx.attr("spatial_scale", 1.0))
    if sampling > 0:  # the taps found once per (roi, bin, sample), weighed per channel
        taps = r * ph * pw * sampling * sampling
        pos, wt = ctx.scratch(16 * taps), ctx.scratch(4 * np.dtype(x.dtype).itemsize * taps)
        d = {**defines, "SR": sampling}
        tg, tl = grid(ctx.device, (taps,), (64,))
        return [Launch("roialign", "roi_align_taps", tg, [ctx.buf(1), pos, wt, i32(r), i32(h), i32(w), i32(ph),
                                                          i32(pw), scale], tl, d, ctx.label()),
                Launch("roialign", "roi_align_sum", g, [ctx.buf(0), ctx.buf(2), pos, wt, ctx.out(0), i32(r), i32(c),
                                                        i32(h), i32(w), i32(ph), i32(pw), i32(n)], l, d, ctx.label())]
    args = [ctx.buf(0), ctx.buf(1), ctx.buf(2), ctx.out(0), i32(r), i32(c), i32(h), i32(w), i32(ph), i32(pw),
            i32(sampling), scale, i32(n)]
    return [Launch("roialign", "roi_align", g, args, l, defines, ctx.label())]


def _supports_max_roi_pool(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, floats(target), inputs=[0, 1])


@device_op("MaxRoiPool", supports=_supports_max_roi_pool)
def lower_max_roi_pool(ctx: LowerCtx) -> list:
    """MaxRoiPool (Caffe's ROI pooling, as onnxruntime runs it; onnx.reference has none)."""
    x, rois, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    if len(x.shape) != 4:
        raise InvalidModel(f"MaxRoiPool X of shape {x.shape}; [N, C, H, W] required", node=ctx.label(), tensor=x.name)
    if len(rois.shape) != 2 or int(rois.shape[1]) != 5:
        raise InvalidModel(f"MaxRoiPool rois of shape {rois.shape}; [num_rois, 5] required", node=ctx.label(),
                           tensor=rois.name)
    if np.dtype(rois.dtype) != np.dtype(x.dtype):
        raise InvalidModel("MaxRoiPool rois dtype differs from X", node=ctx.label(), tensor=rois.name)
    n, c, h, w = (int(d) for d in x.shape)
    r, ph, pw = int(out.shape[0]), int(out.shape[2]), int(out.shape[3])
    g, l = grid(ctx.device, (c, ph * pw, r), (64, 1, 1))
    args = [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(r), i32(c), i32(h), i32(w), i32(ph), i32(pw),
            f32(ctx.attr("spatial_scale", 1.0)), i32(n)]
    return [Launch("roialign", "max_roi_pool", g, args, l, type_defines(T=x.dtype), ctx.label())]
