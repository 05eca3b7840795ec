"""Lowering of elementwise ops to OpenCL launches (see lower/base.py for the contract).

One program per (op, dtypes, rank): equal shapes take `binary_flat` (no index math);
anything else is broadcast through `*_bcast_rows` (host row offsets) or `*_bcast`, after
collapsing the index space (lower/index_space.py) so that common cases (bias per channel,
scalar operand) need rank 1-3 index math. Shapes and strides travel in a small int32 ConstBuf,
never in defines. The float32 unary ops and Pow by 2, 3, -1 run as fused_elementwise.cl vector
expressions (lower/fused.py); narrow-type casts as tables (lower/castlut.py). A float16 operand of
the float ops is half storage (SessionOptions.precision, kernels_cl/storage.h): computed in float.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from ..dtypes import cl_type
from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, f32, i32, i64
from .castlut import is_narrow, lower_narrow_cast, supports_narrow_cast
from .common import (BOOL, F16, F32, INT32_MAX, INTS, SIGNED, check_dtypes, check_int32_sizes, dtype_of, floats,
                     numeric, work_size)
from .fused import expr_launches, flat_launch
from .index_space import collapse, meta_table, row_layout

log = logging.getLogger(__name__)

_BOOL = {BOOL}


def _arith(dt: np.dtype) -> str:
    """The C type an operand is computed in: float for half storage (storage.h), else its own."""
    return "float" if np.dtype(dt) == F16 else cl_type(dt)


def _defines(op: str, types: Sequence[np.dtype], out: np.dtype, **extra) -> dict:
    """T<k>/TO (computed types), H<k>/HO (half storage), OP_<op>, IS_INT, USE_FP64."""
    d = {f"OP_{op}": None, "TO": _arith(out)}
    if np.dtype(out) == F16:
        d["HO"] = 1
    for k, t in enumerate(types):
        d[f"T{k}"] = _arith(t)
        if np.dtype(t) == F16:
            d[f"H{k}"] = 1
    if np.dtype(types[0]) in INTS or np.dtype(types[0]) in _BOOL:
        d["IS_INT"] = None
    if any(np.dtype(t) == np.float64 for t in list(types) + [out]):
        d["USE_FP64"] = None
    d.update(extra)
    return d


def unary_launch(ctx: LowerCtx, op: str, src, dst, n: int, in_dt: np.dtype, out_dt: np.dtype,
                 alpha: float = 0.0, beta: float = 0.0, ilo: int = 0, ihi: int = 0) -> Launch:
    g, l = work_size(ctx, n)
    return Launch("elementwise", "unary", g, [src, dst, i32(n), f32(alpha), f32(beta), i64(ilo), i64(ihi)],
                  l, _defines(op, [in_dt], out_dt), ctx.label())


def binary_launch(ctx: LowerCtx, op: str, a, b, c, shape_a, shape_b, out_shape,
                  dt_a: np.dtype, dt_b: np.dtype, dt_out: np.dtype) -> Launch:
    n = int(np.prod(out_shape, dtype=np.int64))
    g, l = work_size(ctx, n)
    if tuple(shape_a) == tuple(shape_b) == tuple(out_shape):
        return Launch("elementwise", "binary_flat", g, [a, b, c, i32(n)], l,
                      _defines(op, [dt_a, dt_b], dt_out), ctx.label())
    dims, strides = collapse(out_shape, [shape_a, shape_b])
    rl = row_layout(ctx.device, dims, strides)
    if rl is not None:
        gsize, group, inner, rows, rowoff, last, row_defines = rl
        defines = {**_defines(op, [dt_a, dt_b], dt_out), **row_defines}
        return Launch("elementwise", "binary_bcast_rows", gsize,
                      [a, b, c, i32(inner), i32(rows), ctx.const_buffer(rowoff), ctx.const_buffer(last)], group,
                      defines, ctx.label())
    return Launch("elementwise", "binary_bcast", g, [a, b, c, i32(n), meta_table(ctx, dims, strides)], l,
                  _defines(op, [dt_a, dt_b], dt_out, RANK=len(dims)), ctx.label())


def ternary_launch(ctx: LowerCtx, op: str, args: Sequence, shapes: Sequence, out, out_shape,
                   dts: Sequence[np.dtype], dt_out: np.dtype) -> Launch:
    n = int(np.prod(out_shape, dtype=np.int64))
    g, l = work_size(ctx, n)
    dims, strides = collapse(out_shape, shapes)
    return Launch("elementwise", "ternary_bcast", g, [*args, out, i32(n), meta_table(ctx, dims, strides)], l,
                  _defines(op, dts, dt_out, RANK=len(dims)), ctx.label())


# --- unary ---------------------------------------------------------------------------------------
_UNARY_FLOAT = {"Sigmoid": "SIGMOID", "Tanh": "TANH", "LeakyRelu": "LEAKYRELU", "Exp": "EXP", "Log": "LOG",
                "Sqrt": "SQRT", "Reciprocal": "RECIPROCAL", "Erf": "ERF", "Floor": "FLOOR", "Ceil": "CEIL",
                "Round": "ROUND", "Sin": "SIN", "Cos": "COS", "Elu": "ELU", "Selu": "SELU",
                "HardSigmoid": "HARDSIGMOID", "HardSwish": "HARDSWISH", "Softplus": "SOFTPLUS",
                "Softsign": "SOFTSIGN", "Tan": "TAN", "Asin": "ASIN", "Acos": "ACOS", "Atan": "ATAN",
                "Sinh": "SINH", "Cosh": "COSH", "Asinh": "ASINH", "Acosh": "ACOSH", "Atanh": "ATANH",
                "Gelu": "GELU", "Mish": "MISH", "Celu": "CELU", "ThresholdedRelu": "THRESHRELU",
                "Shrink": "SHRINK", "Swish": "SWISH"}
_UNARY_NUMERIC = {"Relu": "RELU", "Neg": "NEG", "Abs": "ABS", "Sign": "SIGN"}
_UNARY_PARAMS = {"LeakyRelu": (("alpha", 0.01), None), "Elu": (("alpha", 1.0), None),
                 "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
                 "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)), "Celu": (("alpha", 1.0), None),
                 "ThresholdedRelu": (("alpha", 1.0), None), "Shrink": (("bias", 0.0), ("lambd", 0.5)),
                 "Swish": (("alpha", 1.0), None)}


def _stored(target: Target) -> set:
    """The float dtypes the float ops take: those computed natively, and half storage."""
    return floats(target) | {F16}


def _supports_unary_float(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if node.op_type == "Shrink":
        return check_dtypes(node, graph, _stored(target) | SIGNED)
    return check_dtypes(node, graph, _stored(target))


def _supports_unary_numeric(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, _stored(target) | SIGNED)


# float32 unary ops that run as fused_elementwise.cl's vector expression (its macro per op)
_VECTOR_UNARY = {"Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Exp": "EXP", "Log": "LOG",
                 "Abs": "ABS", "Neg": "NEG", "Sqrt": "SQRT", "Reciprocal": "RECIP", "Erf": "ERF"}


_HALF_UNARY = HalfIO((0,), (0,))


@device_op(*_UNARY_FLOAT, supports=_supports_unary_float, half=_HALF_UNARY)
@device_op(*_UNARY_NUMERIC, supports=_supports_unary_numeric, half=_HALF_UNARY)
def lower_unary(ctx: LowerCtx) -> list:
    """Float math (and sign-like ops on signed ints), one element per work-item; the float32 ops of
    _VECTOR_UNARY 16 at a time as vectors through fused_elementwise.cl."""
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    op_type = ctx.node.op_type
    op = _UNARY_FLOAT.get(op_type) or _UNARY_NUMERIC[op_type]
    if op == "GELU" and ctx.attr("approximate", "none") == "tanh":
        op = "GELU_TANH"
    params = [0.0, 0.0]
    for k, p in enumerate(_UNARY_PARAMS.get(op_type, (None, None))):
        if p is not None:
            params[k] = float(ctx.attr(p[0], p[1]))
    dt, dt_out = np.dtype(ctx.inputs[0].dtype), np.dtype(out.dtype)
    if {dt, dt_out} <= {F32, F16} and op_type in _VECTOR_UNARY and out.size <= INT32_MAX:
        # the fused kernel's 16-element vectors: one vector exp/tanh instead of 16 scalar calls
        # (pocl, AVX-512: Sigmoid over 128x40x40 184 -> 40 us; 256x1024 Tanh 330 -> 96, Exp 130 -> 41)
        return [flat_launch(ctx, [ctx.buf(0)] * 4, out.size, {"EXPR": f"{_VECTOR_UNARY[op_type]}(X0)", "NIN": 1})]
    return [unary_launch(ctx, op, ctx.buf(0), ctx.out(0), out.size, dt, dt_out, params[0], params[1])]


def _supports_not(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, _BOOL)


@device_op("Not", supports=_supports_not)
def lower_not(ctx: LowerCtx) -> list:
    n = ctx.outputs[0].size
    if n == 0:
        return []
    return [unary_launch(ctx, "NOT", ctx.buf(0), ctx.out(0), n, np.dtype(np.bool_), np.dtype(np.bool_))]


def _supports_isx(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Floats, half storage included (storage.h's conversion keeps NaN and infinities)."""
    return check_dtypes(node, graph, floats(target) | {F16}, [0])


