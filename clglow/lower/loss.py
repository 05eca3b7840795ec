"""Lowering of NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (see lower/base.py).

Scores (N, C, d1, ...) are seen as (N, C, D). One work-item per (n, d) writes the weighted
loss and its weight; a one-work-item kernel sums them for reduction 'sum'/'mean' (mean is
sum(loss) / sum(weights), which is numpy's mean when there are no weights or ignored targets).
SoftmaxCrossEntropyLoss first writes LogSoftmax over axis 1 (its optional second output).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32, i64
from .common import attr_str, check_dtypes, check_int32_sizes, floats, type_defines, work_size


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    r = check_dtypes(node, graph, floats(target), inputs=[0, 2])
    if r:
        return r
    return check_dtypes(node, graph, {np.dtype(np.int32), np.dtype(np.int64)}, inputs=[1])


@device_op("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", supports=_supports)
def lower_loss(ctx: LowerCtx) -> list:
    x, tgt = ctx.inputs[0], ctx.inputs[1]
    check_int32_sizes(ctx)
    N, C = int(x.shape[0]), int(x.shape[1])
    D = int(np.prod(x.shape[2:], dtype=np.int64))
    rows = N * D
    dt = np.dtype(x.dtype)
    isz = dt.itemsize
    red = ctx.attr("reduction", "mean")
    red = attr_str(red)
    ignore = ctx.attr("ignore_index")
    defines = type_defines(T=dt, TI=tgt.dtype)
    launches = []
    scores = ctx.buf(0)
    if ctx.node.op_type == "SoftmaxCrossEntropyLoss":
        has_lp = len(ctx.node.outputs) > 1 and bool(ctx.node.outputs[1])
        lp = ctx.out(1) if has_lp else ctx.scratch(x.size * isz)
        if rows:
            g, l = work_size(ctx, rows, cap=64)
            launches.append(Launch("loss", "log_softmax_c", g, [scores, lp, i32(rows), i32(C), i32(D)], l,
                                   defines, ctx.label()))
        scores = lp
    args = [scores, ctx.buf(1)]
    if ctx.has_input(2):
        args.append(ctx.buf(2))
        defines = dict(defines, HAS_WEIGHT=None)
    loss = ctx.out(0) if red == "none" else ctx.scratch(max(rows, 1) * isz)
    wbuf = ctx.scratch(max(rows, 1) * isz)
    if rows:
        g, l = work_size(ctx, rows)
        launches.append(Launch("loss", "nll_elem", g, args + [loss, wbuf, i32(rows), i32(C), i32(D),
                                                              i64(ignore if ignore is not None else 0),
                                                              i32(ignore is not None)], l, defines, ctx.label()))
    if red != "none":
        launches.append(Launch("loss", "nll_reduce", (1,), [loss, wbuf, ctx.out(0), i32(rows), i32(red == "mean")],
                               (1,), type_defines(T=dt), ctx.label()))
    return launches
