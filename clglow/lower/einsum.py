"""Lowering of Einsum (1-3 operands, any equation) to OpenCL (see lower/base.py).

The equation is parsed at the concrete shapes: '...' becomes fresh letters (right-aligned,
size-1 dims broadcast), an implicit output is the ellipsis then the letters used once, in
alphabetical order. Each operand gets one stride per letter (a repeated letter sums its dims'
strides: a diagonal); one work-item per output element loops over the summed letters.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import attr_str, check_dtypes, check_int32_sizes, numeric, type_defines, work_size
from .index_space import contiguous_strides


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if not 1 <= len([i for i in node.inputs if i]) <= 3:
        return "Einsum with more than 3 operands"
    return check_dtypes(node, graph, numeric(target))


def _parse(eq: str, shapes: list) -> tuple:
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"Einsum equation {eq!r} names {len(terms)} operands, got {len(shapes)}")
    fresh = [chr(c) for c in range(0x100, 0x120)]  # placeholder letters for ellipsis dims
    ell_rank = 0
    parsed = []
    for t, shape in zip(terms, shapes):
        if "..." in t:
            pre, post = t.split("...")
            k = len(shape) - len(pre) - len(post)
            ell_rank = max(ell_rank, k)
            parsed.append((pre, k, post))
        else:
            parsed.append((t, 0, ""))
    ell = fresh[:ell_rank]
    letters = []
    for pre, k, post in parsed:
        letters.append(list(pre) + ell[ell_rank - k:] + list(post))
    if arrow:
        out = list(rhs.replace("...", "".join(ell))) if "..." in rhs else list(rhs)
    else:
        counts: dict = {}
        for ls in letters:
            for c in ls:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, n in counts.items() if n == 1 and c not in ell)
    return letters, out


@device_op("Einsum", supports=_supports)
def lower_einsum(ctx: LowerCtx) -> list:
    ins = [t for t in ctx.inputs if t is not None]
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    eq = ctx.attr("equation")
    eq = attr_str(eq)
    letters, out_l = _parse(eq, [t.shape for t in ins])
    size: dict = {}
    for ls, t in zip(letters, ins):
        for c, d in zip(ls, t.shape):
            if int(d) != 1 or c not in size:
                size[c] = max(size.get(c, 1), int(d))
    sum_l = [c for c in dict.fromkeys(c for ls in letters for c in ls) if c not in out_l]
    if any(size[c] == 0 for c in sum_l):
        raise ValueError(f"{ctx.node.name}: Einsum over an empty contracted dim")
    odims = [size[c] for c in out_l] or [1]
    sdims = [size[c] for c in sum_l] or [1]
    strides = []
    for ls, t in zip(letters, ins):
        cs = contiguous_strides(t.shape)
        per: dict = {}
        for c, d, s in zip(ls, t.shape, cs):
            if int(d) != 1 or size[c] == 1:
                per[c] = per.get(c, 0) + s
        strides += [per.get(c, 0) for c in out_l] + ([0] if not out_l else [])
        strides += [per.get(c, 0) for c in sum_l] + ([0] if not sum_l else [])
    meta = ctx.const_buffer(np.array(odims + sdims + strides, np.int32))
    defines = type_defines(T=out.dtype)
    defines.update(NIN=len(ins), NO=len(odims), NS=len(sdims))
    g, l = work_size(ctx, out.size)
    args = [ctx.buf(i) for i, t in enumerate(ctx.inputs) if t is not None]
    return [Launch("einsum", "einsum", g, args + [ctx.out(0), i32(out.size),
                                                  i32(int(np.prod(sdims, dtype=np.int64))), meta], l, defines,
                   ctx.label())]
