"""The arithmetic of onnxruntime's quantized contrib operators (com.microsoft), in numpy.

One place for the semantics, as onnxruntime's CPU kernels compute them: dequantize in float32,
the float op, requantise with round-half-even (rint) and saturation. Used by the OpenCL lowerings
for what they precompute (the 256-entry lookup tables of QLinearSigmoid, QLinearLeakyRelu and
QLinearConcat's requantisation, QLinearSoftmax's exp table) and by the host references
(runtime/contrib_host.py) for whatever a kernel declines. The tests compare both with
onnxruntime itself, never with this module.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Optional, Sequence

import numpy as np

F32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)


def saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """rint(v) clamped to `dtype`'s range, as `dtype` (round half to even, as std::nearbyint)."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(v), info.min, info.max).astype(dtype)


def scalar(a: Optional[np.ndarray], default: float = 0.0) -> float:
    """The single value of a scale/zero-point tensor (absent: `default`)."""
    if a is None:
        return default
    a = np.asarray(a)
    if a.size != 1:
        raise ValueError(f"expected a scalar or 1-element tensor, got shape {list(a.shape)}")
    return float(a.reshape(-1)[0])


def all_codes(dtype: np.dtype) -> np.ndarray:
    """The 256 values of an 8-bit type in index order: entry i is the value whose byte is i."""
    return np.arange(256, dtype=np.uint8).view(np.dtype(dtype))


def lookup_table(fn: Callable[[np.ndarray], np.ndarray], x_scale: float, x_zp: float, y_scale: float,
                 y_zp: float, x_dtype: np.dtype, y_dtype: np.dtype) -> np.ndarray:
    """256-entry table y[byte of x] = quantize(fn(dequantize(x))) (onnxruntime's QLinearLookupBase:
    MlasQuantizeLinear rounds x / scale before it adds the zero point; adding first can round a
    value a float ulp from a half step the other way)."""
    x = all_codes(x_dtype).astype(np.int32)
    f = ((x - np.int32(x_zp)).astype(F32) * F32(x_scale)).astype(F32)
    y = fn(f).astype(F32)
    return saturate(np.rint(y / F32(y_scale)) + F32(y_zp), np.dtype(y_dtype))


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x: 1 / inf = 0, as wanted
        return (F32(1) / (F32(1) + np.exp(-x.astype(F32)))).astype(F32)


def leaky_relu(alpha: float) -> Callable[[np.ndarray], np.ndarray]:
    a = F32(alpha)
    return lambda x: np.where(x >= 0, x, x * a).astype(F32)


def identity(x: np.ndarray) -> np.ndarray:
    return x


def apply_table(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[np.ascontiguousarray(x).view(np.uint8)]


# --- elementwise --------------------------------------------------------------------------------
def qlinear_add(a, a_s, a_z, b, b_s, b_z, c_s, c_z, dtype) -> np.ndarray:
    """C = saturate((A - za) * as/cs + (B - zb) * bs/cs + zc) (MLAS QLinearAdd)."""
    ra, rb = F32(a_s) / F32(c_s), F32(b_s) / F32(c_s)
    v = (a.astype(np.int32) - np.int32(a_z)).astype(F32) * ra + (b.astype(np.int32) - np.int32(b_z)).astype(F32) * rb
    return saturate(v + F32(c_z), dtype)


def qlinear_mul(a, a_s, a_z, b, b_s, b_z, c_s, c_z, dtype) -> np.ndarray:
    """C = saturate((A - za) * (B - zb) * as*bs/cs + zc) (MLAS QLinearMul)."""
    r = F32(a_s) * F32(b_s) / F32(c_s)
    prod = (a.astype(np.int32) - np.int32(a_z)) * (b.astype(np.int32) - np.int32(b_z))
    return saturate(prod.astype(F32) * r + F32(c_z), dtype)


# --- pooling ------------------------------------------------------------------------------------
def global_avg_scale(x_scale: float, y_scale: float, count: int) -> np.float32:
    """The factor from an int32 window sum (zero point removed) to output steps."""
    return F32(F32(x_scale) / (F32(y_scale) * F32(count)))


def qlinear_global_avg(x, x_s, x_z, y_s, y_z, channels_last: bool) -> np.ndarray:
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes]))
    acc = x.astype(np.int64).sum(axis=axes, keepdims=True) - int(x_z) * count
    # MlasRequantizeOutput: rounded, then the zero point added
    return saturate(np.rint(acc.astype(F32) * global_avg_scale(x_s, y_s, count)) + F32(y_z), x.dtype)


