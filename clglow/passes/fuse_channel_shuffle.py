"""ShuffleNet's channel shuffle -> one clglow.ChannelShuffle node.

ShuffleNetV2 (torchvision, timm) ends every block with Concat([x1, branch(x2)], axis 1) ->
Reshape [N, 2, C/2, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape [N, C, H, W], and the next
block splits the result in two channel halves again (two Slices, or a Split). Lowered one by
one that is four launches per block (Concat, Transpose, two Slices) for a few kilobytes moved;
on a launch-bound 2 ms model they were ~40 of its ~135 launches. The fused node reads the two
Concat inputs and writes the shuffled tensor, or its two halves, in one launch
(lower/channel_shuffle.py): output channel s is input s % 2's channel s // 2.

    ChannelShuffle(a, b) -> y            the shuffled [N, 2C, H, W] (when the halves are not split off)
    ChannelShuffle(a, b) -> (lo, hi)     its channels [0, C) and [C, 2C) (the next block's split)

Static 4-D shapes only, a and b of one shape; the replaced nodes are kept (Node.unfused) for the
fallback when the node cannot lower.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import GENERIC_TARGET, lookup
from .fuse_conv import in_graph_order, rewrite_to_fixed_point

_ONNX = ("", "ai.onnx")


def _only_user(consumers: dict, outputs: set, name: str, op_type: str) -> Optional[Node]:
    """The single consumer of `name` when it is an ONNX `op_type` and `name` is no graph output."""
    users = consumers.get(name, [])
    if name in outputs or len(users) != 1 or users[0].op_type != op_type or users[0].domain not in _ONNX:
        return None
    return users[0]


def _shape(g: Graph, name: str) -> Optional[tuple]:
    v = g.values.get(name)
    return tuple(v.shape) if v is not None and v.is_static else None


def _const_ints(g: Graph, node: Node, i: int) -> Optional[list]:
    if not node.input(i):
        return None
    c = g.const(node.input(i))
    return None if c is None else [int(v) for v in np.asarray(c).reshape(-1)]


def _channel_slice(g: Graph, node: Node, channels: int) -> Optional[tuple]:
    """(start, stop) of a Slice (opset >= 10) taking whole axes but a step-1 range of axis 1."""
    if node.op_type != "Slice" or node.domain not in _ONNX or g.opset() < 10:
        return None
    starts, ends = _const_ints(g, node, 1), _const_ints(g, node, 2)
    axes = _const_ints(g, node, 3) if node.input(3) else [0]
    steps = _const_ints(g, node, 4) if node.input(4) else [1]
    if starts is None or ends is None or axes is None or steps is None:
        return None
    if len(starts) != 1 or len(ends) != 1 or axes[0] % 4 != 1 or steps != [1]:
        return None
    lo = max(0, min(channels, starts[0] + channels if starts[0] < 0 else starts[0]))
    hi = max(0, min(channels, ends[0] + channels if ends[0] < 0 else ends[0]))
    return lo, hi


def _halves(g: Graph, consumers: dict, outputs: set, y: str, channels: int) -> Optional[tuple]:
    """(the Slice nodes, [lower half's output, upper half's output]) when `y` is used only by
    two Slices taking its channel halves (the next block's split), else None."""
    users = consumers.get(y, [])
    if y in outputs or len(users) != 2:
        return None
    got = {}
    for u in users:
        r = _channel_slice(g, u, channels)
        if r is None:
            return None
        got[r] = u
    half = channels // 2
    if set(got) != {(0, half), (half, channels)}:
        return None
    return [got[(0, half)], got[(half, channels)]], [got[(0, half)].outputs[0], got[(half, channels)].outputs[0]]


def _pattern(g: Graph, consumers: dict, outputs: set, cat: Node) -> Optional[tuple]:
    """(the chain after the Concat, the fused node's outputs) of a channel shuffle, else None."""
    if cat.op_type != "Concat" or cat.domain not in _ONNX or len(cat.inputs) != 2 or "" in cat.inputs:
        return None
    sa, sb, sy = _shape(g, cat.inputs[0]), _shape(g, cat.inputs[1]), _shape(g, cat.outputs[0])
    if sa is None or sa != sb or sy is None or len(sa) != 4 or int(cat.attr("axis", 0)) % 4 != 1:
        return None
    n, c, h, w = sa
    r1 = _only_user(consumers, outputs, cat.outputs[0], "Reshape")
    tr = r1 and _only_user(consumers, outputs, r1.outputs[0], "Transpose")
    r2 = tr and _only_user(consumers, outputs, tr.outputs[0], "Reshape")
    if r2 is None or _shape(g, r1.outputs[0]) != (n, 2, c, h, w) or _shape(g, r2.outputs[0]) != (n, 2 * c, h, w):
        return None
    if [int(p) for p in (tr.attr("perm") or [])] != [0, 2, 1, 3, 4]:
        return None
    y = r2.outputs[0]
    split = _halves(g, consumers, outputs, y, 2 * c)
    if split is not None:
        return [r1, tr, r2] + split[0], split[1]
    return [r1, tr, r2], [y]


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for cat in g.nodes:
        found = _pattern(g, consumers, outputs, cat)
        if found is None:
            continue
        chain, outs = found
        fused = Node("ChannelShuffle", cat.name, list(cat.inputs), outs, {}, domain="clglow")
        if _splice(g, cat, chain, fused):
            return True
    return False


def _splice(g: Graph, head: Node, chain: list, fused: Node) -> bool:
    """Replace the Concat by `fused` (its inputs are the Concat's: ready there, and every reader
    of the chain's results comes later) and drop the chain, when a device kernel supports it."""
    op = lookup(fused)
    if op is None or op.supports(fused, g, GENERIC_TARGET) is not None:
        return False
    fused.unfused = in_graph_order(g, [head] + chain)
    keep = set(fused.outputs)
    made = [o for n in [head] + chain for o in n.outputs if o not in keep]
    at = next(i for i, n in enumerate(g.nodes) if n is head)
    g.nodes[at] = fused
    ids = {id(n) for n in chain}
    g.nodes = [n for n in g.nodes if id(n) not in ids]
    for o in made:
        g.values.pop(o, None)
    return True


def fuse_channel_shuffle(graph: Graph) -> Graph:
    """Every channel shuffle that fits (see the module doc) as one clglow.ChannelShuffle."""
    return rewrite_to_fixed_point(graph, _fuse_one)


def output_shape(node: Node, graph: Graph) -> dict:
    """{output: (dtype, shape)} of a ChannelShuffle (shapes.infer_node's rule for it): [N, 2C, H, W]
    for one output, [N, C, H, W] each for two; {} while the inputs are not static."""
    v = graph.values.get(node.input(0))
    if v is None or not v.is_static or len(v.shape) != 4:
        return {}
    n, c, h, w = v.shape
    shape = (n, 2 * c, h, w) if len(node.outputs) == 1 else (n, c, h, w)
    return {o: (np.dtype(v.dtype), shape) for o in node.outputs}
