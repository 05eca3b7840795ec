"""A squeeze-and-excitation block's squeeze -> one clglow.SqueezeExcite node.

MobileNetV3, EfficientNet, MnasNet-A and DeepLabV3's MobileNetV3 backbone compute a channel gate
per block: s = act2(W2 @ act1(W1 @ mean_HW(x) + b1) + b2) (ReduceMean over H, W or a
GlobalAveragePool, then two 1x1 FusedConvs of a 1x1 map), and scale x by it (Mul). Lowered one
by one that is three launches of a few microseconds each; fused it is one work-group per image
(lower/squeeze_excite.py): the means, the two small matrix-vector products and their
activations with the vectors in local memory. The Mul stays (it streams x on every thread).

    SqueezeExcite(x, W1, B1, W2, B2) -> s [N, C, 1, 1]    attrs act1/alpha1/beta1, act2/alpha2/beta2

Static shapes, constant weights, FusedConvs without a residual; the replaced nodes are kept
(Node.unfused) for the fallback when the node cannot lower.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import GENERIC_TARGET, lookup
from .fuse_conv import in_graph_order, rewrite_to_fixed_point

_ONNX = ("", "ai.onnx")


def _only_user(consumers: dict, outputs: set, name: str) -> Optional[Node]:
    users = consumers.get(name, [])
    return users[0] if len(users) == 1 and name not in outputs else None


def _is_spatial_mean(g: Graph, node: Node) -> bool:
    """GlobalAveragePool, or ReduceMean over axes 2 and 3 (attribute or constant input) keeping them."""
    if node.domain not in _ONNX:
        return False
    v = g.values.get(node.input(0))
    if v is None or not v.is_static or len(v.shape) != 4:
        return False
    if node.op_type == "GlobalAveragePool":
        return True
    if node.op_type != "ReduceMean" or not int(node.attr("keepdims", 1)):
        return False
    axes = node.attr("axes")
    if axes is None and node.input(1):
        c = g.const(node.input(1))
        axes = None if c is None else np.asarray(c).reshape(-1).tolist()
    return axes is not None and sorted(int(a) % 4 for a in axes) == [2, 3]


def _pointwise_fc(g: Graph, node: Optional[Node], cin: int) -> Optional[int]:
    """The output channels of a FusedConv that is a 1x1, single-group, unpadded, stride-1 conv of
    `cin` channels with a constant weight and no residual, else None."""
    if node is None or node.op_type != "FusedConv" or node.domain != "clglow" or node.input(3):
        return None
    w = g.const(node.input(1))
    if w is None or w.ndim != 4 or tuple(w.shape[1:]) != (cin, 1, 1) or int(node.attr("group", 1)) != 1:
        return None
    if any(int(p) for p in node.attr("pads", []) or []) or any(int(s) != 1 for s in node.attr("strides", []) or []):
        return None
    if node.input(2) and g.const(node.input(2)) is None:
        return None
    return int(w.shape[0])


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for mean in g.nodes:
        if not _is_spatial_mean(g, mean):
            continue
        c = int(g.values[mean.input(0)].shape[1])
        fc1 = _only_user(consumers, outputs, mean.outputs[0])
        cm = _pointwise_fc(g, fc1, c)
        fc2 = _only_user(consumers, outputs, fc1.outputs[0]) if cm else None
        if cm is None or _pointwise_fc(g, fc2, cm) != c:
            continue
        attrs = {"act1": fc1.attr("activation", ""), "alpha1": float(fc1.attr("alpha", 0.0)),
                 "beta1": float(fc1.attr("beta", 0.0)), "act2": fc2.attr("activation", ""),
                 "alpha2": float(fc2.attr("alpha", 0.0)), "beta2": float(fc2.attr("beta", 0.0))}
        fused = Node("SqueezeExcite", mean.name, [mean.input(0), fc1.input(1), fc1.input(2), fc2.input(1), fc2.input(2)],
                     [fc2.outputs[0]], attrs, domain="clglow")
        if _splice(g, [mean, fc1, fc2], fused):
            return True
    return False


def _splice(g: Graph, chain: list, fused: Node) -> bool:
    """`fused` where the chain's last node was, the chain and its intermediates gone, when a
    device kernel supports it."""
    op = lookup(fused)
    if op is None or op.supports(fused, g, GENERIC_TARGET) is not None:
        return False
    fused.unfused = in_graph_order(g, chain)
    at = next(i for i, n in enumerate(g.nodes) if n is chain[-1])
    g.nodes[at] = fused
    ids = {id(n) for n in chain[:-1]}
    g.nodes = [n for n in g.nodes if id(n) not in ids]
    for n in chain[:-1]:
        g.values.pop(n.outputs[0], None)
    return True


def fuse_squeeze_excite(graph: Graph) -> Graph:
    """Every squeeze that fits (see the module doc) as one clglow.SqueezeExcite."""
    return rewrite_to_fixed_point(graph, _fuse_one)
