"""Lowering of QuantizeLinear / DequantizeLinear (integer types; per tensor, per axis, blocked)
to OpenCL (see lower/base.py). float8/int4/int2/float4 quantized types stay on the host.

QuantizeLinear: y = saturate(rint(x / scale) + zero_point); DequantizeLinear:
y = (x - zero_point) * scale, computed in the scale's float type as onnx.reference does.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..dtypes import cl_type
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import F32, F64, check_dtypes, check_int32_sizes, dtype_of, floats, norm_axis, work_size

_QINTS = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16)}
_DQ_INTS = _QINTS | {np.dtype(np.int32)}


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if node.attr("precision"):
        return f"{node.op_type} with a precision attribute"
    fl = floats(target)
    if node.op_type == "QuantizeLinear":
        r = check_dtypes(node, graph, fl, inputs=[0, 1]) or check_dtypes(node, graph, _QINTS, inputs=[2])
        if r:
            return r
        out = dtype_of(graph, node.outputs[0])
        if out is not None and out not in _QINTS:
            return f"QuantizeLinear to {out.name}"
        return None
    r = check_dtypes(node, graph, _DQ_INTS, inputs=[0, 2]) or check_dtypes(node, graph, fl, inputs=[1])
    if r:
        return r
    out = dtype_of(graph, node.outputs[0])
    if out is not None and out not in fl:
        return f"DequantizeLinear to {out.name}"
    return None


@device_op("QuantizeLinear", "DequantizeLinear", supports=_supports, domain="com.microsoft")  # same semantics
@device_op("QuantizeLinear", "DequantizeLinear", supports=_supports)
def lower_quant(ctx: LowerCtx) -> list:
    x, s, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    r = len(x.shape)
    blk = int(ctx.attr("block_size", 0) or 0)
    if s.size == 1 and len(s.shape) <= 1 and not blk:
        mode, axis = 0, 0
    else:
        axis = norm_axis(ctx.attr("axis", 1), r)
        mode = 2 if blk else 1
    L = int(x.shape[axis]) if r else 1
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64)) if r else 1
    SL = int(s.shape[axis]) if mode == 2 else L
    sdt = np.dtype(s.dtype)
    defines = {"TX": cl_type(x.dtype), "TY": cl_type(out.dtype), "TS": cl_type(sdt)}
    if F64 in (sdt, np.dtype(x.dtype), np.dtype(out.dtype)):
        defines["USE_FP64"] = None
    if mode == 0 and _constant_params(ctx):
        return [_scalar_launch(ctx, defines, sdt)]
    args = [ctx.buf(0), ctx.buf(1)]
    if ctx.has_input(2):
        defines["HAS_ZP"] = None
        args.append(ctx.buf(2))
    args += [ctx.out(0), i32(out.size), i32(mode), i32(max(L, 1)), i32(max(inner, 1)), i32(max(blk, 1)),
             i32(max(SL, 1))]
    g, l = work_size(ctx, out.size)
    if ctx.node.op_type == "QuantizeLinear":
        info = np.iinfo(np.dtype(out.dtype))
        args += [sdt.type(info.min), sdt.type(info.max)]
        return [Launch("quant", "quantize", g, args, l, defines, ctx.label())]
    return [Launch("quant", "dequantize", g, args, l, defines, ctx.label())]


def _constant_params(ctx: LowerCtx) -> bool:
    """Scale (and zero point, when given) are initialisers: they become scalar kernel arguments."""
    return ctx.const(1) is not None and (not ctx.has_input(2) or ctx.const(2) is not None)


def _scalar_launch(ctx: LowerCtx, defines: dict, sdt: np.dtype) -> Launch:
    """Per-tensor Quantize/DequantizeLinear with constant parameters passed by value."""
    out = ctx.outputs[0]
    scale = sdt.type(np.asarray(ctx.const(1)).reshape(-1)[0])
    zp = int(np.asarray(ctx.const(2)).reshape(-1)[0]) if ctx.has_input(2) else 0
    g, l = work_size(ctx, out.size)
    if ctx.node.op_type == "QuantizeLinear":
        info = np.iinfo(np.dtype(out.dtype))
        args = [ctx.buf(0), ctx.out(0), i32(out.size), scale, i32(zp), i32(info.min), i32(info.max)]
        return Launch("quant", "quantize_scalar", g, args, l, defines, ctx.label())
    args = [ctx.buf(0), ctx.out(0), i32(out.size), scale, sdt.type(zp)]
    return Launch("quant", "dequantize_scalar", g, args, l, defines, ctx.label())


def _supports_dyn(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, {F32}, inputs=[0])


@device_op("DynamicQuantizeLinear", supports=_supports_dyn)
def lower_dynamic_quant(ctx: LowerCtx) -> list:
    """Parameters by one work-item into outputs 1 and 2, then the per-tensor quantize kernel."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    check_int32_sizes(ctx)
    outs = ctx.node.outputs
    scale = ctx.out(1) if len(outs) > 1 and outs[1] else ctx.scratch(4)
    zp = ctx.out(2) if len(outs) > 2 and outs[2] else ctx.scratch(4)
    defines = {"TX": "float", "TY": "uchar", "TS": "float"}
    launches = [Launch("quant", "dyn_qparams", (1,), [ctx.buf(0), scale, zp, i32(x.size)], (1,), defines,
                       ctx.label())]
    if out.size:
        g, l = work_size(ctx, out.size)
        launches.append(Launch("quant", "quantize", g, [ctx.buf(0), scale, zp, ctx.out(0), i32(out.size), i32(0),
                                                        i32(1), i32(1), i32(1), i32(1), np.float32(0),
                                                        np.float32(255)], l, dict(defines, HAS_ZP=None),
                               ctx.label()))
    return launches
