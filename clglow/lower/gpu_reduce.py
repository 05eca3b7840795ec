"""Work-group reductions for the GPU family (kernels_cl/gpu_reduce.cl): the rows beside reduce.cl's.

Why a module of its own: reduce.cl gives each output one work-item that walks its whole reduced
set, the fast layout where a driver runs a group's items one after another (the CPU family); a
GPU runs them side by side, so there the work of one output is split over work-items and combined
in local memory. reduce.py (Reduce*, ArgMax/ArgMin), gpu_pool.py (global pooling) ask this module
through `plan` and the launch builders; softmax has its own (gpu_softmax.py).

Which mapping (`plan`): the input dimension with stride 1 decides. When it is reduced, `rows`: a
segment of neighbouring work-items per output reads the run side by side, several outputs per
group when runs are short. When it is kept, `cols`: neighbouring work-items take neighbouring
outputs (coalesced columns) and the group's second dimension splits the reduced set.

Where (`applicable`): the GPU family on a device with dedicated local memory (real GPUs,
Oclgrind), like xgemm.cl; elsewhere, pocl under CLGLOW_TARGET=gpu included, the per-output rows.
The work-group size (`LS`, the local arrays' size) is a tunable family ("wg_reduce"): its
declared space is LOCAL_SIZES within the device's work-group and local-memory limits, the
default the first that fits; runtime.search measures it where a model's shapes ask for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..target import Target
from .base import Buf, Launch, i32
from .tunable import Family, Params, ShapeKey, choose, register

# The declared search space of the work-group size, the default first: 256 items fill a compute
# unit's scheduler on most GPUs with a few groups each; 128/64 for devices with small groups or
# many short rows, 512/1024 for long rows on few outputs.
LOCAL_SIZES = (256, 128, 512, 64, 1024, 32)


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    p = 1
    while p < n:
        p *= 2
    return p


def local_sizes(target: Target, item_bytes: int = 8) -> List[int]:
    """The work-group sizes of LOCAL_SIZES that `target` can run with `item_bytes` of local memory
    per item (the default first)."""
    limit = min(int(target.max_work_group_size), int(target.max_work_item_sizes[0]))
    return [s for s in LOCAL_SIZES if s <= limit and s * item_bytes <= target.local_mem_size]


def applicable(target: Target) -> Optional[str]:
    """None when the work-group reductions apply on `target`, else why not: the GPU family (whose
    devices run a group's items side by side), dedicated local memory for the trees (as xgemm.cl
    needs: on pocl, whose local memory is emulated in global memory and whose groups run item
    after item, these kernels took 10-46x the time of the per-output ones), and a work-group
    size within its limits."""
    if target.is_cpu_family:
        return "the CPU family (one work-item per output, reduce.cl)"
    if not target.has_local_memory:
        return f"no dedicated local memory (type {target.local_mem_type!r}): one work-item per output"
    if not local_sizes(target):
        return "no work-group size of LOCAL_SIZES fits the device's limits"
    return None


@dataclass(frozen=True)
class Layout:
    """How a reduction reads its input: `kind` "rows" (the reduced run contiguous) or "cols" (the
    innermost kept dimension contiguous, `inner` outputs wide); `n_hi` outputs (rows) or outer kept
    positions (cols); `linear` when the input is [n_hi, n_red, inner] row-major (no index table),
    else `meta`, the kept (cols: outer kept) and reduced dims and strides, RK and RR long."""

    kind: str
    n_hi: int
    n_red: int
    inner: int
    linear: bool
    meta: np.ndarray
    rk: int
    rr: int


def _prod(v: Sequence[int]) -> int:
    return int(np.prod(list(v), dtype=np.int64))


def plan(kd: Sequence[int], ks: Sequence[int], rd: Sequence[int], rs: Sequence[int]) -> Layout:
    """The Layout of a reduction from its merged kept dims/strides (kd, ks) and reduced ones (rd, rs),
    as reduce.reduce_meta merges them (unit dims dropped, [1], [0] when none)."""
    kd, ks, rd, rs = list(kd), list(ks), list(rd), list(rs)
    n_red = _prod(rd)
    if ks[-1] == 1 and kd[-1] > 1 and rs[-1] != 1:
        inner = kd[-1]
        od, os_ = (kd[:-1], ks[:-1]) if len(kd) > 1 else ([1], [0])
        linear = len(rd) == 1 and rs[0] == inner and (od == [1] or (len(od) == 1 and os_[0] == rd[0] * inner))
        return Layout("cols", _prod(od), n_red, inner, linear,
                      np.array(od + os_ + rd + rs, np.int32), len(od), len(rd))
    linear = len(rd) == 1 and rs[0] in (0, 1) and (kd == [1] or (len(kd) == 1 and ks[0] == n_red))
    return Layout("rows", _prod(kd), n_red, 1, linear, np.array(kd + ks + rd + rs, np.int32), len(kd), len(rd))


def group_shape(target: Target, lay: Layout, ls: int) -> Tuple[tuple, tuple, int]:
    """(gsize, lsize, lr) of `lay` on work-groups of `ls` items (lr: the rows segment width)."""
    if lay.kind == "rows":
        lr = min(ls, pow2_at_least(lay.n_red))
        groups = -(-max(lay.n_hi, 1) // (ls // lr))
        return (groups * ls,), (ls,), lr
    sizes = tuple(target.max_work_item_sizes) + (1, 1)
    lx = min(ls, pow2_at_least(lay.inner), 64, _pow2_at_most(sizes[0]))
    ly = min(ls // lx, pow2_at_least(lay.n_red), _pow2_at_most(sizes[1]))
    return (max(lay.n_hi, 1) * -(-lay.inner // lx) * lx, ly, 1), (lx, ly, 1), 0


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def choose_ls(target: Target, lay: Layout, item_bytes: int, label: str = "", family: str = "wg_reduce") -> int:
    """The work-group size for `lay`: the tuning database's for this shape when the device can run
    it with `item_bytes` of local memory per item, else the first of its LOCAL_SIZES."""
    fits = local_sizes(target, item_bytes)

    def ok(p: Params) -> bool:
        return p.get("ls") in fits

    p, _ = choose(target, family, shape_key(lay), label, valid=ok)
    return int(p["ls"]) if ok(p) else fits[0]


def shape_key(lay: Layout) -> ShapeKey:
    """The tuning key of a layout: (kind, outputs or outer positions, reduced size, inner)."""
    return (lay.kind, lay.n_hi, lay.n_red, lay.inner)


def storage_defines(defines: dict) -> dict:
    """`defines` with half storage as gpu_reduce.cl reads and writes it: T = half becomes T = float
    with XH (x stored as half), TO = half TO = float with YH (kernels_cl/storage.h: exact
    conversions, float arithmetic; no cl_khr_fp16 needed)."""
    d = dict(defines)
    for t, flag in (("T", "XH"), ("TO", "YH")):
        if d.get(t) == "half":
            d[t], d[flag] = "float", 1
    return d


def reduce_defines(lay: Layout, ls: int) -> dict:
    """The layout's and work-group size's -D defines (with the caller's types and op)."""
    d: dict = {"LS": ls}
    if lay.linear:
        d["LINEAR"] = None
    else:
        d.update({"RK": lay.rk, "RR": lay.rr})
    return d


def reduce_launch(target: Target, lay: Layout, x, y, defines: dict, ls: int, meta_arg, label: str = "",
                  n_div: Optional[int] = None) -> Launch:
    """The wg_reduce(_cols) launch of `lay`: x, y and meta_arg are the launch's arguments (meta_arg:
    any buffer when the layout is linear), `defines` the types and op (reduce.py's); n_div: what a
    mean divides by (default the reduced size)."""
    gsize, lsize, lr = group_shape(target, lay, ls)
    d = dict(storage_defines(defines), **reduce_defines(lay, ls))
    if lay.kind == "rows":
        args = [x, y, i32(lay.n_hi), i32(lay.n_red), i32(lr), meta_arg, i32(lay.n_red if n_div is None else n_div)]
        return Launch("gpu_reduce", "wg_reduce", gsize, args, lsize, d, label)
    return Launch("gpu_reduce", "wg_reduce_cols", gsize, [x, y, i32(lay.inner), i32(lay.n_red), meta_arg], lsize,
                  d, label)


def split_parts(target: Target, lay: Layout, ls: int, op: str) -> int:
    """How many chunks each run of a `rows` reduction is split into (1: none): when its groups are
    too few to give each compute unit several (a whole-tensor sum is one group) and runs are long
    enough to give each chunk several elements per work-item. LogSumExp (two passes) is not split."""
    if lay.kind != "rows" or op == "LOGSUMEXP":
        return 1
    _g, _l, lr = group_shape(target, lay, ls)
    groups = -(-max(lay.n_hi, 1) // (ls // lr))
    want = 4 * max(1, int(target.compute_units))
    if groups >= want or lay.n_red < 4 * ls:
        return 1
    return max(1, min(-(-lay.n_red // (4 * ls)), -(-want // max(lay.n_hi, 1)), ls))


def split_launches(target: Target, lay: Layout, x, y, defines: dict, ls: int, meta_arg, parts: int, scratch,
                   acc: str, label: str = "") -> List[Launch]:
    """A `rows` reduction in two launches: wg_reduce_split combines `parts` chunks of each run into
    `scratch` (n_hi * parts values of type `acc`), then wg_reduce combines each run's parts."""
    chunk = -(-lay.n_red // parts)
    d = dict(storage_defines(defines), **reduce_defines(lay, ls))
    first = Launch("gpu_reduce", "wg_reduce_split", (lay.n_hi * parts * ls,),
                   [x, scratch, i32(lay.n_red), i32(chunk), i32(parts), meta_arg], (ls,), d, label)
    second = dict(storage_defines(defines), T=acc, FROM_PARTIAL=None)
    second.pop("XH", None)  # the partials are ACC values, whatever x's storage
    return [first, reduce_launch(target, linear_layout("rows", lay.n_hi, parts, 1), scratch, y, second, ls, meta_arg,
                                 label, n_div=lay.n_red)]


def arg_launch(target: Target, lay: Layout, x, y, defines: dict, ls: int, meta_arg, select_last: int,
               label: str = "") -> Launch:
    """The wg_argreduce(_cols) launch of `lay` (ArgMax/ArgMin: `defines` has OP_ARGMAX or OP_ARGMIN)."""
    gsize, lsize, lr = group_shape(target, lay, ls)
    d = dict(defines, OP_ARG=None, **reduce_defines(lay, ls))
    if lay.kind == "rows":
        args = [x, y, i32(lay.n_hi), i32(lay.n_red), i32(lr), meta_arg, i32(select_last)]
        return Launch("gpu_reduce", "wg_argreduce", gsize, args, lsize, d, label)
    return Launch("gpu_reduce", "wg_argreduce_cols", gsize,
                  [x, y, i32(lay.inner), i32(lay.n_red), meta_arg, i32(select_last)], lsize, d, label)


def linear_layout(kind: str, n_hi: int, n_red: int, inner: int) -> Layout:
    """A linear Layout ([n_hi, n_red, inner] row-major; rows: inner = 1)."""
    return Layout(kind, n_hi, n_red, inner if kind == "cols" else 1, True, np.zeros(1, np.int32), 1, 1)


# --- the tunable family: the work-group size per reduction shape -------------------------------------
def _space(target: Target, key: ShapeKey = ()) -> List[Params]:
    return [{"ls": s} for s in local_sizes(target)]


def _default(target: Target, key: ShapeKey) -> Params:
    fits = local_sizes(target)
    return {"ls": fits[0] if fits else 1}


def _bench(target: Target, key: ShapeKey, p: Params):
    """A float32 ReduceSum of shape `key` ([n_hi, n_red, inner] row-major) on `p["ls"]` items."""
    kind, n_hi, n_red, inner = key
    lay = linear_layout(kind, int(n_hi), int(n_red), int(inner))
    ls = int(p["ls"])
    if ls not in local_sizes(target):
        raise ValueError(f"work-group size {ls} does not fit the device")
    launch = reduce_launch(target, lay, Buf("x"), Buf("y"), {"T": "float", "TO": "float", "ACC": "float",
                                                             "ACC_FLOAT": None, "OP_SUM": None}, ls, Buf("m"))
    return launch, {"x": 4 * n_hi * n_red * lay.inner, "y": 4 * n_hi * lay.inner, "m": 64}


WG_REDUCE_FAMILY = register(Family("wg_reduce", "gpu_reduce", _space, _default, _bench,
                                   flops=lambda key: float(key[1]) * float(key[2]) * float(key[3]),
                                   applies=lambda target: applicable(target) is None, priority=20,
                                   tolerance=1e-3))

__all__ = ["LOCAL_SIZES", "Layout", "applicable", "arg_launch", "choose_ls", "linear_layout", "local_sizes", "plan",
           "group_shape", "pow2_at_least", "reduce_launch", "shape_key", "split_launches", "split_parts", "storage_defines",
           "WG_REDUCE_FAMILY"]
