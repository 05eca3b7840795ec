"""Half storage around a lowering that reads and writes float32 only on some of its paths.

A lowering declares half storage (base.HalfIO) for an op as a whole, but its paths differ: a
GEMM reads half natively in gemm.cl yet packs live operands through float kernels. Such a path
lowers on float32 copies instead: each half activation is converted into a scratch buffer
first and each half output is written to one and converted after (elementwise.cl
cast_from_half / cast_to_half); half constants are widened once at plan time (packed from a
float32 copy, or uploaded as one). Correct everywhere; as slow as the Casts the precision pass
would otherwise have inserted.
"""
from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from .base import Buf, Launch, LowerCtx, TensorInfo, i32
from .common import F16, F32, work_size


def half_cast_launch(ctx: LowerCtx, src, dst, n: int, to_half: bool) -> Launch:
    """n floats converted from half storage (to_half False) or to it, src -> dst."""
    g, l = work_size(ctx, n)
    kernel = "cast_to_half" if to_half else "cast_from_half"
    return Launch("elementwise", kernel, g, [src, dst, i32(n)], l,
                  {"OP_CAST": None, "T0": "float", "TO": "float"}, ctx.label())


def has_half(ctx: LowerCtx) -> bool:
    """Whether some input or output of the node is stored as half."""
    return any(t is not None and np.dtype(t.dtype) == F16 for t in list(ctx.inputs) + list(ctx.outputs))


def lower_as_float(ctx: LowerCtx, lower: Callable[[LowerCtx], list]) -> list:
    """`lower` on a view of `ctx` whose half tensors are float32, with the conversions around it.
    The view allocates the scratch slots from here on: call it as the lowering's last step."""
    before: list = []
    fctx = copy.copy(ctx)
    fctx.inputs, fctx.outputs = list(ctx.inputs), list(ctx.outputs)
    fctx.inplace = {}  # the float copies are scratch: no in-place offers
    ins: dict = {}
    for i, t in enumerate(ctx.inputs):
        if t is None or np.dtype(t.dtype) != F16:
            continue
        fctx.inputs[i] = TensorInfo(t.name, F32, t.shape)
        c = ctx.const(i)
        if c is not None:  # read in place (a bias): a float32 copy uploaded with the plan
            ins[i] = ctx.const_buffer(c.astype(np.float32), key=f"{ctx.node.inputs[i]}@{id(c):x}#f32")
        elif t.size:
            ins[i] = fctx.scratch(4 * t.size)  # the copy's slots: the lowering's follow them
            before.append(half_cast_launch(ctx, ctx.buf(i), ins[i], t.size, to_half=False))
    outs: dict = {}  # node output index -> (its float copy, its TensorInfo)
    present = [j for j, o in enumerate(ctx.node.outputs) if o]  # ctx.outputs lists these only
    for k, t in enumerate(ctx.outputs):
        if np.dtype(t.dtype) == F16:
            fctx.outputs[k] = TensorInfo(t.name, F32, t.shape)
            outs[present[k]] = (fctx.scratch(4 * max(t.size, 1)), t)

    def const(i: int):
        c = ctx.const(i)
        return c.astype(np.float32) if c is not None and c.dtype == F16 else c

    fctx.const = const  # derived() packs from these
    fctx.buf = lambda i: ins.get(i) or Buf(ctx.node.inputs[i])
    fctx.out = lambda j=0: outs[j][0] if j in outs else Buf(ctx.node.outputs[j])
    launches = before + lower(fctx)
    for j, (s, t) in outs.items():
        if t.size:
            launches.append(half_cast_launch(ctx, s, ctx.out(j), t.size, to_half=True))
    return launches
