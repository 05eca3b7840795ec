"""Lowering of ConvTranspose (1-3 spatial dims, groups, strides, dilations, pads/auto_pad,
output_padding/output_shape) to OpenCL (see lower/base.py).

A direct gather kernel: one work-item per output element; the output shape comes from shape
inference, the begin padding from pads or (auto_pad SAME_*) from the total padding as
onnx.reference computes it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from .base import Launch, LowerCtx, device_op, i32
from .elementwise import check_dtypes, work_size


def _supports(node: Node, graph: Graph) -> Optional[str]:
    v = graph.values.get(node.input(0))
    if v is not None and v.shape is not None and not 3 <= len(v.shape) <= 5:
        return f"ConvTranspose of rank {len(v.shape)}"
    return check_dtypes(node, graph, {np.dtype(np.float32)})


@device_op("ConvTranspose", supports=_supports)
def lower_conv_transpose(ctx: LowerCtx) -> list:
    x, w, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    if any(t is not None and t.size >= 2 ** 31 for t in list(ctx.inputs) + [out]):
        raise ValueError(f"{ctx.node.name}: tensors over 2**31 elements are not supported by the OpenCL kernels")
    sd = len(x.shape) - 2
    ins = [int(d) for d in x.shape[2:]]
    outs = [int(d) for d in out.shape[2:]]
    k = [int(d) for d in w.shape[2:]]
    s = [int(v) for v in (ctx.attr("strides") or [1] * sd)]
    d = [int(v) for v in (ctx.attr("dilations") or [1] * sd)]
    group = int(ctx.attr("group", 1))
    C, M = int(x.shape[1]), int(w.shape[1]) * group
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads = ctx.attr("pads")
    if pads is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        op = [int(v) for v in (ctx.attr("output_padding") or [0] * sd)]
        target = [int(v) for v in (ctx.attr("output_shape") or [ins[a] * s[a] for a in range(sd)])][-sd:]
        begin = []
        for a in range(sd):
            total = s[a] * (ins[a] - 1) + op[a] + (k[a] - 1) * d[a] + 1 - target[a]
            begin.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    else:
        begin = [int(v) for v in (pads or [0] * (2 * sd))[:sd]]
    geo = ctx.const_buffer(np.array(ins + outs + k + s + d + begin, np.int32))
    args = [ctx.buf(0), ctx.buf(1)]
    defines: dict = {"SD": sd}
    if ctx.has_input(2):
        args.append(ctx.buf(2))
        defines["HAS_BIAS"] = None
    g, l = work_size(ctx, out.size)
    return [Launch("conv_transpose", "conv_transpose", g, args + [ctx.out(0), i32(out.size), i32(C), i32(M),
                                                                  i32(group), geo], l, defines, ctx.label())]
