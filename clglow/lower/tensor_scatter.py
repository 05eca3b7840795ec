"""Lowering of TensorScatter (opset 24: a KV cache's in-place update) to OpenCL
(kernels_cl/tensor_scatter.cl).

One work-item per element of present_cache picks the update row that lands there (at
write_indices[batch] along the sequence axis, modulo its length in circular mode) or past_cache's
element, so the copy and the scatter are one pass. The element's bits are moved, so every dtype
of 1, 2, 4 or 8 bytes runs. An axis of 0 (the batch axis itself) stays on the host.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import STORAGE_CL, attr_str, check_int32_sizes, dtype_of, norm_axis, shape_of, storage_type, work_size

_MODES = ("linear", "circular")


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if attr_str(node.attr("mode"), "linear") not in _MODES:
        return f"TensorScatter mode {attr_str(node.attr('mode'))!r}"
    dt = dtype_of(graph, node.input(0))
    if dt is not None and (dt.kind not in "biufc" or dt.itemsize not in STORAGE_CL):
        return f"tensor {node.input(0)!r} has dtype {dt.name}, not handled by the OpenCL kernel"
    shape = shape_of(graph, node.input(0))
    if shape is not None:
        try:
            if norm_axis(int(node.attr("axis", -2)), len(shape)) == 0:
                return "TensorScatter along axis 0 (the batch axis)"
        except ValueError:
            return f"TensorScatter axis {node.attr('axis', -2)} out of range for rank {len(shape)}"
    return None


def _geometry(ctx: LowerCtx) -> tuple:
    """(L, S, inner, per_batch) of past and update, checked against each other."""
    past, upd = ctx.inputs[0], ctx.inputs[1]
    ps, us = tuple(int(d) for d in past.shape), tuple(int(d) for d in upd.shape)
    axis = norm_axis(int(ctx.attr("axis", -2)), len(ps))
    ok = len(ps) == len(us) and axis > 0 and all(p == u for i, (p, u) in enumerate(zip(ps, us)) if i != axis)
    if not ok or us[axis] > ps[axis] or np.dtype(past.dtype) != np.dtype(upd.dtype):
        raise InvalidModel(f"TensorScatter update {np.dtype(upd.dtype).name}{list(us)} does not fit past_cache "
                           f"{np.dtype(past.dtype).name}{list(ps)} along axis {axis}", node=ctx.label(),
                           tensor=upd.name)
    if ctx.has_input(2) and tuple(ctx.inputs[2].shape) != (ps[0],):
        raise InvalidModel(f"TensorScatter write_indices has shape {list(ctx.inputs[2].shape)}, expected [{ps[0]}]",
                           node=ctx.label(), tensor=ctx.inputs[2].name)
    inner = int(np.prod(ps[axis + 1:], dtype=np.int64))
    return ps[axis], us[axis], inner, int(np.prod(ps[1:axis], dtype=np.int64))


@device_op("TensorScatter", supports=_supports)
def lower_tensor_scatter(ctx: LowerCtx) -> list:
    out = ctx.outputs[0]
    check_int32_sizes(ctx)
    length, seq, inner, per_batch = _geometry(ctx)
    if out.size == 0:
        return []
    defines = {"T": storage_type(out.dtype)}
    if attr_str(ctx.attr("mode"), "linear") == "circular":
        defines["CIRCULAR"] = None
    if not ctx.has_input(2):
        defines["NO_INDICES"] = None
    idx = ctx.buf(2) if ctx.has_input(2) else ctx.buf(0)  # unread with NO_INDICES
    dims = ctx.const_buffer(np.array([length, seq, inner, per_batch], np.int32))
    g, l = work_size(ctx, out.size)
    return [Launch("tensor_scatter", "tensor_scatter", g, [ctx.buf(0), ctx.buf(1), idx, ctx.out(0), i32(out.size),
                                                           dims], l, defines, ctx.label())]
