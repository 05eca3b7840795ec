"""dtype rules shared by the lowering modules added for ONNX conformance.

float64 runs on the device only when the session's Target has cl_khr_fp64 (`supports(node,
graph, target)` receives it; a generic Target, e.g. ONNXIFI's probe without a device, has none).
float16 tensors are stored as half and converted with vload_half/vstore_half (core OpenCL) where
a kernel handles them.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..dtypes import cl_type
from ..ir import Graph, Node
from ..target import Target

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)
SIGNED = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)}
UNSIGNED = {np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)}
INTS = SIGNED | UNSIGNED
BOOL = np.dtype(np.bool_)


def floats(target: Target) -> set:
    """Float dtypes computed natively on `target` (float64 only with cl_khr_fp64)."""
    return {F32, F64} if target.has_fp64 else {F32}


def numeric(target: Target) -> set:
    """Float and integer dtypes computed natively on `target`."""
    return floats(target) | INTS


def dtype_of(graph: Graph, name: str) -> Optional[np.dtype]:
    v = graph.values.get(name) if name else None
    return None if v is None or v.dtype is None or v.dtype == object else np.dtype(v.dtype)


def check(node: Node, graph: Graph, allowed: set, inputs=None, outputs: bool = False) -> Optional[str]:
    """supports() helper: listed inputs (default: all present) and optionally outputs have allowed dtypes."""
    names = [node.input(i) for i in (range(len(node.inputs)) if inputs is None else inputs)]
    if outputs:
        names += [o for o in node.outputs if o]
    for name in names:
        if not name:
            continue
        v = graph.values.get(name)
        if v is not None and v.dtype is not None and (v.dtype == object or np.dtype(v.dtype) not in allowed):
            return f"tensor {name!r} has dtype {np.dtype(v.dtype).name if v.dtype != object else 'object'}, " \
                   f"not handled by the OpenCL kernel"
    return None


def acc_type(dt: np.dtype) -> str:
    """Accumulator C type for reductions over `dt`."""
    dt = np.dtype(dt)
    if dt == F64:
        return "double"
    if dt.kind == "f":
        return "float"
    if dt.kind == "u":
        return "ulong"
    return "long"


def type_defines(**types: np.dtype) -> dict:
    """{'T': 'float', ...} plus USE_FP64 when any is double."""
    d = {k: cl_type(v) for k, v in types.items()}
    if any(np.dtype(v) == F64 for v in types.values()):
        d["USE_FP64"] = None
    return d


def norm_axis(axis: int, rank: int) -> int:
    axis = int(axis)
    if axis < -max(rank, 1) or axis >= max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis
