"""TopK on OpenCL (kernels_cl/topk.cl), with k a constant or read on the device.

Two rows, one order (value first, equal values by lower index: the spec's, and onnxruntime's):
- k <= ONE_PASS_K: one work-item per row keeps the best k in registers (many short rows);
- larger k, or a k only the device knows: radix select, one work-group per row (a few passes
  over the row and k * k compares for the winners' ranks). Why: one work-item taking k passes
  over the row cost ssdlite320 1.8 ms per class (k = 300 of 3234 anchors, 90 classes: 162 ms of
  its 195 ms of kernels, 0:0 under load).

A k computed from data (torchvision's min(candidates, count) once counts are not constants, or
any run-time k) makes the outputs sized at run time (lower/select.py): the outputs are planned
at the whole axis, the kernel writes the real k's layout and k itself as the count.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..dtypes import cl_type
from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Buf, Launch, LowerCtx, device_op, i32
from .common import F64, check_dtypes, check_int32_sizes, norm_axis, numeric, work_size
from .select import SizedOutput, register_sized, shape_known

ONE_PASS_K = 16  # the register-list kernel's largest k (kernels_cl/topk.cl `topk`)


def _topk_k(node: Node, graph: Graph) -> Optional[int]:
    """k when known at planning (the attribute before opset 10, a constant input after), else None."""
    if graph.opset(node.domain) < 10:
        return int(node.attr("k"))
    k = graph.const(node.input(1))
    return None if k is None else int(np.asarray(k).reshape(-1)[0])


def _supports_topk(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, numeric(target), inputs=[0])


def _axis(node: Node, rank: int) -> int:
    return norm_axis(node.attr("axis", -1), rank)


def _topk_bound(node: Node, graph: Graph) -> list:
    """Both outputs at most the whole axis long; their real length is k (the count)."""
    shape = shape_known(graph, node.input(0), node)
    axis = _axis(node, len(shape))
    return [SizedOutput(tuple(shape), axis) for o in node.outputs[:2] if o]


register_sized("TopK", _topk_bound)


def _key(dt: np.dtype) -> str:
    """The radix kernel's order-key variant for the element type."""
    wide = dt.itemsize == 8
    if dt.kind == "f":
        return "KEY_F64" if wide else "KEY_F32"
    if dt.kind == "i":
        return "KEY_S64" if wide else "KEY_S32"
    return "KEY_U64" if wide else "KEY_U32"


def _group(ctx: LowerCtx) -> int:
    """The radix kernel's work-group: a power of two up to 64 within the device's limit."""
    wg = 1
    while wg * 2 <= min(64, int(ctx.device.max_work_group_size)):
        wg *= 2
    return wg


@device_op("TopK", supports=_supports_topk)
def lower_topk(ctx: LowerCtx) -> list:
    x, vals = ctx.inputs[0], ctx.outputs[0]
    k = _topk_k(ctx.node, ctx.graph)  # None: read on the device, the outputs sized at run time
    if vals.size == 0 or k == 0:
        return []
    check_int32_sizes(ctx)
    axis = _axis(ctx.node, len(x.shape))
    length = int(x.shape[axis])
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    rows = x.size // length
    dt = np.dtype(x.dtype)
    defines: dict = {"TOPK_T": cl_type(dt)}
    if dt == F64:
        defines["USE_FP64"] = None
    if int(ctx.attr("largest", 1)):
        defines["LARGEST"] = None
    if k is not None and not 0 <= k <= length:
        raise InvalidModel(f"TopK k = {k} outside [0, {length}] (the length of axis {axis})", node=ctx.node.name)
    kmax = length if k is None else k
    outs = ctx.node.outputs
    idx = ctx.out(1) if len(outs) > 1 and outs[1] else ctx.scratch(8 * rows * kmax)
    if k is not None and k <= ONE_PASS_K:
        g, l = work_size(ctx, rows, cap=64)
        return [Launch("topk", "topk", g, [ctx.buf(0), ctx.out(0), idx, i32(rows), i32(length), i32(inner), i32(k)],
                       l, defines, ctx.label())]
    wg = _group(ctx)
    defines.update({"WG": wg, _key(dt): None})
    if k is None:
        defines["K_BUF"] = None
        kbuf, count = ctx.buf(1), Buf(outs[-1])  # the planner's count tensor comes last
    else:
        kbuf, count = ctx.buf(0), ctx.buf(0)  # not read
    cand_i, cand_k = ctx.scratch(4 * rows * kmax), ctx.scratch(8 * rows * kmax)
    return [Launch("topk", "topk_radix", (rows * wg,), [ctx.buf(0), ctx.out(0), idx, i32(length), i32(inner),
                                                        i32(kmax), kbuf, count, cand_i, cand_k],
                   (wg,), defines, ctx.label())]
