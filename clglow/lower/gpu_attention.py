"""clglow.FusedAttention as one work-group per block of query rows (kernels_cl/gpu_attention.cl):
the GPU family's kernel where the block's scores fit local memory.

Why: attention.cl gives one work-item a whole query row (its scores in a global scratch row, K
and V walked serially): on a GPU a decode step's few rows are then a handful of busy work-items.
Here a work-group owns RQ rows of one (batch, head): the scores of all its keys, the softmax's
reductions and the context's columns are spread over its WG work-items, the scores kept in local
memory (no scratch), K's and V's rows read by neighbouring work-items at neighbouring addresses.

Applies (`block_applicable`) under the GPU family with dedicated local memory when one row's
scores (SKV_MAX floats, SKV rounded up to a power of two so growing key lengths share programs)
and Q row fit the device's local memory. The point (WG, RQ) comes from the tunable family
"gpu_attention" (lower/tunable.py): the tuning database's entry for the shape, else the default
of `_default` (the query rows in one block where local memory allows, 128 work-items).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..target import Target
from .base import Buf, Launch, LowerCtx, f32, i32
from .tunable import Family, Params, ShapeKey, choose, register

_ROWS = (1, 2, 4, 8, 16)  # rows per work-group: the kernel's RQ (at most 16)
_GROUPS = (128, 64, 256, 32)  # work-items per group, the default first


def _pow2(n: int, least: int) -> int:
    p = least
    while p < n:
        p *= 2
    return p


@dataclass(frozen=True)
class BlockShape:
    """One FusedAttention at its shapes: batch, heads, query rows, keys, head sizes, mask or not."""

    b: int
    h: int
    sq: int
    skv: int
    hd: int
    hdv: int
    mask: bool = False

    @property
    def skv_max(self) -> int:
        return _pow2(self.skv, 32)

    @property
    def hd_max(self) -> int:
        return _pow2(self.hd, 16)

    def local_bytes(self, wg: int, rq: int) -> int:
        return 4 * (rq * (self.hd_max + self.skv_max) + wg + 2 * rq)

    def why_not(self, target: Target, wg: int, rq: int) -> Optional[str]:
        """None when `target` runs the point (wg, rq) on this shape, else why not."""
        if wg > target.max_work_group_size or wg > tuple(target.max_work_item_sizes)[0]:
            return f"{wg} work-items exceed the device's work-group limits"
        if rq > wg or rq not in _ROWS:
            return f"{rq} rows per group of {wg}"
        if self.local_bytes(wg, rq) > target.local_mem_size:
            return f"{self.local_bytes(wg, rq)} bytes of local memory exceed the device's {target.local_mem_size}"
        return None


def space(target: Target, s: BlockShape) -> List[Tuple[int, int]]:
    """The (WG, RQ) points the device runs on `s`: rows per group up to the query rows' power of two."""
    rows = [r for r in _ROWS if r <= _pow2(s.sq, 1)]
    return [(wg, rq) for wg in _GROUPS for rq in reversed(rows) if s.why_not(target, wg, rq) is None]


def block_applicable(target: Target, s: BlockShape) -> Optional[str]:
    """None when the fused attention runs as gpu_attention.cl on `target` (see the module docstring)."""
    if target.is_cpu_family:
        return "the CPU family (attention.cl's rows)"
    if not target.has_local_memory:
        return f"no dedicated local memory (type {target.local_mem_type!r})"
    if s.skv < 1 or s.hd < 1:
        return "no keys or an empty head"
    return None if space(target, s) else "one row's scores exceed the device's local memory"


