"""Reductions, ArgMax/ArgMin, Hardmax and CumSum/CumProd on OpenCL (kernels_cl/reduce.cl).

Axes come from the attribute (older opsets) or the constant `axes` input (ReduceSum >= 13,
the others >= 18); a run-time axes tensor that is a graph input becomes a plan constant
(runtime.engine.SHAPE_INPUTS). One work-item per output element walks the reduced set through a
small (dims, strides) table, so any set of axes needs no transpose. That is the CPU family's
row; the GPU family's (work-group reductions, lower/gpu_reduce.py) comes first in each table
(_REDUCE_PATHS, _ARG_PATHS) where it applies.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from . import gpu_reduce
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from .common import F16, acc_type, check_dtypes, floats, norm_axis, numeric, type_defines, work_size

log = logging.getLogger(__name__)

_REDUCE = {"ReduceSum": "SUM", "ReduceMean": "MEAN", "ReduceMax": "MAX", "ReduceMin": "MIN",
           "ReduceProd": "PROD", "ReduceL1": "L1", "ReduceL2": "L2", "ReduceLogSum": "LOGSUM",
           "ReduceLogSumExp": "LOGSUMEXP", "ReduceSumSquare": "SUMSQUARE"}


# What reduce_rows computes when each output reduces one contiguous run (float32).
_ROW_SUMS = ("SUM", "MEAN", "SUMSQUARE", "L2", "LOGSUM", "MAX", "MIN")


def _axes_from_input(op_type: str, opset: int) -> bool:
    return opset >= (13 if op_type == "ReduceSum" else 18)


_BOOL = np.dtype(np.bool_)


def _supports_reduce(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Numeric (LogSum*: float) inputs; half storage on any device (reduce.cl XH, fp32 math)."""
    allowed = numeric(target) if node.op_type not in ("ReduceLogSumExp", "ReduceLogSum") else floats(target)
    if node.op_type in ("ReduceMax", "ReduceMin"):  # over bool: any / all, computed on its bytes
        allowed = set(allowed) | {_BOOL}
    return check_dtypes(node, graph, set(allowed) | {F16}, [0])


def _half_storage(defines: dict, x_dt: np.dtype, y_dt: np.dtype) -> dict:
    """reduce.cl's defines for half storage of x / y (XH / YH, the types float), else unchanged."""
    out = dict(defines)
    if x_dt == F16:
        out.update(T="float", XH=1, ACC="float")
    if y_dt == F16:
        out.update(TO="float", YH=1)
    return out


def _strides(shape: Sequence[int]) -> list:
    st, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        st[d] = acc
        acc *= int(shape[d])
    return st


def _merge(dims: list, strides: list) -> tuple:
    """Drop unit dims and merge neighbours that are contiguous with each other."""
    od, os_ = [], []
    for d, s in zip(dims, strides):
        if d == 1:
            continue
        if od and os_[-1] == s * d:
            od[-1] *= d
            os_[-1] = s
        else:
            od.append(int(d))
            os_.append(int(s))
    if not od:
        return [1], [0]
    return od, os_


def reduce_meta(shape: Sequence[int], axes: Sequence[int]) -> tuple:
    """(meta int32 array, RK, RR, n_out, n_red) for reducing `shape` over `axes`."""
    st = _strides(shape)
    kd, ks = _merge([int(shape[a]) for a in range(len(shape)) if a not in axes],
                    [st[a] for a in range(len(shape)) if a not in axes])
    rd, rs = _merge([int(shape[a]) for a in axes], [st[a] for a in axes])
    n_out = int(np.prod([shape[a] for a in range(len(shape)) if a not in axes], dtype=np.int64))
    n_red = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    meta = np.array(kd + ks + rd + rs, dtype=np.int32)
    return meta, len(kd), len(rd), n_out, n_red


def _reduce_axes(ctx: LowerCtx) -> list:
    x = ctx.inputs[0]
    r = len(x.shape)
    op = ctx.node.op_type
    noop = int(ctx.attr("noop_with_empty_axes", 0))
    if _axes_from_input(op, ctx.opset):
        if ctx.has_input(1):
            c = ctx.const(1)
            if c is None:
                raise ValueError(f"{ctx.node.name}: {op} with run-time axes")
            axes = [int(a) for a in np.asarray(c).reshape(-1)]
        else:
            axes = []
    else:
        axes = list(ctx.attr("axes", []) or [])
    if not axes:
        return [] if noop else list(range(r))
    return sorted({norm_axis(a, r) for a in axes})


def _empty_value(op: str, dt: np.dtype) -> str:
    if dt.kind == "f":
        return "(-INFINITY)" if op == "MAX" else "INFINITY"
    info = np.iinfo(dt)
    return f"({int(info.min)})" if op == "MAX" else f"({int(info.max)}UL)" if dt.kind == "u" else f"({int(info.max)})"


