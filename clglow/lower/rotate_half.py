"""clglow.RotateHalf (passes/fuse_rotary.py) as one kernels_cl/rotate_half.cl launch: the rotary
position embedding of Llama-style exports, y = x * cos + rotate_half(x) * sin."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from .common import F16, F32, check_dtypes, check_int32_sizes, grid
from .index_space import broadcast_strides

MAX_RANK = 4  # x as [R0, R1, R2, D]: the kernel's index split


def _padded(shape: tuple) -> tuple:
    return (1,) * (MAX_RANK - len(shape)) + tuple(shape)


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 (or its half storage), static shapes, x of rank 1..4 with an even last axis, cos and
    sin broadcasting to x, y of x's shape."""
    why = check_dtypes(node, graph, {F32, F16}, outputs=True)
    if why:
        return why
    vals = [graph.values.get(n) for n in list(node.inputs[:3]) + node.outputs[:1]]
    if len(node.inputs) != 3 or any(v is None or not v.is_static for v in vals):
        return "RotateHalf takes x, cos and sin of static shapes"
    x, c, s, y = (tuple(int(d) for d in v.shape) for v in vals)
    if not 1 <= len(x) <= MAX_RANK or x[-1] % 2 or y != x:
        return f"RotateHalf x {x}: rank 1 to {MAX_RANK}, an even last axis, y of its shape"
    full = _padded(x)
    if broadcast_strides(c, full) is None or broadcast_strides(s, full) is None:
        return f"RotateHalf cos {c} / sin {s} do not broadcast to x {x}"
    return None


# each of x, cos, sin and y read or written as stored, half or float (precision="fp16")
@device_op("RotateHalf", domain="clglow", supports=_supports, half=HalfIO((0, 1, 2), (0,)))
def lower_rotate_half(ctx: LowerCtx) -> list:
    """One launch over (pair of the last axis, x's axes 2 and 1); each work-item walks axis 0."""
    full = _padded(tuple(int(d) for d in ctx.inputs[0].shape))
    half = full[3] // 2
    if half * int(np.prod(full[:3])) == 0:
        return []
    check_int32_sizes(ctx)
    cs = broadcast_strides(tuple(int(d) for d in ctx.inputs[1].shape), full)
    ss = broadcast_strides(tuple(int(d) for d in ctx.inputs[2].shape), full)
    # about 256 work-items a group, rows of pairs stacked: a CPU driver pays per group (the zoo's
    # Llama: 8 launches 0.17 -> 0.12-0.14 ms of kernel time against one row a group)
    cols = min(half, 64)
    gsize, ls = grid(ctx.device, (half, full[2], full[1]), (cols, max(1, min(full[2], 256 // cols)), 1))
    args = [ctx.buf(0), ctx.buf(1), ctx.buf(2), ctx.out(0), i32(half), i32(full[0]), i32(full[1]), i32(full[2])]
    args += [i32(v) for v in cs] + [i32(v) for v in ss]
    defines = {flag: 1 for flag, v in zip(("XH", "CH", "SH"), ctx.inputs[:3]) if v.dtype == F16}
    if ctx.outputs[0].dtype == F16:
        defines["YH"] = 1
    return [Launch("rotate_half", "rotate_half", gsize, args, ls, defines, ctx.label())]
