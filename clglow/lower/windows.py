"""Lowering of HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix (opset 17) to OpenCL
(kernels_cl/windows.cl).

Their inputs are scalars that decide the output shape, so a session sees them as constants of
the plan (runtime.engine.SHAPE_INPUTS) and usually folds the node on the host; the kernels run
where the node reaches the device with constant inputs that were not folded (a model whose
window feeds device work, judged by the partitioner with host fallback off). The window's
float32 or float64 output is computed on the device; other output_datatype values (integer
windows) stay on the host. MelWeightMatrix's band edges (M + 2 integers) are computed from the
constant scalars in float64 exactly as onnx defines them, so the integer bins agree; the
matrix itself is written on the device.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..dtypes import onnx_to_numpy
from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import check_dtypes, floats, type_defines, work_size

_KINDS = {"HannWindow": 0, "HammingWindow": 1, "BlackmanWindow": 2}


def _out_dtype(node: Node) -> Optional[np.dtype]:
    try:
        return np.dtype(onnx_to_numpy(int(node.attr("output_datatype", 1))))
    except Exception:  # noqa: BLE001 - an unknown type id: refused below
        return None


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    dt = _out_dtype(node)
    if dt is None or dt not in floats(target):
        return f"{node.op_type} output_datatype {node.attr('output_datatype', 1)} is not handled by the OpenCL kernel"
    return check_dtypes(node, graph, floats(target), inputs=[], outputs=True)


def _const_scalar(ctx: LowerCtx, i: int) -> np.generic:
    c = ctx.const(i)
    if c is None:
        raise InvalidModel(f"{ctx.node.op_type} input {ctx.node.inputs[i]!r} is computed at run time; the OpenCL "
                           f"kernel needs it when the node is planned", node=ctx.label(), tensor=ctx.node.inputs[i])
    return np.asarray(c).reshape(-1)[0]


def _expect(ctx: LowerCtx, shape: tuple) -> None:
    out = ctx.outputs[0]
    if tuple(out.shape) != shape or np.dtype(out.dtype) != _out_dtype(ctx.node):
        raise InvalidModel(f"{ctx.node.op_type} output is {np.dtype(out.dtype).name}{list(out.shape)}; the inputs "
                           f"give {_out_dtype(ctx.node)}{list(shape)}", node=ctx.label(), tensor=out.name)


@device_op(*_KINDS, supports=_supports)
def lower_window(ctx: LowerCtx) -> list:
    size = int(_const_scalar(ctx, 0))
    _expect(ctx, (size,))
    if size <= 0:
        return []
    n1 = size if int(ctx.attr("periodic", 1)) else size - 1
    defines = type_defines(T=ctx.outputs[0].dtype)
    defines["KIND"] = _KINDS[ctx.node.op_type]
    g, l = work_size(ctx, size)
    return [Launch("windows", "window", g, [ctx.out(0), i32(size), i32(n1)], l, defines, ctx.label())]


def mel_edges(num_mel_bins: int, dft_length, sample_rate, lower_hz, upper_hz) -> np.ndarray:
    """The M + 2 integer spectrogram bins of the mel band edges, computed with onnx's own numpy
    expression on the inputs as given (their dtypes decide where it rounds to float32)."""
    low = 2595 * np.log1p(lower_hz / 700) / np.log(10)
    high = 2595 * np.log1p(upper_hz / 700) / np.log(10)
    step = (high - low) / (num_mel_bins + 2)
    hz = 700 * np.expm1((np.arange(0, num_mel_bins + 2) * step + low) / 2595 * np.log(10))
    return (((dft_length + 1) * hz) // sample_rate).astype(np.int64).astype(np.int32)


@device_op("MelWeightMatrix", supports=_supports)
def lower_mel(ctx: LowerCtx) -> list:
    m, n = int(_const_scalar(ctx, 0)), int(_const_scalar(ctx, 1))
    k = n // 2 + 1
    _expect(ctx, (k, m))
    if m <= 0 or k <= 0:
        return []
    edges = mel_edges(m, *(_const_scalar(ctx, i) for i in (1, 2, 3, 4)))
    if edges.min() < 0 or edges[:-1].max() >= k or edges[-1] > k:
        raise InvalidModel(f"MelWeightMatrix band edges {edges.min()}..{edges.max()} fall outside the {k} "
                           f"spectrogram bins (check sample_rate and the edge frequencies)", node=ctx.label())
    g, l = work_size(ctx, k * m)
    return [Launch("windows", "mel", g, [ctx.out(0), i32(k * m), i32(m), ctx.const_buffer(edges)], l,
                   type_defines(T=ctx.outputs[0].dtype), ctx.label())]
