"""The mixed-radix Stockham FFT that lower/spectral.py runs for DFT and STFT lengths made of
small primes (kernels_cl/fft.cl): a load launch (the ONNX layout into complex rows, zero
padding, STFT framing and windowing, an irfft's Hermitian extension), one launch per radix
(8, 4, 2, 3, 5, 7, 11, 13: n log n work instead of the direct sum's n^2), a store launch (the
bins kept, the 1/n of an inverse). The twiddle table e^{-2 pi i q / n} is computed once per
length in float64 (quarter turns exact) and read by every pass. This module imports no other
lowering module but base and common.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .base import Launch, LowerCtx, Scratch, i32
from .common import type_defines, work_size

RADICES = (8, 4, 2, 3, 5, 7, 11, 13)  # each a -DR build of fft.cl's fft_pass
DIRECT_BELOW = 64  # shorter transforms: the direct sum, one launch, fewer bytes moved


def radices(n: int) -> Optional[list]:
    """n as a product of RADICES (largest powers of two first), None when a larger prime divides it."""
    out = []
    for r in RADICES:
        while n % r == 0 and n > 1:
            out.append(r)
            n //= r
    return out if n == 1 else None


def use_fft(n: int) -> bool:
    """Whether a length-n transform runs as the Stockham FFT (else the direct sum)."""
    return n >= DIRECT_BELOW and radices(n) is not None


def twiddles(n: int, dtype: np.dtype) -> np.ndarray:
    """[n, 2] = cos, -sin of 2 pi q / n, with the quarter and half turns exact."""
    q = np.arange(n)
    ang = 2 * np.pi * q / n
    c, s = np.cos(ang), -np.sin(ang)
    quarter = (4 * q) % n == 0
    k = (4 * q[quarter]) // n
    c[quarter] = np.array([1.0, 0.0, -1.0, 0.0])[k]
    s[quarter] = np.array([0.0, -1.0, 0.0, 1.0])[k]
    return np.stack([c, s], -1).astype(dtype)


def fft_launches(ctx: LowerCtx, load: Callable[[Scratch], Launch], store: Callable[[Scratch], Launch], rows: int,
                 n: int, dtype: np.dtype, inverse: bool) -> list:
    """load -> one pass per radix -> store over `rows` complex rows of length n: `load(buf)`
    writes the rows into buf, `store(buf)` reads the transformed rows from buf."""
    item = np.dtype(dtype).itemsize
    bufs = [ctx.scratch(rows * n * 2 * item), ctx.scratch(rows * n * 2 * item)]
    table = ctx.const_buffer(twiddles(n, dtype), key=f"fft-twiddles:{np.dtype(dtype).str}:{n}")
    defines = type_defines(T=dtype)
    if inverse:
        defines["INVERSE"] = None
    launches = [load(bufs[0])]
    cur, ns = 0, 1
    for r in radices(n) or []:
        items = rows * (n // r)
        g, l = work_size(ctx, items)
        launches.append(Launch("fft", "fft_pass", g, [bufs[cur], bufs[1 - cur], table, i32(n), i32(ns), i32(items)],
                               l, dict(defines, R=r), ctx.label()))
        cur, ns = 1 - cur, ns * r
    launches.append(store(bufs[cur]))
    return launches