_ACC_BYTES = {"float": 4, "double": 8, "long": 8, "ulong": 8}  # acc_type's C types


def _split(meta: np.ndarray, rk: int, rr: int) -> tuple:
    """(kept dims, kept strides, reduced dims, reduced strides) of a reduce_meta table."""
    m = [int(v) for v in meta]
    return m[:rk], m[rk:2 * rk], m[2 * rk:2 * rk + rr], m[2 * rk + rr:]


def _lower_reduce_wg(ctx: LowerCtx, meta: np.ndarray, rk: int, rr: int, defines: dict) -> list:
    """The GPU family's row: one work-group per output (or per column block), gpu_reduce.cl."""
    lay = gpu_reduce.plan(*_split(meta, rk, rr))
    ls = gpu_reduce.choose_ls(ctx.device, lay, _ACC_BYTES[defines["ACC"]], ctx.label())
    d = {k: v for k, v in defines.items() if k not in ("RK", "RR")}
    if defines["ACC"] in ("float", "double"):
        d["ACC_FLOAT"] = None
    meta_arg = ctx.const_buffer(lay.meta)
    parts = gpu_reduce.split_parts(ctx.device, lay, ls, _REDUCE[ctx.node.op_type])
    if parts > 1:  # few outputs, long runs: each run in `parts` groups, then their results combined
        scratch = ctx.scratch(_ACC_BYTES[defines["ACC"]] * lay.n_hi * parts)
        return gpu_reduce.split_launches(ctx.device, lay, ctx.buf(0), ctx.out(0), d, ls, meta_arg, parts, scratch,
                                         defines["ACC"], ctx.label())
    return [gpu_reduce.reduce_launch(ctx.device, lay, ctx.buf(0), ctx.out(0), d, ls, meta_arg, ctx.label())]


def _lower_reduce_items(ctx: LowerCtx, meta: np.ndarray, rk: int, rr: int, defines: dict) -> list:
    """The CPU family's row: one work-item per output (reduce.cl)."""
    x = ctx.inputs[0]
    n_out, n_red = ctx.outputs[0].size, int(np.prod(meta[2 * rk:2 * rk + rr], dtype=np.int64))
    g, l = work_size(ctx, n_out)
    kernel = "reduce"
    if (rr == 1 and meta[-1] == 1 and np.dtype(x.dtype) == np.float32 and ctx.outputs[0].dtype == np.float32
            and _REDUCE[ctx.node.op_type] in _ROW_SUMS):
        kernel = "reduce_rows"  # one contiguous run per output: summed in lanes
    defines = _half_storage(defines, np.dtype(x.dtype), np.dtype(ctx.outputs[0].dtype))
    return [Launch("reduce", kernel, g, [ctx.buf(0), ctx.out(0), i32(n_out), i32(n_red),
                                         ctx.const_buffer(meta)], l, defines, ctx.label())]


# Reduce*'s implementations, ranked: (name, applicable(target) -> None or why not, lower).
_REDUCE_PATHS = (("work-group", gpu_reduce.applicable, _lower_reduce_wg),
                 ("per-output", lambda target: None, _lower_reduce_items))


@device_op(*_REDUCE, supports=_supports_reduce, half=HalfIO((0,), (0,)))
def lower_reduce(ctx: LowerCtx) -> list:
    """Reduce* over its axes; half storage read and written by the CPU family's reduce.cl and the
    GPU family's work-group kernels (gpu_reduce.storage_defines)."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    op = _REDUCE[ctx.node.op_type]
    meta, rk, rr, _n_out, _n_red = reduce_meta(x.shape, _reduce_axes(ctx))
    dt, out_dt = np.dtype(x.dtype), np.dtype(out.dtype)
    is_bool = dt == _BOOL
    if is_bool:  # max / min of the bytes 0 and 1
        dt = out_dt = np.dtype(np.uint8)
    defines = type_defines(T=dt, TO=out_dt)
    defines.update({f"OP_{op}": None, "ACC": acc_type(dt), "RK": rk, "RR": rr})
    if op in ("MAX", "MIN"):  # an empty reduction: the type's lowest / highest (bool: false / true)
        defines["EMPTY"] = ("(0)" if op == "MAX" else "(1)") if is_bool else _empty_value(op, dt)
    lower = next(fn for _name, ok, fn in _REDUCE_PATHS if ok(ctx.device) is None)
    return lower(ctx, meta, rk, rr, defines)


def _supports_arg(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target), [0])


def _lower_arg_wg(ctx: LowerCtx, axis: int, defines: dict) -> list:
    """The GPU family's row: one work-group per output (or per column block), gpu_reduce.cl."""
    shape = [int(d) for d in ctx.inputs[0].shape]
    st = _strides(shape)
    keep = [a for a in range(len(shape)) if a != axis]
    lay = gpu_reduce.plan(*_merge([shape[a] for a in keep], [st[a] for a in keep]),
                          *_merge([shape[axis]], [st[axis]]))
    item = np.dtype(ctx.inputs[0].dtype).itemsize + 4  # a (value, index) pair per work-item
    ls = gpu_reduce.choose_ls(ctx.device, lay, item, ctx.label())
    d = {k: v for k, v in defines.items() if k not in ("RK", "RR")}
    return [gpu_reduce.arg_launch(ctx.device, lay, ctx.buf(0), ctx.out(0), d, ls, ctx.const_buffer(lay.meta),
                                  int(ctx.attr("select_last_index", 0)), ctx.label())]


