"""Softmax/LogSoftmax for the GPU family (kernels_cl/gpu_softmax.cl): the row beside softmax.cl's.

Why a module of its own: softmax.cl gives each row to one work-item (16-float vectors on a CPU
driver); a GPU runs a group's items side by side, so there a row is split over a work-group and
its max and sum are combined in local memory (gpu_reduce.py's two mappings: `rows` for the
last axis, `cols` for an inner one). The work-group size is the tunable family "wg_softmax"
(gpu_reduce.LOCAL_SIZES within the device's limits, the first that fits by default).
"""
from __future__ import annotations

from typing import List

from ..target import Target
from .base import Buf, Launch, i32
from .gpu_reduce import Layout, applicable, choose_ls, group_shape, linear_layout, local_sizes
from .tunable import Family, Params, ShapeKey, register


def softmax_launch(target: Target, x, y, rows: int, length: int, inner: int, log_softmax: bool, ls: int,
                   label: str = "", x_half: bool = False, y_half: bool = False) -> Launch:
    """The launch of softmax over `rows` rows of `length` elements `inner` apart (row r of outer
    index o = r // inner starts at o * length * inner + r % inner); x_half / y_half: x / y stored
    as half (gpu_softmax.cl XH / YH)."""
    lay = _layout(rows, length, inner)
    gsize, lsize, lr = group_shape(target, lay, ls)
    defines: dict = {"LS": ls, **{name: 1 for name, h in (("XH", x_half), ("YH", y_half)) if h}}
    if log_softmax:
        defines["LOG_SOFTMAX"] = None
    if lay.kind == "rows":
        return Launch("gpu_softmax", "softmax_rows", gsize, [x, y, i32(rows), i32(length), i32(lr)], lsize, defines,
                      label)
    return Launch("gpu_softmax", "softmax_cols", gsize, [x, y, i32(length), i32(inner)], lsize, defines, label)


def _layout(rows: int, length: int, inner: int) -> Layout:
    if inner == 1:
        return linear_layout("rows", rows, length, 1)
    return linear_layout("cols", rows // inner, length, inner)


def lower_softmax_wg(target: Target, x, y, rows: int, length: int, inner: int, log_softmax: bool,
                     label: str = "", x_half: bool = False, y_half: bool = False) -> List[Launch]:
    """softmax.py's GPU-family row: the work-group size from the tuning database or the default
    (x_half, y_half: half storage, as softmax_launch)."""
    ls = choose_ls(target, _layout(rows, length, inner), 4, label, family="wg_softmax")
    return [softmax_launch(target, x, y, rows, length, inner, log_softmax, ls, label, x_half, y_half)]


def _space(target: Target, key: ShapeKey = ()) -> List[Params]:
    return [{"ls": s} for s in local_sizes(target, 4)]


def _default(target: Target, key: ShapeKey) -> Params:
    fits = local_sizes(target, 4)
    return {"ls": fits[0] if fits else 1}


def _bench(target: Target, key: ShapeKey, p: Params):
    """Softmax over shape `key` (gpu_reduce.shape_key: kind, outer, length, inner) on p["ls"] items."""
    n_hi, length, inner = int(key[1]), int(key[2]), int(key[3])  # key[0], the mapping, follows from inner
    ls = int(p["ls"])
    if ls not in local_sizes(target, 4):
        raise ValueError(f"work-group size {ls} does not fit the device")
    rows = n_hi * inner
    launch = softmax_launch(target, Buf("x"), Buf("y"), rows, length, inner, False, ls)
    return launch, {"x": 4 * rows * length, "y": 4 * rows * length}


WG_SOFTMAX_FAMILY = register(Family("wg_softmax", "gpu_softmax", _space, _default, _bench,
                                    flops=lambda key: 3.0 * float(key[1]) * float(key[2]) * float(key[3]),
                                    applies=lambda target: applicable(target) is None, priority=20,
                                    tolerance=1e-4))

__all__ = ["lower_softmax_wg", "softmax_launch", "WG_SOFTMAX_FAMILY"]
