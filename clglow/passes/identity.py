"""Remove Identity and inference-mode Dropout by rewiring their consumers.

An inference-mode Dropout whose mask is read (or a training-mode one of ratio 0, which drops
nothing) passes its input through and writes an all-true mask: it becomes the rewiring plus
ConstantOfShape(Shape(x), true), which shape specialisation folds into a constant mask.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value


def _is_inference_dropout(node, graph: Graph, used: set) -> bool:
    if len(node.outputs) > 1 and node.outputs[1] and node.outputs[1] in used:
        return False  # the mask is used
    if node.attr("is_test", 1) == 0 and graph.opset() < 7:
        return False
    tm = graph.const(node.input(2))
    if node.input(2) and (tm is None or bool(np.asarray(tm).reshape(-1)[0])):
        return False  # training mode, or not known to be off
    return True


def _drops_nothing(node, graph: Graph) -> bool:
    """A Dropout whose output is its input: inference mode, or a constant ratio of 0."""
    ratio = graph.const(node.input(1)) if node.input(1) else None
    if ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0:
        return True
    return _is_inference_dropout(node, graph, set())


def _all_true_mask(node, graph: Graph) -> list:
    """Shape(x) -> ConstantOfShape(true): the mask of a Dropout that drops nothing."""
    shape = f"{node.outputs[1]}__shape"
    graph.values[shape] = Value(shape)
    return [Node("Shape", f"{node.name}__shape", [node.inputs[0]], [shape]),
            Node("ConstantOfShape", f"{node.name}__mask", [shape], [node.outputs[1]],
                 {"value": np.array([True])})]


def remove_identity(graph: Graph) -> Graph:
    g = graph.copy()
    rename: dict[str, str] = {}
    keep = []
    outputs = set(g.outputs)
    used = set(g.consumers()) | outputs
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        removable = node.op_type == "Identity" or (node.op_type == "Dropout" and _is_inference_dropout(node, g, used))
        masked = (node.op_type == "Dropout" and not removable and len(node.outputs) > 1 and node.outputs[1]
                  and _drops_nothing(node, g))
        if masked and node.domain in ("", "ai.onnx"):
            if node.outputs[0] in outputs:  # a graph output keeps its name: a view of x
                keep.append(Node("Identity", f"{node.name}__output", [node.inputs[0]], [node.outputs[0]]))
            else:
                rename[node.outputs[0]] = node.inputs[0]
            keep += _all_true_mask(node, g)
            continue
        if removable and node.domain in ("", "ai.onnx") and node.outputs[0] not in outputs:
            rename[node.outputs[0]] = node.inputs[0]
            continue
        keep.append(node)
    g.nodes = keep
    return g