@device_op("IsNaN", "IsInf", supports=_supports_isx, half=HalfIO((0,), ()))
def lower_isx(ctx: LowerCtx) -> list:
    n = ctx.outputs[0].size
    if n == 0:
        return []
    dt = np.dtype(ctx.inputs[0].dtype)
    op = ctx.node.op_type.upper()
    return [unary_launch(ctx, op, ctx.buf(0), ctx.out(0), n, dt, np.dtype(np.bool_),
                         ilo=int(ctx.attr("detect_negative", 1)), ihi=int(ctx.attr("detect_positive", 1)))]


def _supports_bitnot(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, INTS)


@device_op("BitwiseNot", supports=_supports_bitnot)
def lower_bitnot(ctx: LowerCtx) -> list:
    n = ctx.outputs[0].size
    if n == 0:
        return []
    dt = np.dtype(ctx.inputs[0].dtype)
    return [unary_launch(ctx, "BITNOT", ctx.buf(0), ctx.out(0), n, dt, dt)]


# --- Cast ----------------------------------------------------------------------------------------
def _supports_cast(node: Node, graph: Graph, target: Target) -> Optional[str]:
    src = dtype_of(graph, node.input(0))
    dst = dtype_of(graph, node.outputs[0])
    if src is not None and dst is not None and (is_narrow(src) or is_narrow(dst)):
        return supports_narrow_cast(src, dst)
    allowed = numeric(target) | _BOOL
    for dt in (src, dst):
        if dt is not None and dt not in allowed and dt != np.float16:
            return f"Cast involving {dt.name} is not handled by the OpenCL kernel"
    if node.attr("saturate") is not None and dst is not None and dst not in allowed and dst != np.float16:
        return "saturating float8 casts run on the host"
    return None


