"""The rotary position embedding of Llama-style exports -> one clglow.RotateHalf.

Hugging Face's Llama, Mistral, Qwen and GPT-NeoX apply `x * cos + rotate_half(x) * sin` to the
queries and keys of every layer, with rotate_half(x) = cat(-x[..., h:], x[..., :h]) over the
last axis (h = half of it). torch.onnx writes that as seven nodes, which no other fusion takes
whole (the Slices and the Concat end elementwise chains):

    x1 = Slice(x, 0, h)   x2 = Slice(x, h, end)   r = Concat(Neg(x2), x1, axis=-1)
    y  = Add(Mul(x, cos), Mul(r, sin))            (either operand order of the Muls and the Add)

Fused into RotateHalf(x, cos, sin) -> y: one launch of kernels_cl/rotate_half.cl, x read once
(the queries' and the keys' of each layer: up to 14 launches a layer become 2). cos and sin are
any tensors broadcasting to x (computed per run from the positions, or constant tables).

Fused when: every intermediate (the Slices, the Neg, the Concat, both Muls) is read only by the
pattern and is not a graph output, the Slices take the last axis in steps of 1 with constant
bounds that split it in two equal halves, and the fused node is supported (float32, static
shapes: lower/rotate_half.py); otherwise the nodes stay as they are.
"""
from __future__ import annotations

from typing import Optional

from ..ir import Graph, Node
from ..lower.movement import slice_params
from .fuse_conv import rewrite_to_fixed_point, splice_fused


def _is(node: Optional[Node], op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _last_axis_slice(g: Graph, node: Node) -> Optional[tuple]:
    """(data, start, end) of a Slice over the last axis of a static tensor in steps of 1 (its
    constant start as lower/movement.slice_params reads it, clamped as ONNX does; its end from the
    output's shape); None for any other Slice."""
    v, out = g.values.get(node.inputs[0]), g.values.get(node.outputs[0])
    params = slice_params(node, g, g.opset())
    if v is None or out is None or not v.is_static or not out.is_static or not v.shape or params is None:
        return None
    rank, dim = len(v.shape), int(v.shape[-1])
    starts, axes, steps = params
    axes = list(range(len(starts))) if axes is None else axes
    if len(axes) != 1 or axes[0] not in (-1, rank - 1) or steps not in (None, [1]):
        return None
    start = min(max(starts[0] + dim if starts[0] < 0 else starts[0], 0), dim)
    return node.inputs[0], start, start + int(out.shape[-1])


def _rotate_half_of(g: Graph, prod: dict, name: str) -> Optional[tuple]:
    """(x, [Concat, Neg, Slice, Slice]) when `name` is cat(-x[..., h:], x[..., :h], axis=-1)."""
    cat = prod.get(name)
    if not _is(cat, "Concat") or len(cat.inputs) != 2:
        return None
    neg, first = prod.get(cat.inputs[0]), prod.get(cat.inputs[1])
    if not _is(neg, "Neg") or not _is(first, "Slice"):
        return None
    second = prod.get(neg.inputs[0])
    if not _is(second, "Slice"):
        return None
    lo, hi = _last_axis_slice(g, first), _last_axis_slice(g, second)
    if lo is None or hi is None or lo[0] != hi[0]:
        return None
    x = lo[0]
    dim = int(g.values[x].shape[-1])
    rank = len(g.values[x].shape)
    if int(cat.attr("axis", 0)) not in (-1, rank - 1) or dim % 2 or (lo[1], lo[2], hi[1], hi[2]) != (0, dim // 2,
                                                                                                    dim // 2, dim):
        return None
    return x, [cat, neg, second, first]


def _match(g: Graph, add: Node, prod: dict) -> Optional[tuple]:
    """(x, cos, sin, nodes of the pattern) of an Add that ends a rotary embedding."""
    if len(add.inputs) != 2:
        return None
    for p, q in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        m_cos, m_sin = prod.get(p), prod.get(q)
        if not _is(m_cos, "Mul") or not _is(m_sin, "Mul") or m_cos is m_sin:
            continue
        for r, sin in ((m_sin.inputs[0], m_sin.inputs[1]), (m_sin.inputs[1], m_sin.inputs[0])):
            rot = _rotate_half_of(g, prod, r)
            if rot is None or rot[0] not in m_cos.inputs:
                continue
            x, inner = rot
            cos = m_cos.inputs[1] if m_cos.inputs[0] == x else m_cos.inputs[0]
            return x, cos, sin, [m_cos, m_sin] + inner
    return None


def _private(nodes: list, end: Node, consumers: dict, outputs: set) -> bool:
    """Every node's output is read by one node of `nodes` or `end` alone and is no graph output."""
    ids = {id(n) for n in nodes} | {id(end)}
    for n in nodes:
        users = consumers.get(n.outputs[0], [])
        if n.outputs[0] in outputs or len(users) != 1 or id(users[0]) not in ids:
            return False
    return True


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    prod = g.producers()
    for add in g.nodes:
        if not _is(add, "Add"):
            continue
        found = _match(g, add, prod)
        if found is None:
            continue
        x, cos, sin, inner = found
        if not _private(inner, add, consumers, outputs):
            continue
        fused = Node("RotateHalf", add.name, [x, cos, sin], [add.outputs[0]], {}, "clglow", None)
        if splice_fused(g, inner[0], inner[1:] + [add], fused):
            return True
    return False


def fuse_rotary(graph: Graph) -> Graph:
    """Every rotary embedding that fits (see the module doc) as one clglow.RotateHalf."""
    return rewrite_to_fixed_point(graph, _fuse_one)
