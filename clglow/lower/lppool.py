"""Lowering of LpPool (1-3 spatial dims, pads/auto_pad, strides, dilations, ceil_mode) to OpenCL.

Kept apart from pool.py: one work-item per output element sums |x|^p over the window (padding
counts as 0) and takes the p-th root. The output shape comes from shape inference; the window's
begin padding is worked out here from pads or auto_pad.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, f32, i32
from .common import F32, attr_str, check_dtypes, check_int32_sizes, resolve_pads, work_size


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    v = graph.values.get(node.input(0))
    if v is not None and v.shape is not None and not 3 <= len(v.shape) <= 5:
        return f"LpPool of rank {len(v.shape)}"
    return check_dtypes(node, graph, {F32})


@device_op("LpPool", supports=_supports)
def lower_lppool(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    sd = len(x.shape) - 2
    ins = [int(d) for d in x.shape[2:]]
    outs = [int(d) for d in out.shape[2:]]
    k = [int(v) for v in ctx.attr("kernel_shape")]
    s = [int(v) for v in (ctx.attr("strides") or [1] * sd)]
    d = [int(v) for v in (ctx.attr("dilations") or [1] * sd)]
    begin = list(resolve_pads(attr_str(ctx.attr("auto_pad"), "NOTSET"), ctx.attr("pads"), ins, outs, k, s, d)[0])
    geo = ctx.const_buffer(np.array(ins + outs + k + s + d + begin, np.int32))
    g, l = work_size(ctx, out.size)
    return [Launch("lppool", "lppool", g, [ctx.buf(0), ctx.out(0), i32(out.size), geo, f32(ctx.attr("p", 2))], l,
                   {"SD": sd}, ctx.label())]
