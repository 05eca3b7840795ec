"""Lowering of SwiGLU (opset 28) to OpenCL (kernels_cl/swiglu.cl): y = a * sigmoid(alpha a) * b.

One work-item per element over A and B of one shape (the schema does not broadcast). float32
and float64 compute in their own type; float16 is stored as float16 (vload_half/vstore_half,
core OpenCL) and rounded after each step as float16 arithmetic does, so it needs no
cl_khr_fp16 and agrees with onnx's reference.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, f32, i32
from .common import F16, check_dtypes, check_int32_sizes, floats, type_defines, work_size


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, floats(target) | {F16}, outputs=True)


@device_op("SwiGLU", supports=_supports)
def lower_swiglu(ctx: LowerCtx) -> list:
    a, b, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if tuple(a.shape) != tuple(b.shape) or np.dtype(a.dtype) != np.dtype(b.dtype):
        raise InvalidModel(f"SwiGLU needs A and B of one shape and dtype (no broadcasting), got "
                           f"{np.dtype(a.dtype).name}{list(a.shape)} and {np.dtype(b.dtype).name}{list(b.shape)}",
                           node=ctx.label(), tensor=b.name)
    check_int32_sizes(ctx)
    if out.size == 0:
        return []
    defines = {"HALF": None} if np.dtype(a.dtype) == F16 else type_defines(T=a.dtype)
    g, l = work_size(ctx, out.size)
    return [Launch("swiglu", "swiglu", g, [ctx.buf(0), ctx.buf(1), ctx.out(0), i32(out.size),
                                           f32(ctx.attr("alpha", 1.0))], l, defines, ctx.label())]
