"""Dead taps of a convolution: taps that read only padding, dropped exactly before a conv path
is chosen (lower/conv.py).

Why: a dilated conv on a map no larger than its dilation reads the image with its centre tap
only (DeepLabV3's ASPP: 3x3 convs of rates 24 and 36 on a 20x20 map are 1x1 convs; im2col ran
all nine taps, eight of them over zeros). Along one axis, tap i of a conv reads input positions
[i*d - p, (o-1)*s + i*d - p]; the outermost taps that read some position of [0, n) bound a run [a, b] (a
rectangle of the kernel), and the taps outside it read only padding. Dropping the others is exact: the
pruned conv has kernel b-a+1, begin pad p - a*d and the same output size; a conv whose
remaining tap is the centre of a stride-1 conv with the map's size is a 1x1 (the pointwise
path, X read in place).

The pruned conv is lowered through TapsCtx, a view of the node's LowerCtx whose weight input is
the sliced constant (its packs keyed apart from the full weight's), so every path of CONV_PATHS
runs it unchanged.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional

import numpy as np

from .base import ConstBuf, LowerCtx, TensorInfo
from .common import ConvGeometry

log = logging.getLogger(__name__)


def live_taps(n: int, o: int, k: int, s: int, p: int, d: int) -> Optional[tuple]:
    """(first, last) tap along one axis (input n, output o, kernel k, stride s, begin pad p,
    dilation d) that reads some position of [0, n); None when none does. Taps between them
    that read none (a stride stepping over a small map) stay: dropping the outer ones is exact."""

    def reads(i: int) -> bool:
        y = max(0, -(-(p - i * d) // s))  # the first output whose read is at or past position 0
        return y < o and y * s + i * d - p < n

    live = [i for i in range(k) if reads(i)]
    return (live[0], live[-1]) if live else None


def pruned_geometry(g: ConvGeometry) -> Optional[tuple]:
    """(pruned geometry, (ky0, ky1, kx0, kx1)) when some rows or columns of taps read only
    padding, else None (nothing to drop, no tap live, or a begin pad the drop would make
    negative)."""
    rows = live_taps(g.h, g.oh, g.kh, g.sh, g.ph, g.dh)
    cols = live_taps(g.w, g.ow, g.kw, g.sw, g.pw, g.dw)
    if rows is None or cols is None or (rows, cols) == ((0, g.kh - 1), (0, g.kw - 1)):
        return None
    ph, pw = g.ph - rows[0] * g.dh, g.pw - cols[0] * g.dw
    kh, kw = rows[1] - rows[0] + 1, cols[1] - cols[0] + 1
    pruned = dataclasses.replace(g, kh=kh, kw=kw, ph=ph, pw=pw, dh=g.dh if kh > 1 else 1, dw=g.dw if kw > 1 else 1)
    if not (_onnx_axis(g.h, pruned.oh, kh, g.sh, ph, pruned.dh) and _onnx_axis(g.w, pruned.ow, kw, g.sw, pw, pruned.dw)):
        return None
    return pruned, rows + cols


def _onnx_axis(n: int, o: int, k: int, s: int, p: int, d: int) -> bool:
    """Whether begin pad p >= 0 and some end pad >= 0 give o outputs by ONNX's formula: the
    pruned conv is an ordinary Conv (the conv family's one-node benchmark builds it so)."""
    end = max(0, (o - 1) * s + (k - 1) * d + 1 - n - p)
    return p >= 0 and (n + p + end - ((k - 1) * d + 1)) // s + 1 == o


class TapsCtx:
    """A LowerCtx whose input 1 (the constant weights) is sliced to the live taps; every other
    attribute, read or written, is the node's own context (offers, layouts, scratch, in-place)."""

    def __init__(self, ctx: LowerCtx, taps: tuple) -> None:
        ky0, ky1, kx0, kx1 = taps
        w = np.asarray(ctx.const(1))
        # a 1-D conv's weights [M, C, K] are its geometry's one row of taps (kh = 1)
        cut = (slice(ky0, ky1 + 1), slice(kx0, kx1 + 1))[4 - w.ndim:]
        sliced = np.ascontiguousarray(w[(slice(None), slice(None)) + cut])
        inputs = list(ctx.inputs)
        inputs[1] = TensorInfo(inputs[1].name, inputs[1].dtype, sliced.shape)
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "_tag", f"taps{ky0},{ky1},{kx0},{kx1}")
        object.__setattr__(self, "_slice", cut)
        object.__setattr__(self, "_w", sliced)
        object.__setattr__(self, "inputs", inputs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._ctx, name, value)

    def _cut(self, w: np.ndarray) -> np.ndarray:
        return np.asarray(w)[(slice(None), slice(None)) + self._slice]

    def const(self, i: int) -> Optional[np.ndarray]:
        return self._w if i == 1 else self._ctx.const(i)

    def buf(self, i: int) -> Any:
        """Input 1 as the sliced constant (uploaded once per plan), others the node's buffers."""
        return self.derived(1, "w", lambda w: w) if i == 1 else self._ctx.buf(i)

    def derived(self, i: int, tag: str, fn: Callable[[np.ndarray], np.ndarray]) -> ConstBuf:
        if i != 1:
            return self._ctx.derived(i, tag, fn)
        return self._ctx.derived(1, f"{self._tag}#{tag}", lambda w: fn(np.ascontiguousarray(self._cut(w))))


def drop_dead_taps(ctx: LowerCtx, case: Any) -> tuple:
    """(ctx, case) for a conv (a lower/conv.py ConvCase) without the taps that read only
    padding, unchanged when every tap touches the image or the weights are not constant."""
    g = case.geom
    pruned = pruned_geometry(g) if case.const_weights and isinstance(g, ConvGeometry) else None
    if pruned is None:
        return ctx, case
    log.debug("%s: taps %s of %dx%d touch the image", ctx.label(), pruned[1], g.kh, g.kw)
    return TapsCtx(ctx, pruned[1]), dataclasses.replace(case, geom=pruned[0])


__all__ = ["live_taps", "pruned_geometry", "TapsCtx", "drop_dead_taps"]
