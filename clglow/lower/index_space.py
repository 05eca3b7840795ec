"""Index spaces of the broadcasting and strided kernels (kernels_cl/bcast_index.h): collapsing
dims, the per-operand stride tables, and the row layout with host-computed row offsets.

Shared by elementwise.py, fused.py and movement.py (and the strides by every module that walks
a contiguous tensor), so it lives apart from all of them.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..target import Target
from .base import ConstBuf, LowerCtx
from .common import INT32_MAX, grid


def contiguous_strides(shape: Sequence[int]) -> list:
    """Element strides of a C-contiguous tensor of `shape`."""
    st, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        st[d] = acc
        acc *= int(shape[d])
    return st


def broadcast_strides(shape: tuple, full: tuple) -> Optional[list]:
    """Element strides of a contiguous tensor of `shape` read as `full` (numpy broadcasting:
    0 along the axes it repeats), None when it does not broadcast."""
    if len(shape) > len(full):
        return None
    padded = (1,) * (len(full) - len(shape)) + tuple(shape)
    if any(d not in (1, f) for d, f in zip(padded, full)):
        return None
    st = contiguous_strides(padded)
    return [0 if d == 1 and f != 1 else s for d, s, f in zip(padded, st, full)]


def collapse(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]]) -> tuple:
    """Merge adjacent dims that every input broadcasts the same way.

    Returns (dims, [strides per input]) with at least one dim; stride 0 marks a broadcast dim.
    """
    r = len(out_shape)
    padded = [(1,) * (r - len(s)) + tuple(s) for s in in_shapes]
    dims: list = []
    full: list = []  # per kept dim, tuple of flags "input k is full (not broadcast) here"
    for d in range(r):
        od = int(out_shape[d])
        if od == 1:
            continue
        flags = tuple(p[d] != 1 for p in padded)
        if dims and full[-1] == flags:
            dims[-1] *= od
        else:
            dims.append(od)
            full.append(flags)
    if not dims:
        dims, full = [1], [tuple(True for _ in in_shapes)]
    strides = []
    for k in range(len(in_shapes)):
        st, acc = [0] * len(dims), 1
        for d in range(len(dims) - 1, -1, -1):
            if full[d][k]:
                st[d] = acc
                acc *= dims[d]
        strides.append(st)
    return dims, strides


def collapse_copy(dims: Sequence[int], ss: Sequence[int], ds: Sequence[int]) -> tuple:
    """A copy's iteration space without unit dims, neighbours that are contiguous on both the
    source (strides `ss`) and the destination (`ds`) merged: (dims, src strides, dst strides)."""
    out_d: list = []
    out_s: list = []
    out_t: list = []
    for d, s, t in zip(dims, ss, ds):
        d = int(d)
        if d == 1:
            continue
        if out_d and out_s[-1] == s * d and out_t[-1] == t * d:
            out_d[-1] *= d
            out_s[-1], out_t[-1] = s, t
        else:
            out_d.append(d)
            out_s.append(int(s))
            out_t.append(int(t))
    if not out_d:
        return [1], [0], [0]
    return out_d, out_s, out_t


def meta_table(ctx: LowerCtx, dims: Sequence[int], strides: Sequence[Sequence[int]]) -> ConstBuf:
    """bcast_index.h's meta: the dims, then each operand's strides, as an int32 constant."""
    return ctx.const_buffer(np.array(list(dims) + [s for st in strides for s in st], dtype=np.int32))


ROW_GROUP = (1, 32)  # the row layout's work-group: 32 rows
# ... and for rows a multiple of 512 elements: 16 runs along 2 rows. 32 rows 2 or 4 KB apart
# alias in the L1 sets: pocl, AVX-512, [256, 1024] + [1024]: 62 us in 1 x 32 groups, 22 us in
# 16 x 2 ([64, 4096]: 106 vs 28 us; [160, 784]: 12 vs 15 us, so only for these rows).
ROW_GROUP_LONG = (16, 2)
ROW_VEC = 16  # elements of a row per work-item (bcast_index.h ROW_VEC)
_ROW_TABLE_MAX = 1 << 16  # more rows than this: the per-element division layout instead


def row_layout(target: Target, dims: Sequence[int], strides: Sequence[Sequence[int]],
               base: Optional[Sequence[int]] = None) -> Optional[tuple]:
    """The row layout of kernels_cl/bcast_index.h for a collapsed index space, or None when it
    does not fit (a short last dim, too many rows, offsets beyond int32).

    Returns (gsize, lsize, inner, rows, rowoff [rows * nops] int32, last [nops] int32, defines): every
    row's start offset per operand (plus `base`), computed here once so that the kernels do no
    division per element. Each work-item takes ROW_VEC consecutive elements of a row
    (bcast_index.h ROW_LOOP), in work-groups of ROW_GROUP (32 rows: a CPU driver pays per
    group) fitted to the Target. `defines` gives the kernel the strides along the row that are 0
    or 1 at compile time (ROW_S<k>, ROW_STEP): such runs are vector loads and stores (measured
    on pocl, AVX-512: X[160, 784] * s[160] 82-120 us with one element per work-item, 10-16 us
    this way)."""
    dims = [int(d) for d in dims]
    inner = dims[-1]
    rows = int(np.prod(dims[:-1], dtype=np.int64))
    if len(dims) < 2 or inner < 16 or rows > _ROW_TABLE_MAX:
        return None
    idx = np.indices(dims[:-1], dtype=np.int64).reshape(len(dims) - 1, -1)
    base = base if base is not None else [0] * len(strides)
    rowoff = np.stack([np.tensordot(np.asarray(st[:-1], np.int64), idx, axes=1) + int(b)
                       for st, b in zip(strides, base)], axis=1)
    if rowoff.min() < -INT32_MAX or rowoff.max() > INT32_MAX:
        return None
    gsize, group = grid(target, (-(-inner // ROW_VEC), rows), ROW_GROUP_LONG if inner % 512 == 0 else ROW_GROUP)
    last = [int(st[-1]) for st in strides]
    defines = {f"ROW_S{k}": v for k, v in enumerate(last) if v in (0, 1)}
    return (gsize, group, inner, rows, rowoff.astype(np.int32).reshape(-1), np.array(last, np.int32), defines)


__all__ = ["contiguous_strides", "collapse", "collapse_copy", "meta_table", "ROW_GROUP", "ROW_GROUP_LONG",
           "ROW_VEC", "row_layout"]
