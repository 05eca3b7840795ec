"""Lowering of GridSample (opset 16+, 1-3 spatial dims) to OpenCL (see lower/base.py).

One work-item per output element: the grid point is denormalised (align_corners or not),
rounded (nearest) or split into 2 (linear) or 4 (cubic, a = -0.75) taps per dim; taps outside
the image read 0 (zeros), the clamped pixel (border) or the reflected one (reflection).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import attr_str, check_dtypes, check_int32_sizes, floats, type_defines, work_size

_MODES = {"nearest": 0, "linear": 1, "bilinear": 1, "cubic": 2, "bicubic": 2}
_PADS = {"zeros": 0, "border": 1, "reflection": 2}


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    v = graph.values.get(node.input(0))
    if v is not None and v.shape is not None and not 3 <= len(v.shape) <= 5:
        return f"GridSample of rank {len(v.shape)}"
    if attr_str(node.attr("mode", "bilinear" if graph.opset(node.domain) < 20 else "linear")) not in _MODES:
        return "GridSample mode"
    return check_dtypes(node, graph, floats(target), inputs=[0, 1])


@device_op("GridSample", supports=_supports)
def lower_grid_sample(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    sd = len(x.shape) - 2
    mode = _MODES[attr_str(ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear"))]
    pad = _PADS[attr_str(ctx.attr("padding_mode", "zeros"))]
    defines = type_defines(T=x.dtype)
    if np.dtype(ctx.inputs[1].dtype) != np.dtype(x.dtype):
        raise ValueError(f"{ctx.node.name}: GridSample grid dtype differs from X")
    defines.update(SD=sd, MODE=mode, PAD=pad)
    if int(ctx.attr("align_corners", 0)):
        defines["ALIGN"] = None
    dims = [int(d) for d in x.shape[:2]] + [int(d) for d in x.shape[2:]] + [int(d) for d in out.shape[2:]]
    g, l = work_size(ctx, out.size)
    return [Launch("gridsample", "grid_sample", g, [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(out.size),
                                                    ctx.const_buffer(np.array(dims, np.int32))], l, defines,
                   ctx.label())]
