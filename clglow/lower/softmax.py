"""Lowering of Softmax/LogSoftmax to OpenCL launches (see lower/base.py for the contract).

Opset < 13 flattens the input to 2-D at `axis` (default 1) and normalises each row of the
flattened tail; opset 13+ normalises along `axis` alone (default -1). Both become rows of
`len` elements `inner` apart for one kernel. The GPU family's row (a work-group per row,
lower/gpu_softmax.py) comes first where it applies; softmax.cl's one work-item per row is the
CPU family's. Half storage of x and y (SessionOptions.precision): softmax.cl's XH / YH, max,
sum and exp in float32; the GPU family's row reads float32 copies (lower/half.py).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from . import gpu_reduce
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from .common import F16, F32, check_dtypes, check_int32_sizes, work_size
from .gpu_softmax import lower_softmax_wg
from .index_space import broadcast_strides

log = logging.getLogger(__name__)


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, {F32, F16}, outputs=True)


@device_op("Softmax", "LogSoftmax", supports=_supports, half=HalfIO((0,), (0,)))
def lower_softmax(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    shape = [int(d) for d in x.shape]
    r = len(shape)
    legacy = ctx.opset < 13
    axis = int(ctx.attr("axis", 1 if legacy else -1))
    axis = axis + r if axis < 0 else axis
    if r == 0:
        shape, axis, r = [1], 0, 1
    if legacy:
        length, inner = int(np.prod(shape[axis:], dtype=np.int64)), 1
    else:
        length, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
    rows = x.size // length
    if gpu_reduce.applicable(ctx.device) is None:  # half storage too (gpu_softmax.cl XH / YH)
        return lower_softmax_wg(ctx.device, ctx.buf(0), ctx.out(0), rows, length, inner,
                                ctx.node.op_type == "LogSoftmax", ctx.label(), x.dtype == F16, out.dtype == F16)
    defines = {"LOG_SOFTMAX": None} if ctx.node.op_type == "LogSoftmax" else {}
    if x.dtype == F16:
        defines["XH"] = 1
    if out.dtype == F16:
        defines["YH"] = 1
    if inner == 1 and length >= 16:  # the last axis: vector rows (see softmax_last)
        g, l = work_size(ctx, rows, cap=16)
        return [Launch("softmax", "softmax_last", g, [ctx.buf(0), ctx.out(0), i32(rows), i32(length)], l,
                       defines, ctx.label())]
    if inner >= 16:  # an inner axis: 16 adjacent rows per work-item as vectors (see softmax_cols)
        outer = rows // inner
        return [Launch("softmax", "softmax_cols", (-(-inner // 16), outer),
                       [ctx.buf(0), ctx.out(0), i32(length), i32(inner)], (1, 1), defines, ctx.label())]
    g, l = work_size(ctx, rows, cap=64)
    return [Launch("softmax", "softmax", g, [ctx.buf(0), ctx.out(0), i32(rows), i32(length), i32(inner)], l,
                   defines, ctx.label())]


# --- clglow.BiasSoftmax (passes/fuse_softmax.py) --------------------------------------------------
def _supports_bias(node: Node, graph: Graph, target: Target) -> Optional[str]:
    r = check_dtypes(node, graph, {F32, F16}, inputs=[0], outputs=True) or check_dtypes(node, graph, {F32}, inputs=[1])
    if r:
        return r
    if gpu_reduce.applicable(target) is None:
        return "the GPU family's work-group softmax takes no bias (runs as Add and Softmax)"
    return None


def bias_strides(x_shape: tuple, b_shape: tuple) -> Optional[list]:
    """The bias's element strides over x's leading axes (0 where it broadcasts) when it
    broadcasts to x with x's full last axis, else None."""
    if not x_shape or not b_shape or b_shape[-1] != x_shape[-1]:
        return None
    st = broadcast_strides(tuple(b_shape), tuple(x_shape))
    return None if st is None else st[:-1]


@device_op("BiasSoftmax", domain="clglow", supports=_supports_bias, half=HalfIO((0,), (0,)))
def lower_bias_softmax(ctx: LowerCtx) -> list:
    """Softmax(x + bias) over x's last axis, bias float32 broadcast to x (a mask the scores'
    MatMul could not take as its bias): softmax.cl's softmax_last with BIAS, one launch."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    shape = tuple(int(d) for d in x.shape)
    st = bias_strides(shape, tuple(int(d) for d in ctx.inputs[1].shape))
    length = shape[-1] if shape else 0
    if st is None or length < 16:
        raise InvalidModel(f"BiasSoftmax of x {shape} and bias {ctx.inputs[1].shape}", node=ctx.label())
    defines = {"BIAS": None}
    if x.dtype == F16:
        defines["XH"] = 1
    if out.dtype == F16:
        defines["YH"] = 1
    rows = x.size // length
    meta = ctx.const_buffer(np.array([len(st)] + list(shape[:-1]) + st, np.int32))
    g, l = work_size(ctx, rows, cap=16)
    return [Launch("softmax", "softmax_last", g, [ctx.buf(0), ctx.out(0), i32(rows), i32(length), ctx.buf(1), meta],
                   l, defines, ctx.label())]
