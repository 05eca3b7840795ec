"""Remove Identity and inference-mode Dropout by rewiring their consumers."""
from __future__ import annotations

import numpy as np

from ..ir import Graph


def _is_inference_dropout(node, graph: Graph, used: set) -> bool:
    if len(node.outputs) > 1 and node.outputs[1] and node.outputs[1] in used:
        return False  # the mask is used
    if node.attr("is_test", 1) == 0 and graph.opset() < 7:
        return False
    tm = graph.const(node.input(2))
    if node.input(2) and (tm is None or bool(np.asarray(tm).reshape(-1)[0])):
        return False  # training mode, or not known to be off
    return True


def remove_identity(graph: Graph) -> Graph:
    g = graph.copy()
    rename: dict[str, str] = {}
    keep = []
    outputs = set(g.outputs)
    used = set(g.consumers()) | outputs
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        removable = node.op_type == "Identity" or (node.op_type == "Dropout" and _is_inference_dropout(node, g, used))
        if removable and node.domain in ("", "ai.onnx") and node.outputs[0] not in outputs:
            rename[node.outputs[0]] = node.inputs[0]
            continue
        keep.append(node)
    g.nodes = keep
    return g
