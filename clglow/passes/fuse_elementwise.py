"""Chains of elementwise ops -> one clglow.FusedElementwise node.

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

Attention-mask preprocessing mixes int64, bool and float values (Cast, Equal, Not, Where, integer
Sub / Mul); those ops fuse too, each only for the dtypes its typed macro computes as ONNX does,
and the group then runs as the typed kernel. Zero-copy views (Reshape, Flatten, Squeeze,
Unsqueeze) between two members fold in when they change the shape only by leading ones.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from ..errors import InvalidModel
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


# Ops over int64 / int32 / bool values (an attention mask's Cast / Equal / Where chain; fe_ops.h)
_I64, _I32, _BOOL, _F32 = (np.dtype(t) for t in (np.int64, np.int32, np.bool_, np.float32))
_INTS = {_I64, _I32}
_VALUES = {_F32, _I64, _I32, _BOOL}
CASTS = {_F32: "CAST_F", _I64: "CAST_L", _I32: "CAST_I", _BOOL: "CAST_B"}
COMPARE = {"Equal": "EQ", "Less": "LT", "Greater": "GT"}
LOGIC = {"Not": "NOT", "And": "AND", "Or": "OR"}
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}  # zero-copy: only the shape changes


def _dtypes(node: Node, graph: Graph) -> Optional[list]:
    """The dtypes of the node's inputs then its output, when all are known with a shape."""
    out = []
    for name in list(node.inputs) + list(node.outputs):
        v = graph.values.get(name) if name else None
        if v is None or v.dtype is None or v.shape is None:
            return None
        out.append(np.dtype(v.dtype))
    return out


def _typed_fusable(node: Node, graph: Graph) -> bool:
    """Whether `node` is one of the typed ops over dtypes the kernel computes as ONNX does
    (integer Add / Sub / Mul / Neg exact within int64; no integer Div: its rounding and x / 0)."""
    dts = _dtypes(node, graph)
    if dts is None or len(node.outputs) != 1:
        return False
    *ins, out = dts
    op = node.op_type
    if op == "Cast":
        return len(ins) == 1 and ins[0] in _VALUES and out in _VALUES
    if op in ("Add", "Sub", "Mul", "Neg"):
        return len(ins) == (1 if op == "Neg" else 2) and out in _INTS and all(d == out for d in ins)
    if op in COMPARE:
        return (len(ins) == 2 and ins[0] == ins[1] and out == _BOOL
                and ins[0] in (_VALUES if op == "Equal" else _VALUES - {_BOOL}))
    if op in LOGIC:
        return len(ins) == (1 if op == "Not" else 2) and all(d == _BOOL for d in dts)
    if op == "Where":
        return len(ins) == 3 and ins[0] == _BOOL and ins[1] == ins[2] == out and out in _VALUES
    return False


def _int_literal(graph: Graph, name: str) -> Optional[str]:
    """An int64 / int32 / bool one-element constant as the expression's LITL / LITI token."""
    c = graph.const(name) if name else None
    if c is None or np.asarray(c).size != 1:
        return None
    c = np.asarray(c)
    if c.dtype not in (_I64, _I32, _BOOL) or (c.dtype == _I64 and int(c.reshape(-1)[0]) == -2 ** 63):
        return None
    return f"LIT{'L' if c.dtype == _I64 else 'I'}({int(c.reshape(-1)[0])})"


def _fusable(node: Node, graph: Graph) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    if _typed_fusable(node, graph):
        return True
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


