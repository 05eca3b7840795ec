"""OpenCL lowerings of onnxruntime's non-GEMM quantized contrib ops (domain com.microsoft), in
kernels_cl/qlinear.cl, with onnxruntime's semantics (clglow.qmath):

  QLinearAdd, QLinearMul      qbinary: dequantize, add/multiply, requantise; any broadcast
  QLinearSigmoid, LeakyRelu   qlut: a 256-entry table made here from the constant scales (as
                              onnxruntime's QLinearLookupBase does), one lookup per element
  QLinearGlobalAveragePool    qgap: exact int sums per (image, channel), NCHW or channels_last
  QLinearAveragePool          qavgpool: 1-D and 2-D windows (3-D stays on the host)
  QLinearConcat               qconcat_part per input: a requantising table or a plain copy
  QLinearSoftmax              qsoftmax: onnxruntime's exp table (from the constant x_scale), a row per
                              work-item (opset < 13: the rows are the flattened [axis:] dims)

The int8 GEMM/conv contrib ops (QGemm, QLinearConv, DynamicQuantizeMatMul, MatMulIntegerToFloat)
lower elsewhere; com.microsoft QuantizeLinear/DequantizeLinear share lower/quant.py's kernels.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .. import qmath
from . import qconv
from ..frontend.contrib_ops import DOMAIN, spatial_out
from ..ir import Graph, Node
from ..target import Target
from .base import REGISTRY, Arg, Launch, LowerCtx, device_op, i32
from .common import check_int32_sizes, dtype_of, norm_axis, shape_of, work_size
from .index_space import collapse, meta_table, row_layout

Q8 = {np.dtype(np.uint8), np.dtype(np.int8)}
F32 = np.dtype(np.float32)
_CL = {np.dtype(np.uint8): "uchar", np.dtype(np.int8): "char"}


def _qdefines(dtype: np.dtype, **extra: object) -> dict:
    info = np.iinfo(dtype)
    return {"T": _CL[np.dtype(dtype)], "QMIN": int(info.min), "QMAX": int(info.max), **extra}


def _check(node: Node, graph: Graph, data: list, scales: list, zps: list) -> Optional[str]:
    """supports() of the QLinear ops: 8-bit data inputs of one type, float32 scales, zero points of
    the data's type, per-tensor (one element) scales and zero points, all constant (kernel
    arguments and tables made at lowering; onnxruntime's quantizer writes them as initializers)."""
    dts = {dtype_of(graph, node.input(i)) for i in data} - {None}
    if not dts <= Q8:
        return f"{node.op_type} on {', '.join(sorted(d.name for d in dts))} (the kernels take int8/uint8)"
    if len(dts) > 1:
        return f"{node.op_type} with inputs of different types"
    for i in scales:
        dt = dtype_of(graph, node.input(i))
        if dt is not None and dt != F32:
            return f"{node.op_type} scale {node.input(i)!r} of type {dt.name}"
    for i in scales + zps:
        shape = shape_of(graph, node.input(i))
        if node.input(i) and shape is not None and any(isinstance(d, int) and d != 1 for d in shape):
            return f"{node.op_type} with a per-axis scale or zero point {node.input(i)!r}"
    for i in scales + zps:
        if node.input(i) and graph.const(node.input(i)) is None:
            return f"{node.op_type} with a non-constant {node.input(i)!r} (the kernels take them at lowering)"
    return None


def _const_scalar(ctx: LowerCtx, i: int, default: float = 0.0) -> float:
    """The value of constant scale/zero-point input i (absent: `default`)."""
    return qmath.scalar(ctx.const(i), default) if ctx.has_input(i) else default


def _f(ctx: LowerCtx, i: int) -> np.float32:
    return np.float32(_const_scalar(ctx, i))


def _i(ctx: LowerCtx, i: int) -> np.int32:
    return np.int32(_const_scalar(ctx, i))


# --- QLinearAdd / QLinearMul -------------------------------------------------------------------------
def _row_group(ctx: LowerCtx, inner: int) -> int:
    """The largest work-group (<= 256, within the device's limit) dividing the row length `inner`:
    qbinary_rows' groups must each lie in one row."""
    cap = min(256, int(ctx.device.max_work_group_size))
    for g in (256, 128, 64, 32, 16):
        if g <= cap and inner % g == 0:
            return g
    return 1


