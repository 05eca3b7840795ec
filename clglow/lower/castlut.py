"""Casts involving narrow types (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz/e8m0, float4e2m1, int4/uint4,
int2/uint2, bfloat16) and BitCast, on OpenCL.

Tables are built on the host by onnx.reference's own cast (saturate, round_mode included), so the
device result is bit-exact with it: 256 entries for a 1-byte source, 65536 for float16/bfloat16,
and for float32 two entries per top-16-bit pattern (exact, and 'a little more'), which rounds
correctly into any format with at most 7 mantissa bits. float32 -> int4/int2 family is computed
in the kernel, rounded or truncated and out-of-range values handled as the installed
onnx.reference does (probed: _lowint_mode).
"""
from __future__ import annotations

import functools
import warnings
from typing import Optional

import numpy as np
import onnx

from .base import Launch, LowerCtx, device_op, f32, i32
from .common import STORAGE_CL, STORAGE_NP, attr_str, check_int32_sizes, work_size
from .movement import copy_launches, supports_movable

NARROW = {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
          "float4_e2m1fn", "int4", "uint4", "int2", "uint2", "bfloat16"}
_LOWINT_MASK = {"int4": 0xF, "uint4": 0xF, "int2": 0x3, "uint2": 0x3}
_TABLE_TYPES = (1, 2, 4)  # element sizes a table entry may have (castlut.cl lut8/16/32 store)


def is_narrow(dt) -> bool:
    return dt is not None and np.dtype(dt).name in NARROW


def supports_narrow_cast(src, dst) -> Optional[str]:
    """None when (src, dst) is a narrow-type cast this module runs, else a reason."""
    src, dst = np.dtype(src), np.dtype(dst)
    if dst.itemsize not in _TABLE_TYPES:
        return f"Cast from {src.name} to {dst.name} is not handled by the OpenCL kernel"
    if src.itemsize == 1 or src in (np.dtype(np.float16),) or src.name == "bfloat16":
        return None
    if src == np.float32 and is_narrow(dst):
        return None
    return f"Cast from {src.name} to {dst.name} is not handled by the OpenCL kernel"


@functools.lru_cache(maxsize=64)
def _table(src: str, dst: str, saturate: bool, round_mode: str) -> np.ndarray:
    from onnx.reference.ops.op_cast import cast_to

    sdt, ddt = _dtype(src), _dtype(dst)
    to = onnx.helper.np_dtype_to_tensor_dtype(ddt)
    if sdt.itemsize == 1:
        vals = np.arange(256, dtype=np.uint8).view(sdt)
    elif sdt.itemsize == 2:
        vals = np.arange(65536, dtype=np.uint16).view(sdt)
    else:
        top = np.arange(65536, dtype=np.uint32) << np.uint32(16)
        vals = np.concatenate([top, top | np.uint32(1)]).view(np.float32)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = np.asarray(cast_to(vals, to, saturate, round_mode)).astype(ddt)
    return np.ascontiguousarray(out).view(STORAGE_NP[ddt.itemsize])


_LOWINT_RANGE = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


@functools.lru_cache(maxsize=8)
def _lowint_mode(dst: str) -> tuple:
    """(round to nearest even, out-of-range rule: 0 wrap, 1 clamp, 2 zero) for float32 -> `dst`
    as the installed onnx.reference casts (numpy + ml_dtypes: ml_dtypes 0.7 truncates and gives 0
    out of range where earlier versions truncated and wrapped), probed on values that tell the
    rules apart; the kernel takes them as arguments. Truncate-and-wrap when none matches."""
    from onnx.reference.ops.op_cast import cast_to

    ddt = _dtype(dst)
    mask, (lo, hi) = _LOWINT_MASK[dst], _LOWINT_RANGE[dst]
    probe = np.concatenate([np.arange(-40, 40.25, 0.25), [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]]).astype(np.float32)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ref = np.asarray(cast_to(probe, onnx.helper.np_dtype_to_tensor_dtype(ddt), True, "up")).astype(ddt)
    got = np.ascontiguousarray(ref).view(np.uint8).astype(np.int64) & mask
    for rnd in (0, 1):
        v = np.rint(probe) if rnd else np.trunc(probe)
        out = (v < lo) | (v > hi)
        for oor, w in ((0, v), (1, np.clip(v, lo, hi)), (2, np.where(out, 0, v))):
            if np.array_equal(w.astype(np.int64) & mask, got):
                return rnd, oor
    return 0, 0


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def lower_narrow_cast(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    src, dst = np.dtype(ctx.inputs[0].dtype), np.dtype(out.dtype)
    g, l = work_size(ctx, out.size)
    if src == np.float32 and dst.name in _LOWINT_MASK:
        rnd, oor = _lowint_mode(dst.name)
        lo, hi = _LOWINT_RANGE[dst.name]
        return [Launch("castlut", "f32_to_lowint", g, [ctx.buf(0), ctx.out(0), i32(out.size), i32(rnd), i32(oor),
                                                       f32(lo), f32(hi)],
                       l, {"MASK": _LOWINT_MASK[dst.name], "TO": "uchar"}, ctx.label())]
    if src == np.float32 and dst.name == "bfloat16":
        return [Launch("castlut", "f32_to_bf16", g, [ctx.buf(0), ctx.out(0), i32(out.size)], l, {"TO": "ushort"},
                       ctx.label())]
    sat = bool(int(ctx.attr("saturate", 1)))
    rm = ctx.attr("round_mode", "up")
    rm = attr_str(rm)
    table = _table(src.name, dst.name, sat, rm)
    cb = ctx.const_buffer(table, key=f"castlut:{src.name}:{dst.name}:{sat}:{rm}")
    kernel = {1: "lut8", 2: "lut16", 4: "lut32"}[src.itemsize]
    return [Launch("castlut", kernel, g, [ctx.buf(0), cb, ctx.out(0), i32(out.size)], l,
                   {"TO": STORAGE_CL[dst.itemsize]}, ctx.label())]


# --- BitCast -------------------------------------------------------------------------------------
@device_op("BitCast", supports=supports_movable)
def lower_bitcast(ctx: LowerCtx) -> list:
    """The output's bytes are the input's bytes: one byte copy."""
    x = ctx.inputs[0]
    nbytes = x.size * np.dtype(x.dtype).itemsize
    if nbytes == 0:
        return []
    return copy_launches(ctx, ctx.buf(0), ctx.out(0), np.dtype(np.uint8), [nbytes], [1], [1])
