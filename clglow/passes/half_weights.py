"""A float16 model's convolution weights read as float32 constants.

Why: a model exported in float16 (onnxconverter-common, torch `.half()`) declares its Conv and
ConvTranspose weights and biases as float16 initializers, while the convolution kernels take
float32 weights (packed at plan time) next to half activations (HalfIO: X, the residual and Y
stored as half, fp32 arithmetic). Widened once here (float16 -> float32 is exact), the node runs
on OpenCL instead of the host; the activations stay float16, as the model declares them.

A new float32 constant is made per weight (`<name>/f32`), so any other reader of the float16
tensor still sees the model's type.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Value

F16 = np.dtype(np.float16)
# (domain, op) -> the input positions that are weights
_WEIGHTS = {("", "Conv"): (1, 2), ("", "ConvTranspose"): (1, 2), ("clglow", "FusedConv"): (1, 2)}


def widen_half_weights(graph: Graph) -> Graph:
    """Every float16 constant at a convolution's weight positions replaced by a float32 copy (a
    copy of `graph`; `graph` itself when there is none)."""
    if not any(graph.const(n.input(i)) is not None and graph.const(n.input(i)).dtype == F16
               for n in graph.nodes for i in _WEIGHTS.get((n.domain if n.domain != "ai.onnx" else "", n.op_type), ())
               if n.input(i)):
        return graph
    graph = graph.copy()
    made: dict = {}
    nodes = []
    for node in graph.nodes:
        domain = node.domain if node.domain != "ai.onnx" else ""
        inputs = list(node.inputs)
        for i in _WEIGHTS.get((domain, node.op_type), ()):
            name = node.input(i)
            c = graph.const(name) if name else None
            if c is None or c.dtype != F16:
                continue
            if name not in made:
                wide = f"{name}/f32"
                arr = np.asarray(c, np.float32)
                graph.values[wide] = Value(wide, arr.dtype, tuple(arr.shape), arr)
                made[name] = wide
            inputs[i] = made[name]
        nodes.append(node if inputs == node.inputs else replace(node, inputs=inputs))
    graph.nodes = nodes
    return graph


__all__ = ["widen_half_weights"]