def _supports_binary(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return _check(node, graph, [0, 3], [1, 4, 6], [2, 5, 7])


def _scalar_operand_table(ctx: LowerCtx, dt: np.dtype) -> Optional[tuple]:
    """(index of the live operand, its 256-entry table) where the other operand is one constant
    element and the live one has the output's shape (BERT's GELU: erf + 1, x * 0.5), else None.
    The table is qmath's QLinearAdd / QLinearMul, the same float32 operations in the same order
    as qbinary's, so every entry is what the kernel computes (a flat kernel reading b[0] per
    element ran 20x slower on pocl: 1.8 against 0.09 ms for [1, 128, 1024])."""
    a, b, out = ctx.inputs[0], ctx.inputs[3], ctx.outputs[0]
    fn = qmath.qlinear_mul if ctx.node.op_type == "QLinearMul" else qmath.qlinear_add
    a_s, a_z, b_s, b_z, c_s, c_z = (_const_scalar(ctx, i) for i in (1, 2, 4, 5, 6, 7))
    codes = qmath.all_codes(dt)
    for live, other, ci in ((0, b, 3), (3, a, 0)):
        c = ctx.const(ci)
        live_t = a if live == 0 else b
        if c is None or other.size != 1 or tuple(live_t.shape) != tuple(out.shape):
            continue
        one = np.full(256, np.asarray(c).reshape(-1)[0], np.asarray(c).dtype)
        xa, xb = (codes, one) if live == 0 else (one, codes)
        return live, fn(xa, a_s, a_z, xb, b_s, b_z, c_s, c_z, dt)
    return None


@device_op("QLinearAdd", "QLinearMul", supports=_supports_binary, domain=DOMAIN)
def lower_qbinary(ctx: LowerCtx) -> list:
    a, b, out = ctx.inputs[0], ctx.inputs[3], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    defines = _qdefines(dt)
    if ctx.node.op_type == "QLinearMul":
        defines["OP_MUL"] = None
    a_s, b_s, c_s = _f(ctx, 1), _f(ctx, 4), _f(ctx, 6)
    if ctx.node.op_type == "QLinearMul":
        ra, rb = np.float32(a_s * b_s / c_s), np.float32(0)
    else:
        ra, rb = np.float32(a_s / c_s), np.float32(b_s / c_s)
    params = [ra, rb, _i(ctx, 2), _i(ctx, 5), _f(ctx, 7)]
    lut = _scalar_operand_table(ctx, dt)
    if lut is not None:  # one constant element: the op is a table of the other operand's byte
        live, table = lut
        g, l = work_size(ctx, out.size)
        return [Launch("qlinear", "qlut", g, [ctx.buf(live), ctx.const_buffer(table), ctx.out(0), i32(out.size)],
                       l, _qdefines(dt), ctx.label())]
    same_a, same_b = tuple(a.shape) == tuple(out.shape), tuple(b.shape) == tuple(out.shape)
    if (same_a or a.size == 1) and (same_b or b.size == 1):  # elementwise, or against one element
        defines["FLAT"] = None
        if not same_a:
            defines["SCALAR_A"] = None
        elif not same_b:
            defines["SCALAR_B"] = None
        meta: Arg = ctx.const_buffer(np.zeros(1, np.int32), key="qbinary:nometa")
    else:
        dims, strides = collapse(out.shape, [a.shape, b.shape])
        rl = row_layout(ctx.device, dims, strides)
        if rl is not None:
            _, _, inner, _, rowoff, last, row_defines = rl
            group = _row_group(ctx, inner)
            if group < 16:  # groups would straddle rows: the row from a division per element
                row_defines = {**row_defines, "ROW_DIV": None}
                gsize, lsize = work_size(ctx, out.size)
            else:
                gsize, lsize = (out.size,), (group,)
            args = [ctx.buf(0), ctx.buf(3), ctx.out(0), i32(out.size), i32(inner), ctx.const_buffer(rowoff),
                    ctx.const_buffer(last)] + params
            return [Launch("qlinear", "qbinary_rows", gsize, args, lsize, {**defines, **row_defines}, ctx.label())]
        defines["RANK"] = len(dims)
        meta = meta_table(ctx, dims, strides)
    args = [ctx.buf(0), ctx.buf(3), ctx.out(0), i32(out.size), meta] + params
    g, l = work_size(ctx, out.size)
    return [Launch("qlinear", "qbinary", g, args, l, defines, ctx.label())]


# --- one quantized input, one output (x, x_scale, x_zp, y_scale, y_zp) ------------------------------
def _supports_unary(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return _check(node, graph, [0], [1, 3], [2, 4])


# --- lookup-table ops ------------------------------------------------------------------------------


def _lut_fn(ctx: LowerCtx) -> Callable[[np.ndarray], np.ndarray]:
    if ctx.node.op_type == "QLinearSigmoid":
        return qmath.sigmoid
    return qmath.leaky_relu(float(ctx.attr("alpha", 0.01)))


@device_op("QLinearSigmoid", "QLinearLeakyRelu", supports=_supports_unary, domain=DOMAIN)
def lower_qlut(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    table = qmath.lookup_table(_lut_fn(ctx), _const_scalar(ctx, 1), _const_scalar(ctx, 2), _const_scalar(ctx, 3),
                               _const_scalar(ctx, 4), dt, dt)
    g, l = work_size(ctx, out.size)
    return [Launch("qlinear", "qlut", g, [ctx.buf(0), ctx.const_buffer(table), ctx.out(0), i32(out.size)], l,
                   _qdefines(dt), ctx.label())]


# --- pools ---------------------------------------------------------------------------------------
@device_op("QLinearGlobalAveragePool", supports=_supports_unary, domain=DOMAIN)
def lower_qgap(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    cl = int(ctx.attr("channels_last", 0) or 0)
    channels = int(x.shape[-1] if cl else x.shape[1])
    hw = int(np.prod(x.shape[1:-1] if cl else x.shape[2:], dtype=np.int64))
    scale = qmath.global_avg_scale(_const_scalar(ctx, 1), _const_scalar(ctx, 3), hw)
    args = [ctx.buf(0), ctx.out(0), i32(out.size), i32(hw), i32(channels), i32(cl), scale, _i(ctx, 2), _f(ctx, 4)]
    group = _gap_group(ctx.device, hw)
    if group:  # a work-group per (image, channel), reduced in local memory
        return [Launch("qlinear", "qgap_group", (out.size * group,), args, (group,),
                       _qdefines(dt, GAP_GROUP=group), ctx.label())]
    g, l = work_size(ctx, out.size, cap=64)
    return [Launch("qlinear", "qgap", g, args, l, _qdefines(dt), ctx.label())]


def _gap_group(target: Target, hw: int) -> int:
    """qgap_group's work-group size where it pays: devices with dedicated local memory and maps of
    256+ pixels (a CPU driver runs a group's items one after another, so there the one-item-per-
    channel qgap is as fast and needs no barriers); 0 for qgap."""
    if not target.has_local_memory or hw < 256:
        return 0
    group = 128 if hw >= 2048 else 64
    while group > int(target.max_work_group_size):  # a power of two: the kernel's reduction tree halves it
        group //= 2
    return group if group >= 8 else 0


def _supports_avgpool(node: Node, graph: Graph, target: Target) -> Optional[str]:
    shape = shape_of(graph, node.input(0))
    if shape is not None and len(shape) not in (3, 4):
        return f"QLinearAveragePool over {len(shape) - 2} spatial dims (the kernel takes 1 or 2)"
    return _supports_unary(node, graph, target)


@device_op("QLinearAveragePool", supports=_supports_avgpool, domain=DOMAIN)
def lower_qavgpool(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    cl = bool(int(ctx.attr("channels_last", 0) or 0))
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    n_sp = len(x.shape) - 2
    out_sp = spatial_out(ctx.node, tuple(x.shape), kernel, cl, bool(int(ctx.attr("ceil_mode", 0) or 0)))
    in_sp = list(x.shape[1:-1] if cl else x.shape[2:])
    strides = [int(s) for s in (ctx.attr("strides") or [1] * n_sp)]
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    begins = qmath.pool_pads(in_sp, out_sp, kernel, strides, ctx.attr("pads"), str(auto_pad))[:n_sp]
    if n_sp == 1:  # as 2-D with H = 1
        in_sp, out_sp, kernel, strides, begins = [1] + in_sp, (1,) + tuple(out_sp), [1] + kernel, [1] + strides, \
            [0] + begins
    channels = int(x.shape[-1] if cl else x.shape[1])
    args = [ctx.buf(0), ctx.out(0), _f(ctx, 1), _i(ctx, 2), _f(ctx, 3), _f(ctx, 4), i32(out.size),
            i32(channels), i32(in_sp[0]), i32(in_sp[1]), i32(out_sp[0]), i32(out_sp[1]), i32(kernel[0]),
            i32(kernel[1]), i32(strides[0]), i32(strides[1]), i32(begins[0]), i32(begins[1]),
            i32(int(ctx.attr("count_include_pad", 0) or 0))]
    g, l = work_size(ctx, out.size)
    defines = _qdefines(dt, **({"CHANNELS_LAST": None} if cl else {}))
    return [Launch("qlinear", "qavgpool", g, args, l, defines, ctx.label())]


# --- QLinearConcat ---------------------------------------------------------------------------------
def _supports_concat(node: Node, graph: Graph, target: Target) -> Optional[str]:
    n = len(node.inputs)
    data = list(range(2, n, 3))
    return _check(node, graph, data, [0] + list(range(3, n, 3)), [1] + list(range(4, n, 3)))


@device_op("QLinearConcat", supports=_supports_concat, domain=DOMAIN)
def lower_qconcat(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    r = len(out.shape)
    axis = norm_axis(ctx.attr("axis"), r)
    inner = int(np.prod(out.shape[axis + 1:], dtype=np.int64))
    len_out = int(out.shape[axis])
    ys, yz = _const_scalar(ctx, 0), _const_scalar(ctx, 1)
    launches, offset = [], 0
    for i in range(2, len(ctx.inputs), 3):
        x = ctx.inputs[i]
        xs, xz = _const_scalar(ctx, i + 1), _const_scalar(ctx, i + 2)
        len_in = int(x.shape[axis])
        if x.size:
            defines = _qdefines(dt)
            if (np.float32(xs), xz) != (np.float32(ys), yz) or np.dtype(x.dtype) != dt:
                table = qmath.lookup_table(qmath.identity, xs, xz, ys, yz, np.dtype(x.dtype), dt)
                defines["HAS_TABLE"] = None
            else:
                table = np.zeros(1, dt)
            g, l = work_size(ctx, x.size)
            launches.append(Launch("qlinear", "qconcat_part", g,
                                   [ctx.buf(i), ctx.const_buffer(table), ctx.out(0), i32(x.size), i32(len_in),
                                    i32(len_out), i32(offset), i32(inner)], l, defines, ctx.label()))
        offset += len_in
    return launches


# --- QLinearSoftmax --------------------------------------------------------------------------------
@device_op("QLinearSoftmax", supports=_supports_unary, domain=DOMAIN)
def lower_qsoftmax(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    dt = np.dtype(out.dtype)
    r = len(x.shape)
    opset = int(ctx.attr("opset"))
    axis = norm_axis(ctx.attr("axis", -1 if opset >= 13 else 1), r)
    if opset < 13:
        d, inner = int(np.prod(x.shape[axis:], dtype=np.int64)), 1
    else:
        d, inner = int(x.shape[axis]), int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    rows = out.size // max(d, 1)
    table = qmath.softmax_table(_const_scalar(ctx, 1), d)
    ysf = np.float32(np.floor(1.0 / float(np.float32(_const_scalar(ctx, 3)))))
    g, l = work_size(ctx, rows, cap=64)
    args = [ctx.buf(0), ctx.const_buffer(table), ctx.out(0), i32(rows), i32(d), i32(inner), ysf, _f(ctx, 4)]
    return [Launch("qlinear", "qsoftmax", g, args, l, _qdefines(dt), ctx.label())]


# --- com.microsoft QLinearConv ----------------------------------------------------------------------
def _supports_ms_conv(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """ai.onnx QLinearConv's kernels (lower/qconv.py) for the NCHW form; channels_last stays on the host."""
    if int(node.attr("channels_last", 0) or 0):
        return "com.microsoft QLinearConv with channels_last (NHWC)"
    plain = Node(node.op_type, node.name, node.inputs, node.outputs,
                 {k: v for k, v in node.attrs.items() if k != "channels_last"}, "", node.proto)
    return REGISTRY[("", "QLinearConv")].supports(plain, graph, target)


@device_op("QLinearConv", supports=_supports_ms_conv, domain=DOMAIN)
def lower_ms_qlinear_conv(ctx: LowerCtx) -> list:
    """The NCHW com.microsoft QLinearConv is ai.onnx's: the same lowering."""
    return qconv.lower_qlinear_conv(ctx)
