"""Device ops whose outputs are sized at run time: NonZero, Compress, NonMaxSuppression.

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


def sized_op(*op_types: str, bound: BoundFn, supports) -> Callable:
    """Register a device op whose outputs are sized at run time (see the module docstring)."""
    def deco(fn):
        for op in op_types:
            SIZED_AT_RUN_TIME[("", op)] = bound
        return device_op(*op_types, supports=supports)(fn)
    return deco


def _shape(graph: Graph, name: str, node: Node) -> tuple:
    shape = shape_of(graph, name)
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise InvalidModel(f"the shape of {name!r} is not known when planning", node=node.name, tensor=name)
    return tuple(int(d) for d in shape)


# --- selection by mask: count per chunk, scan, write ------------------------------------------------
_CHUNK = 1024  # elements per work-item: few work-items to scan, enough of them to spread over cores


def _mask_launches(ctx: LowerCtx, mask: str, n: int, tm: str, count: str) -> tuple:
    """(launches counting and scanning the selected elements of `mask` (its first n), the chunk
    geometry and the scratch of the per-chunk offsets)."""
    chunk = max(1, min(_CHUNK, -(-n // 256))) if n else 1
    groups = -(-n // chunk) if n else 0
    counts, offs = ctx.scratch(4 * groups), ctx.scratch(4 * groups)
    launches = []
    d = {"TM": tm}
    if groups:
        g, l = work_size(ctx, groups, 64)
        launches.append(Launch("select", "mask_count", g, [Buf(mask), i32(n), i32(chunk), i32(groups), counts],
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
    shape = _shape(graph, node.input(0), node)
    return [SizedOutput((len(shape), int(np.prod(shape, dtype=np.int64))), 1)]


@sized_op("NonZero", bound=_nonzero_bound, supports=_nonzero_supports)
def lower_nonzero(ctx: LowerCtx) -> list:
    x, count = ctx.inputs[0], ctx.outputs[-1]
    check_int32_sizes(ctx)
    tm = _mask_type(x.dtype)
    launches, chunk, groups, offs = _mask_launches(ctx, ctx.node.inputs[0], x.size, tm, count.name)
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
    shape = _shape(graph, node.input(0), node)
    cond = _shape(graph, node.input(1), node)
    if len(cond) != 1:
        raise InvalidModel(f"Compress condition {node.input(1)!r} has rank {len(cond)}, not 1", node=node.name,
                           tensor=node.input(1))
    axis = node.attrs.get("axis")
    if axis is None:
        n = int(np.prod(shape, dtype=np.int64))
        return 1, n, 1, min(cond[0], n), None
    try:
        a = norm_axis(axis, len(shape))
    except ValueError as e:
        raise InvalidModel(f"Compress {e}", node=node.name) from None
    outer, inner = int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a + 1:], dtype=np.int64))
    return outer, shape[a], inner, min(cond[0], shape[a]), a


def _compress_bound(node: Node, graph: Graph) -> list:
    shape = _shape(graph, node.input(0), node)
    _, _, _, sel, axis = _compress_geometry(node, graph)
    if axis is None:
        return [SizedOutput((sel,), 0)]
    return [SizedOutput(tuple(sel if d == axis else s for d, s in enumerate(shape)), axis)]


@sized_op("Compress", bound=_compress_bound, supports=_compress_supports)
def lower_compress(ctx: LowerCtx) -> list:
    """The condition's first `length` entries select (entries past x's axis never can: the
    reference raises for a true one there; here they are ignored)."""
    x, count = ctx.inputs[0], ctx.outputs[-1]
    check_int32_sizes(ctx)
    outer, dim, inner, length, _ = _compress_geometry(ctx.node, ctx.graph)
    launches, chunk, groups, offs = _mask_launches(ctx, ctx.node.inputs[1], length, "uchar", count.name)
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
    bshape, sshape = _shape(graph, node.input(0), node), _shape(graph, node.input(1), node)
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


@sized_op("NonMaxSuppression", bound=_nms_bound, supports=_nms_supports)
def lower_nms(ctx: LowerCtx) -> list:
    count = ctx.outputs[-1]
    check_int32_sizes(ctx)
    b, c, n, cap = _nms_geometry(ctx.node, ctx.graph)
    bc = b * c
    d = {"WG": _group(ctx)}
    if int(ctx.attr("center_point_box", 0) or 0):
        d["CENTER_POINT"] = None
    params = []
    for i, flag in ((2, "HAS_MAX"), (3, "HAS_IOU"), (4, "HAS_SCORE")):
        if ctx.has_input(i) and ctx.inputs[i].size:
            d[flag] = None
            params.append(ctx.buf(i))
        else:
            params.append(ctx.buf(0))  # not read
    alive, sel, counts, offs = ctx.scratch(bc * n), ctx.scratch(4 * bc * cap), ctx.scratch(4 * bc), \
        ctx.scratch(4 * bc)
    launches = []
    if bc:
        wg = d["WG"]
        launches.append(Launch("select", "nms_select", (bc * wg,), [ctx.buf(0), ctx.buf(1), i32(c), i32(n), i32(cap),
                                                                  *params, alive, sel, counts], (wg,), d, ctx.label()))
    launches.append(Launch("select", "scan_counts", (1,), [counts, i32(bc), offs, Buf(count.name)], (1,), {},
                           ctx.label()))
    if bc * cap:
        g, l = work_size(ctx, bc * cap)
        launches.append(Launch("select", "nms_write", g, [sel, counts, offs, i32(c), i32(cap), i32(bc * cap),
                                                          ctx.out(0)], l, {}, ctx.label()))
    return launches
