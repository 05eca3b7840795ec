"""Lowering of Col2Im (opset 18, N-D) to OpenCL (see lower/base.py).

One work-item per image element gathers the column entries whose block lands on it (col2im.cl):
the reference's sum order and no atomics; 2-D images by rows of pixels (col2im_2d), other ranks
through per-dim lists of the covering taps (col2im). image_shape and block_shape must be known when the node is
lowered (constants, or graph inputs the session specialises as shape inputs).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import check_dtypes, check_int32_sizes, floats, grid, type_defines, work_size
from .spatial import check_out_type


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    for i in (1, 2):  # a graph input here becomes a constant of each plan (runtime.engine.SHAPE_INPUTS)
        if graph.const(node.input(i)) is None and node.input(i) not in graph.inputs:
            return "Col2Im with a computed image_shape or block_shape runs on the host"
    return check_dtypes(node, graph, floats(target), inputs=[0])


def _geometry(ctx: LowerCtx) -> tuple:
    """(image, block, dilations, begin pads, strides, columns per dim), checked against the input."""
    for i in (1, 2):
        if ctx.const(i) is None:
            raise InvalidModel("Col2Im image_shape and block_shape must be known when the node is planned",
                               node=ctx.label(), tensor=ctx.node.inputs[i])
    image = [int(v) for v in np.asarray(ctx.const(1)).reshape(-1)]
    block = [int(v) for v in np.asarray(ctx.const(2)).reshape(-1)]
    nd = len(image)
    dil = [int(v) for v in ctx.attr("dilations", [1] * nd)]
    pads = [int(v) for v in ctx.attr("pads", [0] * (2 * nd))]
    st = [int(v) for v in ctx.attr("strides", [1] * nd)]
    if len(block) != nd or len(dil) != nd or len(st) != nd or len(pads) != 2 * nd:
        raise InvalidModel(f"Col2Im image_shape {image}, block_shape {block}, dilations {dil}, pads {pads} and "
                           f"strides {st} disagree in their number of dims", node=ctx.label())
    if min(block + dil + st, default=1) < 1:
        raise InvalidModel("Col2Im block_shape, dilations and strides must be positive", node=ctx.label())
    cols = [(image[d] + pads[d] + pads[nd + d] - dil[d] * (block[d] - 1) - 1) // st[d] + 1 for d in range(nd)]
    x = ctx.inputs[0]
    k, l = int(np.prod(block)), int(np.prod(cols))
    if len(x.shape) != 3 or int(x.shape[1]) % k or int(x.shape[2]) != l or min(cols) < 1:
        raise InvalidModel(f"Col2Im input of shape {x.shape} does not hold blocks of {block} over {cols} positions "
                           f"(expected [N, C * {k}, {l}])", node=ctx.label(), tensor=x.name)
    return image, block, dil, pads[:nd], st, cols


@device_op("Col2Im", supports=_supports)
def lower_col2im(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    image, block, dil, pads, st, cols = _geometry(ctx)
    defines = type_defines(T=x.dtype)
    meta = ctx.const_buffer(np.array(image + block + dil + pads + st + cols, np.int32))
    if len(image) == 2:  # rows of pixels, uniform tap loops (4.6 ms against the N-D kernel's 22, under load)
        planes = out.size // (image[0] * image[1])
        if st == [1, 1]:
            defines["STRIDE1"] = None
        gsize, ls = grid(ctx.device, (image[1], image[0], planes), (64, 1, 1))
        return [Launch("col2im", "col2im_2d", gsize, [ctx.buf(0), ctx.out(0), i32(planes), meta], ls, defines,
                       ctx.label())]
    defines.update(ND=len(image), MAXK=max(block))
    g, l = work_size(ctx, out.size)
    return [Launch("col2im", "col2im", g, [ctx.buf(0), ctx.out(0), i32(out.size), i32(np.prod(block)),
                                           i32(np.prod(cols)), meta], l, defines, ctx.label())]
