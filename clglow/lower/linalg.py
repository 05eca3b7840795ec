"""Lowering of Det (opset 11 and 22) to OpenCL (kernels_cl/linalg.cl).

One work-item per matrix of the batch [*, n, n]: LU factorisation with partial pivoting (as
numpy.linalg.det's LAPACK getrf) in scratch memory, the determinant the signed product of the
pivots. The batches ONNX models compute determinants of are many small matrices (3x3 and 4x4
transforms), where a work-item per matrix keeps every core busy without any synchronisation.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import check_dtypes, check_int32_sizes, floats, shape_of, type_defines, work_size


def _supports_det(node: Node, graph: Graph, target: Target) -> Optional[str]:
    shape = shape_of(graph, node.input(0))
    if shape is not None and len(shape) < 2:
        return f"Det of a rank-{len(shape)} input"
    return check_dtypes(node, graph, floats(target), outputs=True)


@device_op("Det", supports=_supports_det)
def lower_det(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    check_int32_sizes(ctx)
    shape = tuple(int(d) for d in x.shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise InvalidModel(f"Det needs square matrices in the last two dimensions, got shape {list(shape)}",
                           node=ctx.label(), tensor=x.name)
    if tuple(out.shape) != shape[:-2]:
        raise InvalidModel(f"Det output has shape {list(out.shape)}, expected {list(shape[:-2])}",
                           node=ctx.label(), tensor=out.name)
    n_mat, n = out.size, shape[-1]
    if n_mat == 0:
        return []
    g, l = work_size(ctx, n_mat, 64)
    scratch = ctx.scratch(x.size * np.dtype(x.dtype).itemsize)
    return [Launch("linalg", "det", g, [ctx.buf(0), scratch, ctx.out(0), i32(n_mat), i32(n)], l,
                   type_defines(T=x.dtype), ctx.label())]
