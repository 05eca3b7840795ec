"""clglow.ChannelShuffle (passes/fuse_channel_shuffle.py) as one kernels_cl/shuffle.cl launch:
the shuffled tensor, or its two channel halves, straight from the two Concat inputs."""
from __future__ import annotations

from typing import Optional

from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from .common import check_int32_sizes, grid, storage_type
from .movement import supports_movable


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Two inputs of one static 4-D shape and one or two outputs, movable dtypes."""
    if len(node.inputs) != 2 or len(node.outputs) not in (1, 2):
        return "ChannelShuffle takes two inputs and writes one or two outputs"
    shapes = [graph.values.get(i) for i in node.inputs]
    if any(v is None or not v.is_static or len(v.shape) != 4 for v in shapes) or shapes[0].shape != shapes[1].shape:
        return "ChannelShuffle inputs are not of one static 4-D shape"
    return supports_movable(node, graph, target)


# Moves bits: both inputs and both outputs stored as input 0 is, half or float (passes/precision.py casts b)
@device_op("ChannelShuffle", domain="clglow", supports=_supports, half=HalfIO((0, 1), (0, 1), follows=0))
def lower_channel_shuffle(ctx: LowerCtx) -> list:
    """One launch over (output channel, image): each work-item copies one H x W plane."""
    n, c, h, w = ctx.inputs[0].shape
    if n * c * h * w == 0:
        return []
    check_int32_sizes(ctx)
    pieces = len(ctx.node.outputs)
    y0 = ctx.out(0)
    y1 = ctx.out(1) if pieces == 2 else y0
    gsize, ls = grid(ctx.device, (2 * c, n), (min(2 * c, 16), 1))
    return [Launch("shuffle", "channel_shuffle", gsize, [ctx.buf(0), ctx.buf(1), y0, y1, i32(c), i32(h * w)], ls,
                   {"T": storage_type(ctx.inputs[0].dtype), "PIECES": pieces}, ctx.label())]
