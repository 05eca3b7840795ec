"""Conv + bias + residual Add + activation (Gelu and Swish from their node forms too) -> one
clglow.FusedConv node.

The GEMM epilogue then applies bias, residual and activation while the result
is still in registers: ResNet's conv-BN-add-relu becomes a single launch.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import GENERIC_TARGET, lookup

_ACTIVATIONS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "Tanh", "HardSwish"}


def fused_activation(node: Node, graph: Graph) -> Optional[tuple]:
    """(name, alpha, beta) when `node` is an activation the epilogue can apply."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in _ACTIVATIONS:
        return None
    if node.op_type == "Relu":
        return ("Relu", 0.0, 0.0)
    if node.op_type == "LeakyRelu":
        return ("LeakyRelu", float(node.attr("alpha", 0.01)), 0.0)
    if node.op_type == "HardSigmoid":
        return ("HardSigmoid", float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))
    if node.op_type in ("Sigmoid", "Tanh", "HardSwish"):
        return (node.op_type, 0.0, 0.0)
    # Clip: attributes before opset 11, optional constant inputs after
    if graph.opset() < 11:
        return ("Clip", float(node.attr("min", -3.4028234663852886e38)), float(node.attr("max", 3.4028234663852886e38)))
    lo, hi = -3.4028234663852886e38, 3.4028234663852886e38
    if node.input(1):
        c = graph.const(node.input(1))
        if c is None:
            return None
        lo = float(np.asarray(c).reshape(-1)[0])
    if node.input(2):
        c = graph.const(node.input(2))
        if c is None:
            return None
        hi = float(np.asarray(c).reshape(-1)[0])
    return ("Clip", lo, hi)


def scalar_const(graph: Graph, name: str) -> Optional[float]:
    """The value of a float32 one-element constant, else None."""
    c = graph.const(name) if name else None
    if c is None:
        return None
    c = np.asarray(c)
    return float(c.reshape(-1)[0]) if c.size == 1 and c.dtype == np.float32 else None


def _swish_scale(g: Graph, consumers: dict, gate: Node, x: str, outputs: set) -> Optional[tuple]:
    """([Mul, Sigmoid], alpha) when `gate` is Mul(x, c) | Mul(c, x), c a nonzero scalar constant,
    feeding only a Sigmoid: quick-GELU's sigmoid(1.702 x) (CLIP). None otherwise."""
    if gate.op_type != "Mul" or len(gate.inputs) != 2 or gate.inputs[0] == gate.inputs[1]:
        return None
    c = scalar_const(g, gate.inputs[1] if gate.inputs[0] == x else gate.inputs[0])
    users = consumers.get(gate.outputs[0], [])
    if c is None or c == 0.0 or gate.outputs[0] in outputs or len(users) != 1:
        return None
    sig = users[0]
    return ([gate, sig], c) if sig.op_type == "Sigmoid" and sig.domain in ("", "ai.onnx") else None


def swish(g: Graph, consumers: dict, x: str, outputs: set) -> Optional[tuple]:
    """([nodes], output, alpha) when `x` is used exactly by Mul(x, Sigmoid(x)) and its sigmoid
    (Swish / SiLU as exporters write it, alpha 1), or by Mul(x, Sigmoid(Mul(x, c))) and the
    scaling Mul (quick-GELU, alpha c; either operand order): the epilogue's activation 8,
    x * sigmoid(alpha x). Every intermediate used once and not a graph output."""
    users = consumers.get(x, [])
    if x in outputs or len(users) != 2 or any(u.domain not in ("", "ai.onnx") for u in users):
        return None
    for gate, mul in ((users[0], users[1]), (users[1], users[0])):
        if mul.op_type != "Mul":
            continue
        if gate.op_type == "Sigmoid":
            nodes, alpha = [gate], 1.0
        else:
            scaled = _swish_scale(g, consumers, gate, x, outputs)
            if scaled is None:
                continue
            nodes, alpha = scaled
        sig = nodes[-1]
        if sorted(mul.inputs) != sorted([x, sig.outputs[0]]):
            continue
        if consumers.get(sig.outputs[0], []) != [mul] or sig.outputs[0] in outputs:
            continue
        return nodes + [mul], mul.outputs[0], alpha
    return None


def _near(graph: Graph, name: str, value: float) -> bool:
    c = scalar_const(graph, name)
    return c is not None and abs(c - value) <= 1e-6 * abs(value)


