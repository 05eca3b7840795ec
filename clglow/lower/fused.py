"""clglow.FusedElementwise (from passes/fuse_elementwise.py): one launch for a tree of float32
elementwise ops, the expression passed to kernels_cl/fused_elementwise.cl as the EXPR define;
a tree over int64 / int32 / bool values too (an attention mask's Cast / Equal / Where chain)
runs as fused_bcast with the values' types as T defines.
Inputs and output may be stored as half (SessionOptions.precision, H<k>/HY defines); the
expression is computed in float32 either way."""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ..dtypes import cl_type
from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from .common import F16, F32, INT32_MAX, check_dtypes, work_size
from .index_space import collapse, meta_table, row_layout

_MACROS = {"RELU", "SIGMOID", "TANH", "EXP", "LOG", "ABS", "NEG", "SQRT", "RECIP", "ERF",
           "ADD", "SUB", "MUL", "DIV", "SQUARE", "CUBE"}
# kernels_cl/fe_ops.h's typed operations: an expression using one runs as fused_bcast with T defines
TYPED_MACROS = {"CAST_F", "CAST_L", "CAST_I", "CAST_B", "EQ", "LT", "GT", "NOT", "AND", "OR", "WHERE"}
# a macro call, an input, a comma, a closing parenthesis, a float32 literal by its bits (LIT(3f000000)),
# an int64 / int32 literal by value (LITL(-1), LITI(7))
_TOKEN = re.compile(r"(?P<lit>LIT\([0-9a-f]{8}\))|(?P<ilit>LIT[LI]\(-?[0-9]{1,19}\))|([A-Z_]+)\(|X([0-3])|(,)|(\))")
_TYPED = re.compile(r"\b(?:LITL|LITI|" + "|".join(sorted(TYPED_MACROS)) + r")\(")
_VALUE_TYPES = {F32, F16, np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.bool_)}


def check_expr(expr: object, n_inputs: int, typed: bool = False) -> Optional[str]:
    """Why `expr` is not a well-formed expression over X0..X{n_inputs-1}, else None. It becomes a
    -D define, so nothing but the kernel's macros (the typed ones when `typed`), inputs, literals,
    commas and parentheses may pass."""
    macros = _MACROS | TYPED_MACROS if typed else _MACROS
    if not isinstance(expr, str) or not expr or len(expr) > 4096:
        return "FusedElementwise needs a non-empty 'expr' attribute"
    pos, depth = 0, 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            return f"FusedElementwise expr has an unexpected character at {pos}: {expr[pos:pos + 12]!r}"
        if m.group("lit") is not None:
            pass
        elif m.group("ilit") is not None:
            if not typed or not -2 ** 63 < int(m.group("ilit")[5:-1]) < 2 ** 63:
                return f"FusedElementwise expr has an unexpected integer literal {m.group('ilit')!r}"
        elif m.group(3) is not None:
            if m.group(3) not in macros:
                return f"FusedElementwise expr uses unknown operation {m.group(3)!r}"
            depth += 1
        elif m.group(4) is not None and int(m.group(4)) >= n_inputs:
            return f"FusedElementwise expr reads X{m.group(4)} but the node has {n_inputs} input(s)"
        elif m.group(6) is not None:
            depth -= 1
            if depth < 0:
                return "FusedElementwise expr has unbalanced parentheses"
        pos = m.end()
    return None if depth == 0 else "FusedElementwise expr has unbalanced parentheses"


def supports_fused(node: Node, graph: Graph, target: Target) -> Optional[str]:
    why = check_dtypes(node, graph, _VALUE_TYPES, outputs=True)
    if why:
        return why
    if not 1 <= len(node.inputs) <= 4 or not all(node.inputs):
        return "FusedElementwise takes 1 to 4 inputs"
    return check_expr(node.attrs.get("expr"), len(node.inputs), typed=True)