@device_op("Cast", "CastLike", supports=_supports_cast)
def lower_cast(ctx: LowerCtx) -> list:
    """C conversion semantics match numpy's astype for in-range values (float->int truncates)."""
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    src, dst = np.dtype(ctx.inputs[0].dtype), np.dtype(out.dtype)
    if is_narrow(src) or is_narrow(dst):
        return lower_narrow_cast(ctx)
    if np.float16 in (src, dst) and src != dst:  # half is storage only: vload_half / vstore_half
        g, l = work_size(ctx, out.size)
        other = dst if src == np.float16 else src
        defines = _defines("CAST_BOOL" if dst == np.bool_ else "CAST", [other], other)
        kernel = "cast_from_half" if src == np.float16 else "cast_to_half"
        return [Launch("elementwise", kernel, g, [ctx.buf(0), ctx.out(0), i32(out.size)], l, defines, ctx.label())]
    if src == dst == np.float16:
        src = dst = np.dtype(np.uint16)  # a bit copy
    op = "CAST_BOOL" if dst == np.bool_ and src != np.bool_ else "CAST"
    return [unary_launch(ctx, op, ctx.buf(0), ctx.out(0), out.size, src, dst)]


# --- Clip ----------------------------------------------------------------------------------------
def _supports_clip(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target) | {F16}, [0]) or check_dtypes(node, graph, numeric(target), [1, 2])


