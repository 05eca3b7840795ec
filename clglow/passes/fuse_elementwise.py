"""Chains of float32 elementwise ops -> one clglow.FusedElementwise node.

MobileNet's SE gates (Sigmoid, Mul), BERT's GELU (Div, Erf, Add, Mul, Mul) and bias/scale
chains are each a run of memory-bound launches; fused, the intermediates stay in registers and
one launch reads the inputs once. A group is a tree of fusable nodes: every intermediate value
has exactly one consumer (inside the group) and is not a graph output, so the expression never
recomputes anything. Broadcasting commutes with elementwise ops, so evaluating the whole tree at
each element of the final output, every external input broadcast to that shape, is exact.

The node keeps the expression as a string attribute over its inputs X0..X{n-1}, e.g.
``MUL(X0,SIGMOID(X0))``; the macros are those of kernels_cl/fused_elementwise.cl. Scalar float32
constants are literals of the expression (LIT(bits)), not inputs: GPT-2's tanh GELU (x * 0.5 *
(1 + tanh(0.7978846 * (x + 0.044715 * x^3))), eight nodes) reads one input.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import GENERIC_TARGET, lookup

# ONNX op -> kernel macro; ops whose float32 semantics the macros reproduce exactly
UNARY = {"Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Exp": "EXP", "Log": "LOG", "Abs": "ABS",
         "Neg": "NEG", "Sqrt": "SQRT", "Reciprocal": "RECIP", "Erf": "ERF"}
BINARY = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV"}
MAX_INPUTS = 4  # kernel arguments X0..X3
# Pow by these constant exponents, as products (Pow(x, 2) is x * x exactly; Pow(x, 3) within an
# ulp of powf): GPT-2's tanh GELU and RMSNorm's mean of squares
POWERS = {2.0: "SQUARE", 3.0: "CUBE"}


def _scalar(graph: Graph, name: str) -> Optional[float]:
    """The value of a one-element float32 constant, else None."""
    c = graph.const(name) if name else None
    if c is None or np.asarray(c).size != 1 or np.asarray(c).dtype != np.float32:
        return None
    return float(np.asarray(c).reshape(-1)[0])


def literal(value: float) -> str:
    """A float32 constant as the expression's LIT(bits) token (exact: its bit pattern)."""
    return f"LIT({int(np.array(value, np.float32).view(np.uint32)):08x})"


def _fusable(node: Node, graph: Graph) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Pow":
        if len(node.inputs) != 2 or _scalar(graph, node.inputs[1]) not in POWERS:
            return False
    elif node.op_type not in UNARY and node.op_type not in BINARY:
        return False
    elif len(node.inputs) != (1 if node.op_type in UNARY else 2):
        return False
    if len(node.outputs) != 1:
        return False
    for name in list(node.inputs) + list(node.outputs):
        v = graph.values.get(name) if name else None
        if v is None or v.dtype is None or np.dtype(v.dtype) != np.float32 or v.shape is None:
            return False
    return True


def fuse_elementwise(graph: Graph) -> Graph:
    g = graph.copy()
    outputs = set(g.outputs)
    consumers = g.consumers()
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    fusable = {id(n) for n in g.nodes if _fusable(n, g)}
    position = {id(n): i for i, n in enumerate(g.nodes)}  # a fused node keeps its members in graph order

    def inner(name: str) -> Optional[Node]:
        """The producer of `name` when it can be folded into its single, fusable consumer's expression."""
        p = producer.get(name)
        users = consumers.get(name, [])
        if p is None or id(p) not in fusable or name in outputs or len(users) != 1 or id(users[0]) not in fusable:
            return None
        return p

    new_nodes: list = []
    absorbed: set = set()
    groups: dict = {}  # id(root) -> (fused node, member ids)
    # roots: fusable nodes whose output leaves the group (several or non-fusable consumers, graph output)
    for node in g.nodes:
        if id(node) not in fusable or inner(node.outputs[0]) is not None:
            continue
        ext: list = []
        members: list = []

        def expr(name: str) -> Optional[str]:
            p = inner(name)
            lit = _scalar(g, name) if p is None else None
            if lit is not None:  # a scalar constant: a literal of the expression, not an input
                return literal(lit)
            if p is None:
                if name not in ext:
                    ext.append(name)
                return f"X{ext.index(name)}"
            return build(p)

        def build(n: Node) -> Optional[str]:
            members.append(n)
            if n.op_type == "Pow":
                return f"{POWERS[_scalar(g, n.inputs[1])]}({expr(n.inputs[0])})"
            if n.op_type in UNARY:
                a = expr(n.inputs[0])
                return f"{UNARY[n.op_type]}({a})"
            a, b = expr(n.inputs[0]), expr(n.inputs[1])
            return f"{BINARY[n.op_type]}({a},{b})"

        text = build(node)
        if len(members) < 2 or not ext or len(ext) > MAX_INPUTS:
            continue
        fused = Node("FusedElementwise", node.name, list(ext), [node.outputs[0]], {"expr": text}, "clglow", None)
        op = lookup(fused)
        if op is None or op.supports(fused, g, GENERIC_TARGET) is not None:
            continue
        fused.unfused = tuple(sorted(members, key=lambda n: position[id(n)]))
        groups[id(node)] = fused
        absorbed.update(id(m) for m in members if m is not node)
    if not groups:
        return g
    for node in g.nodes:
        if id(node) in absorbed:
            for o in node.outputs:
                g.values.pop(o, None)
            continue
        new_nodes.append(groups.get(id(node), node))
    g.nodes = new_nodes
    return g


__all__ = ["fuse_elementwise", "UNARY", "BINARY", "MAX_INPUTS"]