@device_op("ArgMax", "ArgMin", supports=_supports_arg)
def lower_arg(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    axis = norm_axis(ctx.attr("axis", 0), len(x.shape))
    shape = list(x.shape)
    st = _strides(shape)
    kd, ks = _merge([shape[a] for a in range(len(shape)) if a != axis], [st[a] for a in range(len(shape)) if a != axis])
    meta = np.array(kd + ks + [shape[axis], st[axis]], dtype=np.int32)
    n_out = out.size
    defines = type_defines(T=np.dtype(x.dtype))
    defines.update({"OP_" + ctx.node.op_type.upper(): None, "RK": len(kd), "RR": 1})
    if gpu_reduce.applicable(ctx.device) is None:
        return _lower_arg_wg(ctx, axis, defines)
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    if np.dtype(x.dtype) == np.float32 and inner >= 16 and shape[axis] > 0:
        # an inner axis: 16 adjacent outputs per work-item as vectors (reduce.cl argreduce_cols)
        outer = n_out // inner
        return [Launch("reduce", "argreduce_cols", (-(-inner // 16), outer),
                       [ctx.buf(0), ctx.out(0), i32(shape[axis]), i32(inner),
                        i32(int(ctx.attr("select_last_index", 0)))], (1, 1), defines, ctx.label())]
    g, l = work_size(ctx, n_out)
    return [Launch("reduce", "argreduce", g, [ctx.buf(0), ctx.out(0), i32(n_out), i32(shape[axis]),
                                              ctx.const_buffer(meta), i32(int(ctx.attr("select_last_index", 0)))],
                   l, defines, ctx.label())]


def _axis_meta(shape: Sequence[int], axis: int) -> tuple:
    shape = list(shape)
    st = _strides(shape)
    kd, ks = _merge([shape[a] for a in range(len(shape)) if a != axis], [st[a] for a in range(len(shape)) if a != axis])
    meta = np.array(kd + ks + [shape[axis], st[axis]], dtype=np.int32)
    n_out = int(np.prod([shape[a] for a in range(len(shape)) if a != axis], dtype=np.int64))
    return meta, len(kd), n_out


def _supports_hardmax(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, floats(target), [0])


@device_op("Hardmax", supports=_supports_hardmax)
def lower_hardmax(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    r = len(x.shape)
    if ctx.opset < 13:  # coerced to 2-D at `axis`, the max over the flattened trailing dims
        axis = norm_axis(ctx.attr("axis", 1), r)
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        shape, axis = (outer, int(np.prod(x.shape[axis:], dtype=np.int64))), 1
    else:
        axis, shape = norm_axis(ctx.attr("axis", -1), r), x.shape
    meta, rk, n_out = _axis_meta(shape, axis)
    defines = type_defines(T=np.dtype(x.dtype))
    defines.update({"RK": rk, "RR": 1})
    g, l = work_size(ctx, n_out)
    return [Launch("reduce", "hardmax", g, [ctx.buf(0), ctx.out(0), i32(n_out), i32(shape[axis]),
                                            ctx.const_buffer(meta)], l, defines, ctx.label())]


def _supports_scan(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target), [0])


@device_op("CumSum", "CumProd", supports=_supports_scan)
def lower_scan(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    c = ctx.const(1)
    if c is None:
        raise ValueError(f"{ctx.node.name}: {ctx.node.op_type} with a run-time axis")
    axis = norm_axis(int(np.asarray(c).reshape(-1)[0]), len(x.shape))
    meta, rk, n_out = _axis_meta(x.shape, axis)
    dt = np.dtype(x.dtype)
    defines = type_defines(T=dt)
    defines.update({"RK": rk, "RR": 1, "ACC": acc_type(dt), "OP_" + ctx.node.op_type.upper(): None})
    g, l = work_size(ctx, n_out)
    return [Launch("reduce", "scan", g, [ctx.buf(0), ctx.out(0), i32(n_out), i32(x.shape[axis]),
                                         ctx.const_buffer(meta), i32(int(ctx.attr("exclusive", 0))),
                                         i32(int(ctx.attr("reverse", 0)))], l, defines, ctx.label())]