@device_op("Clip", supports=_supports_clip, half=HalfIO((0,), (0,)))
def lower_clip(ctx: LowerCtx) -> list:
    """Constant bounds become scalar arguments; run-time bounds use the ternary kernel."""
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt, dt_out = np.dtype(ctx.inputs[0].dtype), np.dtype(out.dtype)
    is_float = dt.kind == "f"
    bound_dt = F32 if dt == F16 else dt  # the bounds stay float32 (HalfIO: input 0 only)
    if is_float:
        lo_d, hi_d = -np.inf, np.inf
    else:
        info = np.iinfo(dt)
        lo_d, hi_d = max(int(info.min), -2 ** 63), min(int(info.max), 2 ** 63 - 1)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", lo_d), ctx.attr("max", hi_d)
        consts: list = [lo, hi]
    else:
        consts = []
        for i, d in ((1, lo_d), (2, hi_d)):
            if not ctx.has_input(i):
                consts.append(d)
            else:
                c = ctx.const(i)
                consts.append(None if c is None else c.reshape(-1)[0].item())
    if consts[0] is not None and consts[1] is not None:
        lo, hi = consts
        if is_float:
            return [unary_launch(ctx, "CLIP", ctx.buf(0), ctx.out(0), out.size, dt, dt_out, float(lo), float(hi))]
        return [unary_launch(ctx, "CLIP", ctx.buf(0), ctx.out(0), out.size, dt, dt_out, ilo=int(lo), ihi=int(hi))]
    args, shapes, dts = [ctx.buf(0)], [ctx.inputs[0].shape], [dt]
    for i, d in ((1, lo_d), (2, hi_d)):
        if ctx.has_input(i):
            args.append(ctx.buf(i))
            shapes.append(ctx.inputs[i].shape)
            dts.append(np.dtype(ctx.inputs[i].dtype))
        else:
            args.append(ctx.const_buffer(np.array([d], dtype=bound_dt)))
            shapes.append(())
            dts.append(bound_dt)
    return [ternary_launch(ctx, "CLIP3", args, shapes, ctx.out(0), out.shape, dts, dt_out)]


# --- binary & variadic ---------------------------------------------------------------------------
_BINARY = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Pow": "POW", "PRelu": "PRELU",
           "Equal": "EQUAL", "Less": "LESS", "Greater": "GREATER", "LessOrEqual": "LESSOREQUAL",
           "GreaterOrEqual": "GREATEROREQUAL", "And": "AND", "Or": "OR", "Xor": "XOR", "Mod": "MOD",
           "BitShift": "SHL", "BitwiseAnd": "BITAND", "BitwiseOr": "BITOR", "BitwiseXor": "BITXOR"}
_VARIADIC = {"Sum": "ADD", "Mean": "ADD", "Max": "MAX", "Min": "MIN"}
_FUSED_ARITH = {"ADD", "SUB", "MUL", "DIV"}  # fused_elementwise.cl's macros of the same names


def _pow_expr(ctx: LowerCtx, ta, tb, out) -> Optional[str]:
    """A float32 Pow by a constant scalar exponent 2, 3 or -1 as products (fused_elementwise's
    vectors; exact: x*x is pow(x, 2) for every x): pocl calls an out-of-line scalar pow per
    element (Pow(x, 2) over 256x1024: 14 ms, onnxruntime 0.06 ms). Else None."""
    e = ctx.const(1)
    if (np.dtype(ta.dtype) != np.float32 or np.dtype(out.dtype) != np.float32 or e is None
            or np.asarray(e).size != 1 or tuple(ta.shape) != tuple(out.shape)):
        return None
    v = float(np.asarray(e).reshape(-1)[0])
    return {2.0: "MUL(X0,X0)", 3.0: "MUL(MUL(X0,X0),X0)", -1.0: "RECIP(X0)"}.get(v)


