"""Device ops whose outputs are sized at run time: NonZero, Compress, NonMaxSuppression, Unique (and
TopK with a run-time k: lower/topk.py registers its bound here).

Why a mechanism and not special cases: such an op can only be planned with an upper bound of
its outputs. It declares, per output, that bound and the axis whose real length is a count the
op computes on the device (`SizedOutput`). The planner (runtime.planning.stage) ends a stage at
the op, gives its outputs their bound shapes and adds one int64 output, the count
(`count_name`); the lowering writes each output compactly (C order of its real shape) at the
start of its bound-sized buffer and the count into that tensor. The executor reads the count
back (one blocking read of 8 bytes: the sync point such ops need on any executor), then only the
real part of each output, and the rest of the graph is planned for the real shapes as stages are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..dtypes import cl_type
from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Buf, Launch, LowerCtx, device_op, i32
from .common import BOOL, F32, check_dtypes, check_int32_sizes, dtype_of, norm_axis, numeric, shape_of, storage_type, \
    work_size
from .movement import supports_movable

COUNT_DTYPE = np.dtype(np.int64)


@dataclass(frozen=True)
class SizedOutput:
    """An output's largest shape and the axis whose real length is the op's count (None: the
    shape is the real one)."""

    bound: tuple
    axis: Optional[int]

    def real(self, count: int) -> tuple:
        if self.axis is None:
            return self.bound
        return tuple(count if d == self.axis else s for d, s in enumerate(self.bound))


# (domain, op type) -> (node, graph with the inputs' shapes known) -> [SizedOutput] per output
BoundFn = Callable[[Node, Graph], list]
SIZED_AT_RUN_TIME: dict = {}


def count_name(node: Node) -> str:
    """The planner's name of a node's count tensor (NUL: never an ONNX tensor name)."""
    return f"{node.name}\0count"  # (not first: a name starting with NUL is scratch to the planner)


def sized_at_run_time(node: Node) -> Optional[BoundFn]:
    """The bound rule of a device op whose outputs are sized at run time, else None."""
    return SIZED_AT_RUN_TIME.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))


# (domain, op type) -> (node, graph) -> why the host's implementation is the faster one, or None
HostFn = Callable[[Node, Graph], Optional[str]]
PREFER_HOST: dict = {}


def host_preferred(node: Node, graph: Graph) -> Optional[str]:
    """Why this node runs faster on the host (placed there when host fallback is on), else None."""
    rule = PREFER_HOST.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
    return None if rule is None else rule(node, graph)


def sized_op(*op_types: str, bound: BoundFn, supports, prefer_host: Optional[HostFn] = None) -> Callable:
    """Register a device op whose outputs are sized at run time (see the module docstring)."""
    def deco(fn):
        for op in op_types:
            SIZED_AT_RUN_TIME[("", op)] = bound
            if prefer_host is not None:
                PREFER_HOST[("", op)] = prefer_host
        return device_op(*op_types, supports=supports)(fn)
    return deco


def register_sized(op_type: str, bound: BoundFn) -> None:
    """Declare that a device op registered elsewhere has outputs sized at run time wherever the
    planner cannot size them (TopK with a k only the device knows): `bound` as for sized_op."""
    SIZED_AT_RUN_TIME[("", op_type)] = bound


def shape_known(graph: Graph, name: str, node: Node) -> tuple:
    shape = shape_of(graph, name)
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise InvalidModel(f"the shape of {name!r} is not known when planning", node=node.name, tensor=name)
    return tuple(int(d) for d in shape)


# --- selection by mask: count per chunk, scan, write ------------------------------------------------
_CHUNK = 1024  # elements per work-item: few work-items to scan, enough of them to spread over cores


def _mask_launches(ctx: LowerCtx, mask, n: int, tm: str, count: str) -> tuple:
    """(launches counting and scanning the selected elements of `mask` (its first n), the chunk
    geometry and the scratch of the per-chunk offsets)."""
    chunk = max(1, min(_CHUNK, -(-n // 256))) if n else 1
    groups = -(-n // chunk) if n else 0
    counts, offs = ctx.scratch(4 * groups), ctx.scratch(4 * groups)
    launches = []
    d = {"TM": tm}
    if groups:
        g, l = work_size(ctx, groups, 64)
        launches.append(Launch("select", "mask_count", g, [mask, i32(n), i32(chunk), i32(groups), counts],
                               l, d, ctx.label()))
    launches.append(Launch("select", "scan_counts", (1,), [counts, i32(groups), offs, Buf(count)], (1,), d,
                           ctx.label()))
    return launches, chunk, groups, offs


def _mask_type(dt: np.dtype) -> str:
    return "uchar" if np.dtype(dt) == BOOL else cl_type(dt)


def _fp64(dt: np.dtype) -> dict:
    return {"USE_FP64": None} if np.dtype(dt) == np.float64 else {}


# --- NonZero ---------------------------------------------------------------------------------------
def _nonzero_supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    dt = dtype_of(graph, node.input(0))
    if dt is not None and dt not in numeric(target) | {BOOL}:
        return f"NonZero over dtype {dt.name} runs on the host"
    shape = shape_of(graph, node.input(0))
    if shape is not None and len(shape) == 0:
        return "NonZero of a scalar runs on the host"
    return None


def _nonzero_bound(node: Node, graph: Graph) -> list:
    shape = shape_known(graph, node.input(0), node)
    return [SizedOutput((len(shape), int(np.prod(shape, dtype=np.int64))), 1)]


@sized_op("NonZero", bound=_nonzero_bound, supports=_nonzero_supports)
def lower_nonzero(ctx: LowerCtx) -> list:
    x, count = ctx.inputs[0], ctx.outputs[-1]
    check_int32_sizes(ctx)
    tm = _mask_type(x.dtype)
    launches, chunk, groups, offs = _mask_launches(ctx, ctx.buf(0), x.size, tm, count.name)
    if groups:
        dims = ctx.const_buffer(np.array(x.shape, np.int32))
        g, l = work_size(ctx, groups, 64)
        launches.append(Launch("select", "nonzero_write", g,
                               [ctx.buf(0), i32(x.size), i32(chunk), i32(groups), offs, Buf(count.name), dims,
                                ctx.out(0)], l, {"TM": tm, "RANK": len(x.shape)}, ctx.label()))
    for launch in launches:
        launch.defines.update(_fp64(x.dtype))
    return launches


# --- Compress ----------------------------------------------------------------------------------------
def _compress_supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    dt = dtype_of(graph, node.input(1))
    if dt is not None and dt != BOOL:
        return f"Compress condition of dtype {dt.name} runs on the host"
    return supports_movable(node, graph, target)


def _compress_geometry(node: Node, graph: Graph) -> tuple:
    """(outer, dim, inner, selectable length, axis or None) of x viewed as [outer, dim, inner]."""
    shape = shape_known(graph, node.input(0), node)
    cond = shape_known(graph, node.input(1), node)
    if len(cond) != 1:
        raise InvalidModel(f"Compress condition {node.input(1)!r} has rank {len(cond)}, not 1", node=node.name,
                           tensor=node.input(1))
    axis = node.attrs.get("axis")
    if axis is None:
        n = int(np.prod(shape, dtype=np.int64))
        _check_condition_length(node, cond[0], n)
        return 1, n, 1, cond[0], None
    try:
        a = norm_axis(axis, len(shape))
    except ValueError as e:
        raise InvalidModel(f"Compress {e}", node=node.name) from None
    outer, inner = int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a + 1:], dtype=np.int64))
    _check_condition_length(node, cond[0], shape[a])
    return outer, shape[a], inner, cond[0], a


def _check_condition_length(node: Node, length: int, dim: int) -> None:
    """The spec lets the condition be shorter than the selected axis, never longer (the
    reference raises for a true entry past it; the kernels would ignore it silently)."""
    if length > dim:
        raise InvalidModel(f"Compress condition {node.input(1)!r} has {length} entries for an axis of {dim}",
                           node=node.name, tensor=node.input(1))


def _compress_bound(node: Node, graph: Graph) -> list:
    shape = shape_known(graph, node.input(0), node)
    _, _, _, sel, axis = _compress_geometry(node, graph)
    if axis is None:
        return [SizedOutput((sel,), 0)]
    return [SizedOutput(tuple(sel if d == axis else s for d, s in enumerate(shape)), axis)]


@sized_op("Compress", bound=_compress_bound, supports=_compress_supports)
def lower_compress(ctx: LowerCtx) -> list:
    """The condition's entries select (it is at most as long as x's axis: _compress_geometry)."""
    x, count = ctx.inputs[0], ctx.outputs[-1]
    check_int32_sizes(ctx)
    outer, dim, inner, length, _ = _compress_geometry(ctx.node, ctx.graph)
    launches, chunk, groups, offs = _mask_launches(ctx, ctx.buf(1), length, "uchar", count.name)
    n = outer * length * inner
    if groups and n:
        sel = ctx.scratch(4 * length)
        g, l = work_size(ctx, groups, 64)
        launches.append(Launch("select", "mask_positions", g, [ctx.buf(1), i32(length), i32(chunk), i32(groups),
                                                               offs, sel], l, {"TM": "uchar"}, ctx.label()))
        g, l = work_size(ctx, n)
        launches.append(Launch("select", "compress_gather", g, [ctx.buf(0), sel, Buf(count.name), i32(dim),
                                                                 i32(inner), i32(length), i32(n), ctx.out(0)], l,
                               {"T": storage_type(x.dtype)}, ctx.label()))
    return launches


# --- NonMaxSuppression ---------------------------------------------------------------------------------
def _nms_supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    r = check_dtypes(node, graph, {F32}, inputs=[0, 1]) or check_dtypes(node, graph, {np.dtype(np.int64)}, [2]) \
        or check_dtypes(node, graph, {F32}, inputs=[3, 4])
    return r


def _nms_geometry(node: Node, graph: Graph) -> tuple:
    """(batches, classes, boxes, the most kept per class)."""
    bshape, sshape = shape_known(graph, node.input(0), node), shape_known(graph, node.input(1), node)
    if len(bshape) != 3 or bshape[2] != 4 or len(sshape) != 3 or sshape[0] != bshape[0] or sshape[2] != bshape[1]:
        raise InvalidModel(f"NonMaxSuppression boxes {list(bshape)} and scores {list(sshape)} are not "
                           f"[batch, boxes, 4] and [batch, classes, boxes]", node=node.name)
    b, c, n = bshape[0], sshape[1], bshape[1]
    cap = 0
    if node.input(2):
        limit = graph.const(node.input(2))
        cap = n if limit is None or limit.size == 0 else max(0, min(n, int(limit.reshape(-1)[0])))
    return b, c, n, cap


def _nms_bound(node: Node, graph: Graph) -> list:
    b, c, _, cap = _nms_geometry(node, graph)
    return [SizedOutput((b * c * cap, 3), 0)]


def _group(ctx: LowerCtx) -> int:
    wg = 1
    while wg * 2 <= min(64, int(ctx.device.max_work_group_size)):
        wg *= 2
    return wg


# Boxes per class from which the candidates are sorted once and each kept box tests only its
# neighbours in x order (nms_sorted), rather than every live box (nms_select: its greedy loop
# scans them all per kept box). ssdlite320's batched NMS (27,000 boxes in one class, 11k kept):
# nms_select 2-4 s a run, the host's neighbourhood search 0.2-0.7 s (0:0 under load).
NMS_SORTED_FROM = 512


@sized_op("NonMaxSuppression", bound=_nms_bound, supports=_nms_supports)
def lower_nms(ctx: LowerCtx) -> list:
    count = ctx.outputs[-1]
    check_int32_sizes(ctx)
    b, c, n, cap = _nms_geometry(ctx.node, ctx.graph)
    bc = b * c
    d = {"WG": _group(ctx)}
    if int(ctx.attr("center_point_box", 0) or 0):
        d["CENTER_POINT"] = None
    params = {}
    for i, flag in ((2, "HAS_MAX"), (3, "HAS_IOU"), (4, "HAS_SCORE")):
        if ctx.has_input(i) and ctx.inputs[i].size:
            d[flag] = None
            params[i] = ctx.buf(i)
        else:
            params[i] = ctx.buf(0)  # not read
    sel, counts, offs = ctx.scratch(4 * bc * cap), ctx.scratch(4 * bc), ctx.scratch(4 * bc)
    launches = []
    if bc and n >= NMS_SORTED_FROM:
        launches += _nms_sorted(ctx, b, c, n, cap, d, params, sel, counts)
    elif bc:
        wg, alive = d["WG"], ctx.scratch(bc * n)
        launches.append(Launch("select", "nms_select", (bc * wg,), [ctx.buf(0), ctx.buf(1), i32(c), i32(n), i32(cap),
                                                                  params[2], params[3], params[4], alive, sel, counts],
                               (wg,), d, ctx.label()))
    launches.append(Launch("select", "scan_counts", (1,), [counts, i32(bc), offs, Buf(count.name)], (1,), {},
                           ctx.label()))
    if bc * cap:
        g, l = work_size(ctx, bc * cap)
        launches.append(Launch("select", "nms_write", g, [sel, counts, offs, i32(c), i32(cap), i32(bc * cap),
                                                          ctx.out(0)], l, {}, ctx.label()))
    return launches


def _sort_pairs(ctx: LowerCtx, key, idx, rows: int, p: int) -> list:
    """Launches sorting `rows` rows of p (key, index) pairs, key descending, index ascending: on
    the CPU family a merge sort per row in one work-item (ssdlite320's two sorts of 32768: 27-46
    ms as bitonic steps, 0:0 under load), else bitonic steps."""
    if ctx.device.is_cpu_family:
        g, l = work_size(ctx, rows)
        return [Launch("select", "nms_merge_sort", g, [key, idx, ctx.scratch(4 * rows * p), ctx.scratch(4 * rows * p),
                                                        i32(p), i32(rows)], l, {}, ctx.label())]
    return _bitonic(ctx, key, idx, rows, p)


def _bitonic(ctx: LowerCtx, key, idx, rows: int, p: int) -> list:
    """Bitonic sort launches (see _sort_pairs): the steps within chunks of 2 * bw elements in
    local memory (nms_bitonic_local), the others one launch each (32768: 28 launches, not 120)."""
    bw = 1
    while bw * 2 <= min(256, p // 2, int(ctx.device.max_work_group_size)):
        bw *= 2
    chunk = 2 * bw
    pairs = rows * (p // 2)
    g, l = work_size(ctx, pairs)

    def local(kmin: int, kmax: int) -> Launch:
        return Launch("select", "nms_bitonic_local", (pairs,), [key, idx, i32(p), i32(kmin), i32(kmax)], (bw,),
                      {"BW": bw}, ctx.label())

    out = [local(2, chunk)]
    k = 2 * chunk
    while k <= p:
        j = k // 2
        while j >= chunk:
            out.append(Launch("select", "nms_bitonic", g, [key, idx, i32(p), i32(j), i32(k), i32(pairs)], l, {},
                              ctx.label()))
            j //= 2
        out.append(local(k, k))
        k *= 2
    return out


def _nms_sorted(ctx: LowerCtx, b: int, c: int, n: int, cap: int, d: dict, params: dict, sel, counts) -> list:
    """The sorted NMS (kernels_cl/select.cl nms_sorted): corners and x order per batch, score
    order per (batch, class), then one work-group per (batch, class) keeps boxes in score order."""
    bc, p = b * c, 1 << max(1, (n - 1).bit_length())
    corner, xkey, xidx = ctx.scratch(16 * b * n), ctx.scratch(4 * b * p), ctx.scratch(4 * b * p)
    xc, xplace = ctx.scratch(16 * b * n), ctx.scratch(4 * b * n)
    skey, sidx, rkx, dead = ctx.scratch(4 * bc * p), ctx.scratch(4 * bc * p), ctx.scratch(4 * bc * n), \
        ctx.scratch(bc * n)
    shape = {k: v for k, v in d.items() if k == "CENTER_POINT"}
    g, l = work_size(ctx, b * p)
    out = [Launch("select", "nms_corners", g, [ctx.buf(0), i32(n), i32(p), i32(b * p), corner, xkey, xidx], l,
                  shape, ctx.label())]
    out += _sort_pairs(ctx, xkey, xidx, b, p)
    g, l = work_size(ctx, b * n)
    out.append(Launch("select", "nms_xs", g, [xidx, corner, i32(n), i32(p), i32(b * n), xc, xplace], l, {},
                      ctx.label()))
    g, l = work_size(ctx, bc * p)
    out.append(Launch("select", "nms_score_keys", g, [ctx.buf(1), params[4], i32(n), i32(p), i32(bc * p), skey, sidx],
                      l, {k: v for k, v in d.items() if k == "HAS_SCORE"}, ctx.label()))
    out += _sort_pairs(ctx, skey, sidx, bc, p)
    g, l = work_size(ctx, bc * n)
    out.append(Launch("select", "nms_ranks", g, [sidx, xplace, i32(c), i32(n), i32(p), i32(bc * n), rkx, dead], l, {},
                      ctx.label()))
    # the greedy walk meets a barrier per candidate: on the CPU family one work-item walks alone
    # (its group's items run one after another; 27,000 candidates: 170 -> 27 ms, 0:0 under load)
    wg = 1 if ctx.device.is_cpu_family else d["WG"]
    out.append(Launch("select", "nms_sorted", (bc * wg,), [xc, xplace, skey, sidx, rkx, i32(c), i32(n), i32(p),
                                                         i32(cap), params[2], params[3], dead, sel, counts],
                      (wg,), {**d, "WG": wg}, ctx.label()))
    return out


# --- Unique ----------------------------------------------------------------------------------------------
# Sorted on the device (a stable merge sort of the entry indices, select.cl unique_merge): any size.
# numpy's sort is still the faster one on a CPU device (pocl 3.1 / 3.0 under load, int64 entries:
# 16384 in 8 / 6 ms, numpy 2 ms; 2^20 in 2.4 / 1.7 s, numpy 0.4-0.7 s): beyond UNIQUE_HOST_ENTRIES
# the host's is placed when host fallback is on.
UNIQUE_HOST_ENTRIES = 2048


def _unique_geometry(node: Node, graph: Graph) -> tuple:
    """(outer, dim, inner, axis or None): x viewed as [outer, dim, inner], entries along dim."""
    shape = shape_known(graph, node.input(0), node)
    axis = node.attrs.get("axis")
    if axis is None:
        return 1, int(np.prod(shape, dtype=np.int64)), 1, None
    try:
        a = norm_axis(axis, len(shape))
    except ValueError as e:
        raise InvalidModel(f"Unique {e}", node=node.name) from None
    return int(np.prod(shape[:a], dtype=np.int64)), shape[a], int(np.prod(shape[a + 1:], dtype=np.int64)), a


def _unique_supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    dt = dtype_of(graph, node.input(0))
    if dt is not None and dt not in numeric(target) | {BOOL}:
        return f"Unique over dtype {dt.name} runs on the host"
    return None


def _unique_bound(node: Node, graph: Graph) -> list:
    shape = shape_known(graph, node.input(0), node)
    _, dim, _, axis = _unique_geometry(node, graph)
    y = SizedOutput((dim,), 0) if axis is None else SizedOutput(tuple(shape), axis)
    rules = [y, SizedOutput((dim,), 0), SizedOutput((dim,), None), SizedOutput((dim,), 0)]
    return [r for r, name in zip(rules, node.outputs) if name]


def _unique_prefers_host(node: Node, graph: Graph) -> Optional[str]:
    _, dim, _, _ = _unique_geometry(node, graph)
    return f"Unique over {dim} entries: the host's sort is faster" if dim > UNIQUE_HOST_ENTRIES else None


def _unique_sort(ctx: LowerCtx, geo: list, d: dict, dim: int, keyed: bool) -> tuple:
    """(launches sorting the entry indices, the buffer holding them sorted, the extra arguments
    of the kernels that read them: the sorted values when `keyed`)."""
    size = np.dtype(ctx.inputs[0].dtype).itemsize
    bufs = [ctx.scratch(4 * dim), ctx.scratch(4 * dim)]
    keys = [ctx.scratch(size * dim), ctx.scratch(size * dim)] if keyed else None
    g, l = work_size(ctx, dim, 64)

    def key_args(src: int) -> list:
        return [keys[src], keys[1 - src]] if keyed else []

    launches = [Launch("select", "unique_iota", g, [ctx.buf(0), bufs[0], i32(dim)] + key_args(1), l, d,
                       ctx.label())]
    width, src = 1, 0
    while width < dim:
        launches.append(Launch("select", "unique_merge", g, geo + [bufs[src], bufs[1 - src], i32(width)]
                               + key_args(src), l, d, ctx.label()))
        width, src = width * 2, 1 - src
    return launches, bufs[src], key_args(src)


@sized_op("Unique", bound=_unique_bound, supports=_unique_supports, prefer_host=_unique_prefers_host)
def lower_unique(ctx: LowerCtx) -> list:
    """Entries sorted on the device, then grouped (select.cl); sorted=0 keeps the order of first
    occurrence (the spec's: onnx.reference sorts a lone output anyway, and takes along axis 0
    whatever the axis)."""
    x, count = ctx.inputs[0], ctx.outputs[-1]
    check_int32_sizes(ctx)
    outer, dim, inner, _ = _unique_geometry(ctx.node, ctx.graph)
    tv = _mask_type(x.dtype)
    d = {"TV": tv, **_fp64(x.dtype), **({"FLOAT_T": None} if np.dtype(x.dtype).kind == "f" else {})}
    geo = [ctx.buf(0), i32(outer), i32(dim), i32(inner)]
    if not dim:
        return _mask_launches(ctx, ctx.scratch(1), 0, "uchar", count.name)[0]
    keyed = outer == 1 and inner == 1  # scalar entries: the values sorted along (select.cl KEYED)
    d = {**d, "KEYED": None} if keyed else d
    launches, srt, kargs = _unique_sort(ctx, geo, d, dim, keyed)
    g, l = work_size(ctx, dim, 64)
    flag, uid, start = ctx.scratch(dim), ctx.scratch(4 * dim), ctx.scratch(4 * dim)
    first, cnt, rep = ctx.scratch(4 * dim), ctx.scratch(4 * dim), ctx.scratch(dim)
    order, pos = ctx.scratch(4 * dim), ctx.scratch(4 * dim)
    launches.append(Launch("select", "unique_starts", g, geo + [srt, flag] + kargs, l, d, ctx.label()))
    scan, chunk, groups, offs = _mask_launches(ctx, flag, dim, "uchar", count.name)  # count = distinct values
    gg, gl = work_size(ctx, groups, 64)
    launches += scan + [Launch("select", "unique_ids", gg, [flag, i32(dim), i32(chunk), i32(groups), offs, uid,
                                                            start], gl, {"TM": "uchar"}, ctx.label())]
    sort = int(ctx.attr("sorted", 1))
    launches.append(Launch("select", "unique_groups", g, [srt, uid, start, Buf(count.name), i32(dim), first, cnt,
                                                          rep, order, pos], l, {"SORTED": None} if sort else {},
                           ctx.label()))
    if not sort:  # the first entries in their own order
        scan, chunk, groups, offs = _mask_launches(ctx, rep, dim, "uchar", count.name)
        gg, gl = work_size(ctx, groups, 64)
        launches += scan + [Launch("select", "unique_order", gg, [rep, i32(dim), i32(chunk), i32(groups), offs,
                                                                  order, pos], gl, {"TM": "uchar"}, ctx.label())]
    outs = {j: Buf(name) for j, name in enumerate(ctx.node.outputs[:-1]) if name}  # [-1]: the count
    flags = {f: None for j, f in ((1, "HAS_INDICES"), (2, "HAS_INVERSE"), (3, "HAS_COUNTS")) if j in outs}
    if flags:
        launches.append(Launch("select", "unique_write", g,
                               [order, first, cnt, pos, Buf(count.name), i32(dim),
                                *(outs.get(j, ctx.buf(0)) for j in (1, 2, 3))], l, flags, ctx.label()))
    n = outer * dim * inner
    launches.append(Launch("select", "compress_gather", work_size(ctx, n)[0],
                           [ctx.buf(0), order, Buf(count.name), i32(dim), i32(inner), i32(dim), i32(n),
                            ctx.out(0)], work_size(ctx, n)[1], {"T": storage_type(x.dtype)}, ctx.label()))
    return launches