def pool_pads(in_sp: Sequence[int], out_sp: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              pads: Optional[Sequence[int]], auto_pad: str) -> list:
    """Begin pads per spatial axis (then end pads) after auto_pad."""
    n = len(in_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins = []
        for i in range(n):
            total = max(0, (out_sp[i] - 1) * strides[i] + kernel[i] - in_sp[i])
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begins + [0] * n
    if auto_pad == "VALID" or not pads:
        return [0] * (2 * n)
    return [int(p) for p in pads]


def qlinear_avg_pool(x, x_s, x_z, y_s, y_z, kernel, strides, begins, out_sp, count_include_pad: bool,
                     channels_last: bool) -> np.ndarray:
    """onnxruntime's QLinearAveragePool: float32 dequantized input, window sums clipped to the
    input (the count is the whole kernel with count_include_pad), y = saturate(avg / ys + zy)."""
    xf = (x.astype(np.int32) - np.int32(x_z)).astype(F32) * F32(x_s)
    if channels_last:
        xf = np.moveaxis(xf, -1, 1)
    in_sp = xf.shape[2:]
    out = np.zeros(xf.shape[:2] + tuple(out_sp), F32)
    full = int(np.prod(kernel))
    for pos in itertools.product(*[range(o) for o in out_sp]):
        sl = []
        cnt = 1
        for i, p in enumerate(pos):
            start = p * strides[i] - begins[i]
            end = min(start + kernel[i], in_sp[i])
            start = max(start, 0)
            sl.append(slice(start, end))
            cnt *= max(end - start, 0)
        s = xf[(slice(None), slice(None)) + tuple(sl)].reshape(xf.shape[0], xf.shape[1], -1).sum(axis=-1, dtype=F32)
        out[(slice(None), slice(None)) + pos] = s / F32(full if count_include_pad else max(cnt, 1))
    y = saturate(out / F32(y_s) + F32(y_z), x.dtype)
    return np.moveaxis(y, 1, -1) if channels_last else y


# --- softmax ------------------------------------------------------------------------------------
def softmax_table(x_scale: float, reduce_len: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax exp table (float32): entry j = exp((j - 255 + shift) * xs), the
    shift keeping a row's sum of reduce_len entries below FLT_MAX; j = x - max(row) + 255."""
    xs = float(F32(x_scale))
    shift = max(0.0, math.log(FLT_MAX / reduce_len) - 5.0) / xs
    return np.exp((np.arange(256, dtype=np.float64) - 255.0 + shift) * xs).astype(F32)


def softmax_rows(x2: np.ndarray, table: np.ndarray, y_scale: float, y_zp: int, dtype: np.dtype) -> np.ndarray:
    """Rows of x2 [N, D]: y = saturate(e * floor(1 / ys) / sum e + zy), e from the table; the sum
    in float32 in row order (as onnxruntime's loop)."""
    idx = (x2.astype(np.int32) - x2.astype(np.int32).max(axis=1, keepdims=True) + 255)
    e = table[idx]
    total = np.zeros(x2.shape[0], F32)
    for j in range(x2.shape[1]):
        total = (total + e[:, j]).astype(F32)
    ysf = F32(math.floor(1.0 / float(F32(y_scale))))
    v = (e * ysf).astype(F32) / total[:, None]
    return saturate(np.rint(v) + F32(y_zp), dtype)


def qlinear_softmax(x, x_s, y_s, y_z, axis: int, opset: int) -> np.ndarray:
    axis = axis % x.ndim
    if opset < 13:
        d = int(np.prod(x.shape[axis:]))
        x2 = x.reshape(-1, d)
        return softmax_rows(x2, softmax_table(x_s, d), y_s, y_z, x.dtype).reshape(x.shape)
    xt = np.moveaxis(x, axis, -1)
    d = xt.shape[-1]
    y = softmax_rows(xt.reshape(-1, d), softmax_table(x_s, d), y_s, y_z, x.dtype).reshape(xt.shape)
    return np.moveaxis(y, -1, axis)


# --- quantize / GEMM ----------------------------------------------------------------------------
def per_axis(p: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A scale/zero point broadcast against a rank-`rank` tensor (1-D ones along `axis`)."""
    p = np.asarray(p)
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    shape = [1] * rank
    shape[axis % rank] = p.size
    return p.reshape(shape)


def quantize(x, s, z, axis: int, dtype) -> np.ndarray:
    zz = 0 if z is None else per_axis(z, x.ndim, axis).astype(F32)
    return saturate(np.rint(x.astype(F32) / per_axis(s, x.ndim, axis)) + zz, dtype)


def dequantize(x, s, z, axis: int) -> np.ndarray:
    zz = 0 if z is None else per_axis(z, x.ndim, axis).astype(np.int32)
    return ((x.astype(np.int32) - zz).astype(F32) * per_axis(s, x.ndim, axis)).astype(np.asarray(s).dtype)


def int_matmul(a, a_z, b, b_z) -> np.ndarray:
    """Exact (A - za) @ (B - zb) in int64 (zb per column of B allowed)."""
    az = 0 if a_z is None else np.asarray(a_z).astype(np.int64)
    bz = 0 if b_z is None else np.asarray(b_z).astype(np.int64)
    if np.ndim(bz) == 1 and np.size(bz) > 1:
        bz = bz.reshape(1, -1)
    return np.matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz)


def dynamic_quantize(x: np.ndarray) -> tuple:
    """DynamicQuantizeLinear: uint8 data, float32 scale, uint8 zero point."""
    x = x.astype(F32)
    mx, mn = max(F32(0), F32(x.max()) if x.size else F32(0)), min(F32(0), F32(x.min()) if x.size else F32(0))
    s = F32((mx - mn) / F32(255)) if mx != mn else F32(1 / 255)
    z = np.uint8(np.clip(np.rint(F32(0) - mn / s), 0, 255))
    return saturate(np.rint(x / s) + F32(z), np.dtype(np.uint8)), s, z