def is_typed(ctx: LowerCtx, expr: str) -> bool:
    """Whether `expr` needs the typed kernel: an integer / bool value, or a typed operation."""
    dts = [np.dtype(t.dtype) for t in list(ctx.inputs) + [ctx.outputs[0]]]
    return any(dt not in (F32, F16) for dt in dts) or _TYPED.search(expr) is not None


def typed_defines(ctx: LowerCtx) -> dict:
    """T<k> / TY: each input's and the output's value type (a half-stored float: float, with H<k>)."""
    def value_type(dt: np.dtype) -> str:
        return "float" if np.dtype(dt) in (F32, F16) else cl_type(dt)
    d = {"TYPED": 1, **{f"T{k}": value_type(t.dtype) for k, t in enumerate(ctx.inputs)}}
    d["TY"] = value_type(ctx.outputs[0].dtype)
    return d


def half_defines(ctx: LowerCtx, nin: int) -> dict:
    """H<k> / HY for the node's first `nin` inputs and its output stored as half."""
    d = {f"H{k}": 1 for k in range(nin) if ctx.inputs[k] is not None and ctx.inputs[k].dtype == F16}
    if ctx.outputs[0].dtype == F16:
        d["HY"] = 1
    return d


def flat_launch(ctx: LowerCtx, bufs: list, n: int, defines: dict) -> Launch:
    """fused_flat over n elements, 16 per work-item (bufs: the four input slots, the first NIN
    of them the node's first inputs)."""
    g, l = work_size(ctx, -(-n // 16), cap=32)
    defines = {**defines, **half_defines(ctx, int(defines.get("NIN", 1)))}
    return Launch("fused_elementwise", "fused_flat", g, bufs + [ctx.out(0), i32(n)], l, defines, ctx.label())


@device_op("FusedElementwise", domain="clglow", supports=supports_fused, half=HalfIO((0, 1, 2, 3), (0,)))
def lower_fused(ctx: LowerCtx) -> list:
    expr = ctx.attr("expr")
    why = check_expr(expr, len(ctx.inputs), typed=True)
    if why:
        raise InvalidModel(why, node=ctx.label())
    return expr_launches(ctx, expr)


def expr_launches(ctx: LowerCtx, expr: str) -> list:
    """The fused_elementwise.cl launch of `expr` over the node's inputs (X0..) into its output,
    flat, by rows or broadcast as the shapes allow."""
    out = ctx.outputs[0]
    n = out.size
    if n == 0:
        return []
    if n > INT32_MAX:
        raise InvalidModel(f"{n} elements: the fused kernel indexes with int32", node=ctx.label())
    nin = len(ctx.inputs)
    bufs = [ctx.buf(k) for k in range(nin)] + [ctx.buf(0)] * (4 - nin)  # unused slots: never read
    defines = {"EXPR": expr, "NIN": nin}
    shapes = [tuple(t.shape) for t in ctx.inputs]
    typed = is_typed(ctx, expr)
    if typed:  # integer / bool values: one element per work-item, any broadcast (masks are small)
        defines.update(typed_defines(ctx))
    elif all(s == tuple(out.shape) or int(np.prod(s, dtype=np.int64)) == 1 for s in shapes):
        for k, s in enumerate(shapes):
            if s != tuple(out.shape):
                defines[f"S{k}"] = 1
        return [flat_launch(ctx, bufs, n, defines)]
    defines.update(half_defines(ctx, nin))
    dims, strides = collapse(out.shape, shapes)
    rl = None if typed else row_layout(ctx.device, dims, strides)
    if rl is not None:
        gsize, group, inner, rows, rowoff, last, row_defines = rl
        return [Launch("fused_elementwise", "fused_rows", gsize,
                       bufs + [ctx.out(0), i32(inner), i32(rows), ctx.const_buffer(rowoff), ctx.const_buffer(last)],
                       group, {**defines, **row_defines}, ctx.label())]
    defines["RANK"] = len(dims)
    g, l = work_size(ctx, n)
    return [Launch("fused_elementwise", "fused_bcast", g, bufs + [ctx.out(0), i32(n), meta_table(ctx, dims, strides)],
                   l, defines, ctx.label())]