def _strip(graph: Graph, name: str) -> Optional[tuple]:
    """The shape of `name` without its leading ones (equal: the same broadcast); None if unknown."""
    v = graph.values.get(name)
    if v is None or v.shape is None or any(not isinstance(d, int) for d in v.shape):
        return None
    shape = list(v.shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    return tuple(shape)


def _typed_text(node: Node, graph: Graph, args: list) -> Optional[str]:
    """The typed macro call of `node` over its arguments' texts; None for a float32 op, whose
    text the float macros write (Add, Sub, Mul and Neg are the same macros for integers)."""
    op = node.op_type
    if op == "Cast":
        return f"{CASTS[np.dtype(graph.values[node.outputs[0]].dtype)]}({args[0]})"
    macro = COMPARE.get(op) or LOGIC.get(op) or ("WHERE" if op == "Where" else None)
    return f"{macro}({','.join(args)})" if macro else None


def output_shape(node: Node, graph: Graph) -> dict:
    """{output: (dtype, shape)} of a FusedElementwise with `to` and `rank` attributes (typed, or
    with views folded in; shapes.infer_node's rule for it): the inputs' broadcast shape without
    its leading ones, padded with ones to `rank`, of dtype `to`; {} while an input is not static."""
    shapes = []
    for name in node.inputs:
        v = graph.values.get(name)
        if v is None or not v.is_static:
            return {}
        shapes.append(tuple(v.shape))
    try:
        shape = list(np.broadcast_shapes(*shapes))
    except ValueError:
        raise InvalidModel(f"FusedElementwise inputs {shapes} do not broadcast", node=node.name) from None
    while shape and shape[0] == 1:
        shape.pop(0)
    rank = int(node.attrs["rank"])
    if rank < len(shape):
        raise InvalidModel(f"FusedElementwise rank {rank} is below its inputs' {len(shape)}", node=node.name)
    return {node.outputs[0]: (helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])), (1,) * (rank - len(shape)) + tuple(shape))}


def fuse_elementwise(graph: Graph) -> Graph:
    g = graph.copy()
    outputs = set(g.outputs)
    consumers = g.consumers()
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    fusable = {id(n) for n in g.nodes if _fusable(n, g)}
    position = {id(n): i for i, n in enumerate(g.nodes)}  # a fused node keeps its members in graph order

    def single(name: str) -> bool:
        return name not in outputs and len(consumers.get(name, [])) == 1

    def inner(name: str) -> Optional[tuple]:
        """(producer, views between) of `name` when it can be folded into its single, fusable
        consumer's expression, directly or through zero-copy views that change the shape only by
        leading ones (broadcast to the result either way: a mask's Cast -> Reshape -> Where)."""
        if not single(name) or id(consumers[name][0]) not in fusable:
            return None
        views, cur = [], name
        while (cur in producer and producer[cur].op_type in VIEWS and producer[cur].domain in ("", "ai.onnx")
               and single(producer[cur].inputs[0])):
            views.append(producer[cur])
            cur = producer[cur].inputs[0]
        p = producer.get(cur)
        if p is None or id(p) not in fusable or not single(cur):
            return None
        if views and (_strip(g, cur) is None or _strip(g, cur) != _strip(g, name)):
            return None
        return p, views

    taken = {id(r[0]) for n in g.nodes if id(n) in fusable for r in map(inner, n.inputs) if r is not None}

    new_nodes: list = []
    absorbed: set = set()
    groups: dict = {}  # id(root) -> (fused node, member ids)
    # roots: fusable nodes whose output leaves the group (several or non-fusable consumers, graph output)
    for node in g.nodes:
        if id(node) not in fusable or id(node) in taken:
            continue
        ext: list = []
        members: list = []

        def expr(name: str) -> Optional[str]:
            p = inner(name)
            lit = _scalar(g, name) if p is None else None
            if lit is not None:  # a scalar constant: a literal of the expression, not an input
                return literal(lit)
            ilit = _int_literal(g, name) if p is None else None
            if ilit is not None:
                return ilit
            if p is None:
                if name not in ext:
                    ext.append(name)
                return f"X{ext.index(name)}"
            members.extend(p[1])
            return build(p[0])

        def build(n: Node) -> Optional[str]:
            members.append(n)
            if n.op_type == "Pow":
                return f"{POWERS[_scalar(g, n.inputs[1])]}({expr(n.inputs[0])})"
            args = [expr(i) for i in n.inputs]
            typed = _typed_text(n, g, args) if _typed_fusable(n, g) else None
            if typed is not None:
                return typed
            if n.op_type in UNARY:
                return f"{UNARY[n.op_type]}({args[0]})"
            return f"{BINARY[n.op_type]}({args[0]},{args[1]})"

        text = build(node)
        if sum(m.op_type not in VIEWS for m in members) < 2 or not ext or len(ext) > MAX_INPUTS:
            continue
        attrs = {"expr": text}
        if any(m.op_type in VIEWS or _typed_fusable(m, g) for m in members):
            # the output's dtype and rank, which its inputs' broadcast does not give (output_shape)
            attrs.update(to=int(helper.np_dtype_to_tensor_dtype(np.dtype(g.values[node.outputs[0]].dtype))),
                         rank=len(g.values[node.outputs[0]].shape))
        fused = Node("FusedElementwise", node.name, list(ext), [node.outputs[0]], attrs, "clglow", None)
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