def _other(node: Node, name: str) -> Optional[str]:
    """The input of a binary `node` that is not `name` (None when both are `name`)."""
    if len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def gelu(g: Graph, consumers: dict, x: str, outputs: set) -> Optional[tuple]:
    """(nodes, output) of a Gelu applied to `x`: the opset-20 op (exact form), or the erf chain
    Div(x, sqrt 2) | Mul(x, 1/sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5 (the 0.5 may also
    scale x first). Every intermediate used once and not a graph output."""
    def only(name: str) -> Optional[Node]:
        users = consumers.get(name, [])
        if len(users) != 1 or name in outputs or users[0].domain not in ("", "ai.onnx"):
            return None
        return users[0]

    users = consumers.get(x, [])
    if x in outputs:
        return None
    if len(users) == 1 and users[0].op_type == "Gelu" and users[0].domain in ("", "ai.onnx"):
        approx = users[0].attr("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        return ([users[0]], users[0].outputs[0]) if approx == "none" else None
    if len(users) != 2:
        return None
    for scale, rest in ((users[0], users[1]), (users[1], users[0])):
        if scale.op_type == "Div":
            if len(scale.inputs) != 2 or scale.inputs[0] != x or not _near(g, scale.inputs[1], 2 ** 0.5):
                continue
        elif scale.op_type != "Mul" or not _near(g, _other(scale, x) or "", 2 ** -0.5):
            continue
        erf = only(scale.outputs[0])
        add = only(erf.outputs[0]) if erf is not None and erf.op_type == "Erf" else None
        if add is None or add.op_type != "Add" or not _near(g, _other(add, erf.outputs[0]) or "", 1.0):
            continue
        if rest.op_type != "Mul" or _other(rest, x) is None:
            continue
        if _other(rest, x) == add.outputs[0]:                  # x * (1 + erf) then * 0.5
            half = only(rest.outputs[0])
            if half is None or half.op_type != "Mul" or not _near(g, _other(half, rest.outputs[0]) or "", 0.5):
                continue
            return [scale, erf, add, rest, half], half.outputs[0]
        if _near(g, _other(rest, x), 0.5):                      # (x * 0.5) * (1 + erf)
            last = only(rest.outputs[0])
            if (last is None or last.op_type != "Mul" or only(add.outputs[0]) is not last
                    or _other(last, rest.outputs[0]) != add.outputs[0]):
                continue
            return [scale, erf, add, rest, last], last.outputs[0]
    return None


def rewrite_to_fixed_point(graph: Graph, rewrite_one: Callable[[Graph, dict, set], bool]) -> Graph:
    """A copy of `graph` with `rewrite_one(g, consumers, graph outputs)` applied until it makes no
    more changes (it returns whether it rewrote something; consumers are recomputed after each)."""
    g = graph.copy()
    outputs = set(g.outputs)
    while rewrite_one(g, g.consumers(), outputs):
        pass
    return g


def in_graph_order(g: Graph, nodes: list) -> tuple:
    """`nodes` (members of g.nodes, by identity) sorted as g lists them: a fused node's originals."""
    position = {id(n): i for i, n in enumerate(g.nodes)}
    return tuple(sorted(nodes, key=lambda n: position[id(n)]))


def splice_fused(g: Graph, head: Node, chain: list, fused: Node) -> bool:
    """Replace `head` and its fused `chain` by `fused` where the chain's last node was (the
    node at the largest index: a Swish's Mul or a Gelu's final Mul may follow other chain
    nodes), when a device kernel supports it. False, and `g` unchanged, otherwise."""
    op = lookup(fused)
    if op is None or op.supports(fused, g, GENERIC_TARGET) is not None:
        return False
    last = max(g.nodes.index(n) for n in chain)
    final = g.nodes[last]
    # kept for the fallback (partition.unfuse) when the fused node cannot lower after all
    fused.unfused = in_graph_order(g, [head] + list(chain))
    g.nodes[last] = fused
    drop = [head] + [n for n in chain if n is not final]
    ids = {id(n) for n in drop}
    g.nodes = [n for n in g.nodes if id(n) not in ids]
    for n in drop:
        g.values.pop(n.outputs[0], None)
    return True


def _fuse_conv_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for idx, conv in enumerate(g.nodes):
        if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
            continue
        chain = []
        out = conv.outputs[0]
        residual = ""
        act = ("", 0.0, 0.0)
        cur = out
        # optional residual Add
        users = consumers.get(cur, [])
        if len(users) == 1 and cur not in outputs and users[0].op_type == "Add" and users[0].domain in ("", "ai.onnx"):
            add = users[0]
            other = add.inputs[1] if add.inputs[0] == cur else add.inputs[0]
            vo, vc = g.values.get(other), g.values.get(add.outputs[0])
            if other != cur and vo is not None and vc is not None and vo.shape is not None \
                    and vo.shape == vc.shape and None not in vo.shape and vo.dtype == np.float32:
                residual = other
                chain.append(add)
                cur = add.outputs[0]
        users = consumers.get(cur, [])
        a = fused_activation(users[0], g) if len(users) == 1 and cur not in outputs else None
        gelu_ = gelu(g, consumers, cur, outputs) if a is None else None
        sw = swish(g, consumers, cur, outputs) if a is None and gelu_ is None else None
        if a is not None:
            act = a
            chain.append(users[0])
            cur = users[0].outputs[0]
        elif gelu_ is not None:  # ConvNeXt's pointwise MLP (exact erf form, activation.h ACT 7)
            act = ("Gelu", 0.0, 0.0)
            chain.extend(gelu_[0])
            cur = gelu_[1]
        elif sw is not None:
            act = ("Swish", sw[2], 0.0)
            chain.extend(sw[0])
            cur = sw[1]
        if not chain:
            continue
        attrs = dict(conv.attrs)
        attrs.update(activation=act[0], alpha=act[1], beta=act[2])
        inputs = [conv.input(0), conv.input(1), conv.input(2), residual]
        fused = Node("FusedConv", conv.name, inputs, [cur], attrs, "clglow", None)
        if splice_fused(g, conv, chain, fused):
            return True
    return False


def fuse_conv(graph: Graph) -> Graph:
    return rewrite_to_fixed_point(graph, _fuse_conv_one)