def _supports_binary(node: Node, graph: Graph, target: Target) -> Optional[str]:
    op = node.op_type
    if op == "Pow":
        return check_dtypes(node, graph, numeric(target) | {F16}, [0]) or check_dtypes(node, graph, numeric(target), [1])
    if op in ("BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        return check_dtypes(node, graph, INTS)
    if op in ("And", "Or", "Xor"):
        return check_dtypes(node, graph, _BOOL)
    if op == "Equal":
        return check_dtypes(node, graph, numeric(target) | _BOOL | {F16})
    if op == "PRelu" and graph.opset(node.domain) < 7 and _old_prelu_slope(node, graph) is None:
        return "PRelu before opset 7 with a slope neither of one value, per channel nor of x's shape"
    if op in ("PRelu", "Mean"):
        return check_dtypes(node, graph, _stored(target))
    return check_dtypes(node, graph, numeric(target) | {F16})


def _old_prelu_slope(node: Node, graph: Graph) -> Optional[tuple]:
    """The shape a PRelu of opset < 7 reads its slope as (one value or x's shape as it is; a [C]
    slope per channel of x [N, C, ...], which numpy broadcasting would align with x's last axis),
    None for other slopes or unknown shapes."""
    x, slope = (graph.values.get(node.input(i)) for i in (0, 1))
    if x is None or slope is None or x.shape is None or slope.shape is None:
        return None
    xs, ss = tuple(x.shape), tuple(slope.shape)
    if ss == xs or int(np.prod(ss)) == 1:
        return ss
    if len(ss) == 1 and len(xs) >= 2 and ss[0] == xs[1]:
        return (ss[0],) + (1,) * (len(xs) - 2)
    return None


# The float arithmetic (and comparisons, whose bool output is not float) on half storage: each
# operand read as it is stored, any mix of float32 and half (Pow: the base only).
_HALF_BINARY = ("Add", "Sub", "Mul", "Div", "PRelu", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")
_HALF_VARIADIC = HalfIO(tuple(range(64)), (0,))


@device_op(*_HALF_BINARY, supports=_supports_binary, half=HalfIO((0, 1), (0,)))
@device_op("Pow", supports=_supports_binary, half=HalfIO((0,), (0,)))
@device_op(*_VARIADIC, supports=_supports_binary, half=_HALF_VARIADIC)
@device_op(*_BINARY, supports=_supports_binary)
def lower_binary(ctx: LowerCtx) -> list:
    """Binary ops directly; variadic ones as a chain accumulating into the output buffer."""
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    op_type = ctx.node.op_type
    ins = [(ctx.buf(i), ctx.inputs[i]) for i in range(len(ctx.inputs)) if ctx.has_input(i)]
    if op_type in _BINARY:
        (a, ta), (b, tb) = ins[0], ins[1]
        op = _BINARY[op_type]
        if op == "MOD" and int(ctx.attr("fmod", 0)):
            op = "FMOD"
        if op == "SHL" and ctx.attr("direction", "LEFT") == "RIGHT":
            op = "SHR"
        if op == "POW":
            expr = _pow_expr(ctx, ta, tb, out)
            if expr is not None:
                return [flat_launch(ctx, [a] * 4, out.size, {"EXPR": expr, "NIN": 1})]
        old_prelu = op_type == "PRelu" and ctx.opset < 7
        if not old_prelu and op in _FUSED_ARITH and F16 in (ta.dtype, tb.dtype, out.dtype) \
                and {ta.dtype, tb.dtype, out.dtype} <= {F16, F32}:
            # half storage: fused_elementwise's kernels convert 16 lanes at a time where the
            # shapes allow (the scalar kernels here convert per element)
            return expr_launches(ctx, f"{op}(X0,X1)")
        b_shape = tb.shape
        if old_prelu:  # the slope per channel: [C] read as [C, 1, ...]
            b_shape = _old_prelu_slope(ctx.node, ctx.graph) or tb.shape
        return [binary_launch(ctx, op, a, b, ctx.out(0), ta.shape, b_shape, out.shape,
                              ta.dtype, tb.dtype, out.dtype)]
    op = _VARIADIC[op_type]
    dt = np.dtype(out.dtype)
    launches = []
    if len(ins) == 1:
        (a, ta), = ins
        launches.append(unary_launch(ctx, "COPY", a, ctx.out(0), out.size, ta.dtype, dt))
    else:
        # a chain of binary launches; with 3+ inputs the partial results alternate between a
        # scratch buffer and the output so that no launch reads the buffer it writes (the
        # row kernels take restrict pointers), the last one landing in the output
        (a, ta), (b, tb) = ins[0], ins[1]
        tmp = ctx.scratch(out.size * dt.itemsize) if len(ins) > 2 else None
        bufs = [ctx.out(0), tmp]
        k = len(ins) - 2  # launches after the first
        dst = bufs[k % 2]
        launches.append(binary_launch(ctx, op, a, b, dst, ta.shape, tb.shape, out.shape, ta.dtype, tb.dtype, dt))
        for c, tc in ins[2:]:
            k -= 1
            nxt = bufs[k % 2]
            launches.append(binary_launch(ctx, op, dst, c, nxt, out.shape, tc.shape, out.shape, dt, tc.dtype, dt))
            dst = nxt
    if op_type == "Mean" and len(ins) > 1:
        launches.append(unary_launch(ctx, "SCALE", ctx.out(0), ctx.out(0), out.size, dt, dt, 1.0 / len(ins)))
    return launches


# --- Where ---------------------------------------------------------------------------------------
def _supports_where(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, _BOOL, [0]) or check_dtypes(node, graph, numeric(target) | _BOOL | {F16}, [1, 2])


@device_op("Where", supports=_supports_where, half=HalfIO((1, 2), (0,)))
def lower_where(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    return [ternary_launch(ctx, "WHERE", [ctx.buf(0), ctx.buf(1), ctx.buf(2)],
                           [t.shape for t in ctx.inputs[:3]], ctx.out(0), out.shape,
                           [np.dtype(np.bool_), ctx.inputs[1].dtype, ctx.inputs[2].dtype], dt)]
