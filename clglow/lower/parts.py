"""Concat and Split of a few small parts as one launch (kernels_cl/parts.cl).

movement.py copies each part with a launch of its own, the right shape for large tensors (each
copy vectorised along its rows). A decode step's past-key/value Concats ([1, H, T, D] + [1, H,
1, D]) and its QKV Split move a few KiB per part, where the launches cost more than the bytes:
one launch moves every part. Up to four parts, each present, at most PARTS_MAX elements in all.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .base import Launch, LowerCtx, i32
from .common import grid, storage_type

PARTS_MAX = 1 << 18  # elements: above, the per-part row copies (vector loads along rows) win


def _widths(shapes: Sequence[tuple], axis: int) -> Optional[tuple]:
    """(outer, [w_p]) of parts concatenated along `axis`, None when they do not qualify."""
    if not 2 <= len(shapes) <= 4:
        return None
    outer = int(np.prod(shapes[0][:axis], dtype=np.int64))
    widths = [int(np.prod(s[axis:], dtype=np.int64)) for s in shapes]
    if outer * sum(widths) > PARTS_MAX or outer == 0 or sum(widths) == 0:
        return None
    return outer, widths


def parts_launch(ctx: LowerCtx, kernel: str, whole, parts: list, shapes: Sequence[tuple], axis: int,
                 dtype: np.dtype) -> Optional[Launch]:
    """concat_parts (parts -> whole) or split_parts (whole -> parts) along `axis`, else None."""
    w = _widths(shapes, axis)
    if w is None or any(p is None for p in parts):
        return None
    outer, widths = w
    pad = 4 - len(parts)
    bufs = list(parts) + [whole] * pad  # absent parts: width 0, never touched
    widths = widths + [0] * pad
    defines = {"T": storage_type(dtype)}
    if all(x % 16 == 0 for x in widths):
        defines["VT"] = storage_type(dtype) + "16"
    args = ([*bufs, whole] if kernel == "concat_parts" else [whole, *bufs]) + [i32(x) for x in widths] + [i32(outer)]
    gsize, ls = grid(ctx.device, (-(-sum(widths) // 16), outer), (16, 1))
    return Launch("parts", kernel, gsize, args, ls, defines, ctx.label())