def block_launch(s: BlockShape, wg: int, rq: int, q, k, v, mask, y, strides: Sequence[int], scale: float,
                 label: str = "", halves: Sequence[bool] = (False,) * 4) -> Launch:
    """The gpu_attention.cl launch (q, k, v, mask (or None), y: the kernel's arguments; `strides`:
    attention.cl's 16 strides; `halves`: Q, K, V, Y stored as half, gpu_attention.cl QH .. YH)."""
    defines = {"WG": wg, "RQ": rq, "SKV_MAX": s.skv_max, "HD_MAX": s.hd_max}
    defines.update({name: 1 for name, h in zip(("QH", "KH", "VH", "YH"), halves) if h})
    head = [q, k, v] + ([mask] if mask is not None else []) + [y, i32(s.h)]
    if mask is not None:
        defines["MASK_FLOAT"] = None
    tail = [i32(s.skv), i32(s.hd), i32(s.hdv)] + [i32(x) for x in strides] + [f32(scale)]
    gsize = (wg * -(-s.sq // rq), s.b * s.h)
    return Launch("gpu_attention", "attn_block", gsize, head + [i32(s.sq)] + tail, (wg, 1), defines, label,
                  noop_args=head + [i32(0)] + tail)  # SQ = 0: no row, nothing read


def lower_block(ctx: LowerCtx, s: BlockShape, args: list, qst: Sequence[int], yst: Sequence[int],
                mst: Sequence[int], scale: float) -> list:
    """FusedAttention's launch (lower/attention.py): `args` = [q, k, v] (+ the mask when s.mask);
    qst, yst: Q's and Y's (b, h, s) strides, mst the mask's four; K and V contiguous."""
    wg, rq = tuned_point(ctx.device, s, ctx.label())
    st = list(qst[:3]) + _contiguous(s)[3:9] + list(yst[:3]) + list(mst[:4])
    halves = [np.dtype(t.dtype) == np.float16 for t in (ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0])]
    return [block_launch(s, wg, rq, args[0], args[1], args[2], args[3] if s.mask else None, ctx.out(0), st,
                         scale, ctx.label(), halves)]


# --- the tunable family: (WG, RQ) per attention shape -------------------------------------------------------
# Shape key: the BlockShape's fields. Parameters: {"wg": WG, "rq": RQ}.
def _space(target: Target, key: ShapeKey) -> List[Params]:
    first = _default(target, key)
    rest = [{"wg": wg, "rq": rq} for wg, rq in space(target, BlockShape(*key))]
    return [first] + [p for p in rest if p != first]


def _default(target: Target, key: ShapeKey) -> Params:
    """128 work-items (or the device's nearest), the query rows in as few blocks as local memory allows."""
    pts = space(target, BlockShape(*key)) or [(32, 1)]
    return {"wg": pts[0][0], "rq": pts[0][1]}


def _contiguous(s: BlockShape) -> list:
    """attention.cl's strides of contiguous [B, H, S, D] Q, K, V, Y and a [B, H, SQ, SKV] mask."""
    def bhs(rows: int, d: int) -> list:
        return [s.h * rows * d, rows * d, d]

    return bhs(s.sq, s.hd) + bhs(s.skv, s.hd) + bhs(s.skv, s.hdv) + bhs(s.sq, s.hdv) + \
        [s.h * s.sq * s.skv, s.sq * s.skv, s.skv, 1]


def _bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    s = BlockShape(*key)
    wg, rq = int(p["wg"]), int(p["rq"])
    why = s.why_not(target, wg, rq)
    if why:
        raise ValueError(why)
    launch = block_launch(s, wg, rq, Buf("Q"), Buf("K"), Buf("V"), Buf("M") if s.mask else None, Buf("Y"),
                          _contiguous(s), 0.125)
    n = s.b * s.h
    sizes = {"Q": 4 * n * s.sq * s.hd, "K": 4 * n * s.skv * s.hd, "V": 4 * n * s.skv * s.hdv,
             "Y": 4 * n * s.sq * s.hdv}
    if s.mask:
        sizes["M"] = 4 * n * s.sq * s.skv
    return launch, sizes


def _flops(key: ShapeKey) -> float:
    s = BlockShape(*key)
    return 2.0 * s.b * s.h * s.sq * s.skv * (s.hd + s.hdv)


def _applies(target: Target) -> bool:
    return not target.is_cpu_family and target.has_local_memory


GPU_ATTENTION_FAMILY = register(Family("gpu_attention", "gpu_attention", _space, _default, _bench, flops=_flops,
                                       applies=_applies, priority=4))


def tuned_point(target: Target, s: BlockShape, label: str = "") -> Tuple[int, int]:
    """(WG, RQ) for this shape: the tuning database's when the device runs it, else the default."""
    def ok(p: Params) -> bool:
        try:
            return s.why_not(target, int(p["wg"]), int(p["rq"])) is None
        except (KeyError, TypeError, ValueError):
            return False

    p, _ = choose(target, "gpu_attention", (s.b, s.h, s.sq, s.skv, s.hd, s.hdv, s.mask), label, valid=ok)
    return int(p["wg"]), int(p["rq"])


__all__ = ["BlockShape", "block_applicable", "block_launch", "lower_block", "space", "tuned_point",
           "GPU_ATTENTION_FAMILY"]
