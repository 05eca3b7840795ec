"""Lowering of pooling ops to OpenCL launches (see lower/base.py for the contract).

One kernel covers 1-D..3-D MaxPool/AveragePool by padding the spatial dims to three; the
window geometry travels as 21 by-value int arguments. Output sizes (ceil_mode) are taken from the
concrete output shape; the kernel only needs the pads, which auto_pad is resolved to here.
X and Y may be stored as half (SessionOptions.precision): pool.cl reads and writes them through
storage.h (XH / YH), the max and the sums in float; the GPU family's global pool runs on float32
copies (lower/half.py).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from . import gpu_pool
from .common import AUTO_PADS, F16, F32, attr_str, check_dtypes, check_int32_sizes, grid, resolve_pads, work_size

log = logging.getLogger(__name__)

_F32 = {F32, F16}  # float32, or its half storage (HalfIO: X and Y)
_HALF_IO = HalfIO((0,), (0,))


def _storage(ctx: LowerCtx) -> dict:
    """pool.cl's storage defines: XH / YH where X / Y are stored as half (none for float32, so the
    float32 programs keep their keys)."""
    out: dict = {}
    if ctx.inputs[0].dtype == F16:
        out["XH"] = 1
    if ctx.outputs[0].dtype == F16:
        out["YH"] = 1
    return out


# MaxPool's 8-bit types (opset 12): the generic kernel compares them as they are, starting from
# the type's minimum (pool.cl POOL_INIT)
_INT_MAX_POOL = {np.dtype(np.uint8): ("uchar", "0"), np.dtype(np.int8): ("char", "(-128)")}


def _supports_pool(node: Node, graph: Graph, target: Target) -> Optional[str]:
    allowed = _F32 | set(_INT_MAX_POOL) if node.op_type == "MaxPool" else _F32
    bad = check_dtypes(node, graph, allowed, [0])
    if bad:
        return bad
    ks = node.attr("kernel_shape")
    if ks is None or not 1 <= len(ks) <= 3:
        return "pooling needs kernel_shape with 1 to 3 spatial dims"
    auto_pad = attr_str(node.attr("auto_pad"), "NOTSET")
    if auto_pad not in AUTO_PADS:
        return f"auto_pad {auto_pad!r}"
    return None


_MP_MAXW = 256  # pool.cl MP_MAXW: the widest input row of the pool2d_rows fast path


@device_op("MaxPool", "AveragePool", supports=_supports_pool, half=_HALF_IO)
def lower_pool(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    ks = [int(k) for k in ctx.attr("kernel_shape")]
    nd = len(ks)
    st = [int(s) for s in (ctx.attr("strides") or [1] * nd)]
    dil = [int(d) for d in (ctx.attr("dilations") or [1] * nd)]
    in_sp = [int(v) for v in x.shape[2:]]
    out_sp = [int(v) for v in out.shape[2:]]
    pb, pe = (list(p) for p in resolve_pads(attr_str(ctx.attr("auto_pad"), "NOTSET"), ctx.attr("pads"), in_sp,
                                            out_sp, ks, st, dil))
    pad3 = lambda v, fill: [fill] * (3 - nd) + list(v)  # noqa: E731
    geom = (pad3(in_sp, 1) + pad3(out_sp, 1) + pad3(ks, 1) + pad3(st, 1) + pad3(pb, 0) + pad3(pe, 0)
            + pad3(dil, 1))
    is_max = ctx.node.op_type == "MaxPool"
    defines: dict = {"T": "float", "POOL_MAX" if is_max else "POOL_AVG": None, **_storage(ctx)}
    integer = _INT_MAX_POOL.get(np.dtype(x.dtype))
    if integer is not None:  # the generic kernel only (the fast path is float16 vectors)
        defines.update(T=integer[0], POOL_INIT=integer[1])
    args: list = [ctx.buf(0), ctx.out(0)]
    if is_max and len(ctx.outputs) > 1 and ctx.outputs[1] is not None:
        defines["WITH_INDICES"] = None
        if int(ctx.attr("storage_order", 0)):
            defines["STORAGE_COL"] = None  # column-major spatial offsets (onnx.reference's)
        args.append(ctx.out(1))
    if not is_max and int(ctx.attr("count_include_pad", 0)):
        defines["COUNT_INCLUDE_PAD"] = None
    od, oh, ow = pad3(out_sp, 1)
    nc = int(out.shape[0]) * int(out.shape[1])
    h, w = pad3(in_sp, 1)[1:]
    kh, kw = pad3(ks, 1)[1:]
    sh, sw = pad3(st, 1)[1:]
    ph, pw = pad3(pb, 0)[1:]
    eh, ew = pad3(pe, 0)[1:]
    if ("WITH_INDICES" not in defines and integer is None and nd <= 2 and all(d == 1 for d in dil)
            and 15 * sw + kw <= 48 and w <= _MP_MAXW and max(pw, ew, ph, eh) <= 16):
        # 2-D fast path: input rows reduced into a private row, one work-item per output row.
        # 8 output rows per work-group (rows past OH return): a CPU driver pays per group
        rows = [h, w, oh, ow, kh, kw, sh, sw, ph, pw, eh, ew]
        noop = args + [i32(v) for v in rows[:2] + [0] + rows[3:]]  # OH = 0: code generated early
        gsize, ls = grid(ctx.device, (oh, nc), (8, 1))
        return [Launch("pool", "pool2d_rows", gsize, args + [i32(v) for v in rows], ls, defines, ctx.label(),
                       noop_args=noop)]
    # 16 output columns per work-group (pocl vectorises across them); one local size for all.
    noop = args + [i32(0) if i == 5 else i32(v) for i, v in enumerate(geom)]  # OW = 0: returns at once
    gsize, ls = grid(ctx.device, (ow, oh, nc * od), (16, 1, 1))
    return [Launch("pool", "pool", gsize, args + [i32(v) for v in geom], ls, defines, ctx.label(), noop_args=noop)]


def _supports_global(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, _F32, [0])


@device_op("GlobalAveragePool", "GlobalMaxPool", supports=_supports_global, half=_HALF_IO)
def lower_global_pool(ctx: LowerCtx) -> list:
    """One work-item per (n, c) plane: channels are many in CNNs, planes are short."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    if gpu_pool.applicable(ctx.device) is None:  # the GPU family: a work-group per plane (gpu_pool.py)
        return gpu_pool.lower_global_pool_wg(ctx)  # half storage too
    nc = int(np.prod(x.shape[:2], dtype=np.int64))
    length = int(np.prod(x.shape[2:], dtype=np.int64))
    if length == 0:
        raise InvalidModel(f"global pooling of an empty plane ({x.shape})", node=ctx.label())
    check_int32_sizes(ctx)
    op = "POOL_MAX" if ctx.node.op_type == "GlobalMaxPool" else "POOL_AVG"
    g, l = work_size(ctx, nc, cap=64)
    return [Launch("pool", "global_pool", g, [ctx.buf(0), ctx.out(0), i32(nc), i32(length)], l,
                   {"T": "float", op: None, **_storage(ctx)}, ctx.label(),
                   noop_args=[ctx.buf(0), ctx.out(0), i32(0), i32(length)])]  # nc = 0: returns at once
