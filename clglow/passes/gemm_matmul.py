"""Gemm with constant weights -> MatMul (+ Mul alpha) (+ Add bias), for fuse_matmul to fuse.

Exporters write a linear layer as Gemm (GPT-2's Conv1D, torch.nn.Linear on 2-D input), often
between two Reshapes that flatten the token axes and restore them: Reshape -> Gemm -> Reshape
-> Add(residual). As a Gemm its epilogue takes only the bias, the residual Add stays a launch
of its own, and the one-row product of a decode step takes gemm.cl's tiles. As a MatMul on the
unflattened tensor (MatMul broadcasts its leading axes) fuse_matmul folds the bias, the
residual and an activation into one clglow.FusedMatMul, and a single row takes the GEMV path
(lower/gemv.py).

Rewritten: transA = 0, B a constant float32 matrix (transB folds into a transposed copy),
C absent or a per-column vector ([N], [1, N], [1], scalar; beta folds into a constant C; a
live C only with beta = 1). The Reshapes around it are dropped when the first one's input has
a static last axis K, and the second restores exactly that input's leading axes.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node, Value


def _static(g: Graph, name: str) -> Optional[tuple]:
    v = g.values.get(name)
    if v is None or v.shape is None or any(not isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def _bias_ok(g: Graph, node: Node, n: int, beta: float) -> Optional[str]:
    """The bias input to add (a constant scaled by beta when needed), '' when none, None when
    the Gemm's C is not a per-column vector this rewrite handles."""
    c = node.input(2)
    if not c or beta == 0.0:
        return ""
    shape = _static(g, c)
    if shape is None or len(shape) > 2 or any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, n)):
        return None
    if beta == 1.0:
        return c
    const = g.const(c)
    if const is None:
        return None
    name = g.unique_name(c + "_beta")
    arr = (np.asarray(const, np.float32) * np.float32(beta)).astype(np.float32)
    g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
    return name


def _weights(g: Graph, node: Node) -> Optional[tuple]:
    """(B input name as K x N, K, N) for a constant float32 B, transposed copy when transB."""
    b = g.const(node.input(1))
    if b is None or b.dtype != np.float32 or b.ndim != 2:
        return None
    if not int(node.attr("transB", 0)):
        return node.input(1), b.shape[0], b.shape[1]
    name = g.unique_name(node.input(1) + "_T")
    arr = np.ascontiguousarray(b.T)
    g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
    return name, arr.shape[0], arr.shape[1]


def _unflattened(g: Graph, node: Node, k: int, n: int, producers: dict, consumers: dict,
                 outputs: set) -> Optional[tuple]:
    """(X, Y, dropped Reshapes) when the Gemm sits in Reshape(X -> [M, K]) -> Gemm -> Reshape(->
    X's leading axes + [N]) with X's last axis K; else None."""
    first = producers.get(node.input(0))
    if (first is None or first.op_type != "Reshape" or consumers.get(node.input(0), []) != [node]
            or node.input(0) in outputs):
        return None
    xs = _static(g, first.input(0))
    users = consumers.get(node.outputs[0], [])
    if xs is None or len(xs) < 2 or xs[-1] != k or len(users) != 1 or node.outputs[0] in outputs:
        return None
    second = users[0]
    if second.op_type != "Reshape" or _static(g, second.outputs[0]) != xs[:-1] + (n,):
        return None
    return first.input(0), second.outputs[0], [first, second]


def _rewrite(g: Graph, node: Node, producers: dict, consumers: dict, outputs: set) -> Optional[tuple]:
    """(replacement nodes, nodes dropped besides `node`) or None when `node` stays a Gemm."""
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or int(node.attr("transA", 0)):
        return None
    av, out = g.values.get(node.input(0)), g.values.get(node.outputs[0])
    a_shape = None if av is None or av.shape is None else tuple(av.shape)
    if (a_shape is None or len(a_shape) != 2 or not isinstance(a_shape[1], int) or out is None
            or out.dtype != np.float32 or av.dtype != np.float32):
        return None
    w = _weights(g, node)
    if w is None:
        return None
    b_name, k, n = w
    bias = _bias_ok(g, node, n, float(node.attr("beta", 1.0)))
    if bias is None or a_shape[1] != k:
        return None
    alpha = float(node.attr("alpha", 1.0))
    if not isinstance(a_shape[0], int):  # rows known at run time only: no fusion can follow, one node
        fused = Node("FusedMatMul", node.name, [node.input(0), b_name, bias], list(node.outputs),
                     {"alpha": alpha, "activation": "", "act_alpha": 0.0, "act_beta": 0.0}, "clglow", None)
        fused.unfused = (node,)
        return [fused], []
    x, y, dropped = node.input(0), node.outputs[0], []
    flat = _unflattened(g, node, k, n, producers, consumers, outputs)
    if flat is not None:
        x, y, dropped = flat
    y_shape = g.values[y].shape
    steps = [("Mul", alpha)] if alpha != 1.0 else []
    if bias:
        steps.append(("Add", bias))
    nodes, cur = [], x
    for i, (op, arg) in enumerate([("MatMul", b_name)] + steps):
        last = i == len(steps)
        dst = y if last else g.unique_name(f"{node.outputs[0]}_{op.lower()}")
        if not last:
            g.values[dst] = Value(dst, np.dtype(np.float32), y_shape)
        if op == "Mul":
            arg = g.unique_name(f"{node.name}_alpha")
            g.values[arg] = Value(arg, np.dtype(np.float32), (), np.array(alpha, np.float32))
        nodes.append(Node(op, node.name if op == "MatMul" else f"{node.name}/{op.lower()}", [cur, arg], [dst]))
        cur = dst
    return nodes, dropped


def gemm_to_matmul(graph: Graph) -> Graph:
    """Every Gemm that fits (see the module doc) as MatMul (+ Mul) (+ Add)."""
    g = graph.copy()
    producers, consumers, outputs = g.producers(), g.consumers(), set(g.outputs)
    dropped_ids: set = set()
    new_nodes: list = []
    replaced: dict = {}
    for node in g.nodes:
        r = _rewrite(g, node, producers, consumers, outputs)
        if r is not None:
            replaced[id(node)] = r[0]
            dropped_ids.update(id(d) for d in r[1])
            kept = set(r[0][-1].outputs)
            for o in [o for d in [node] + r[1] for o in d.outputs] + [node.input(0)] * bool(r[1]):
                if o not in kept:
                    g.values.pop(o, None)
    for node in g.nodes:
        if id(node) in dropped_ids:
            continue
        new_nodes.extend(replaced.get(id(node), [node]))
    g.nodes = new_nodes
    return g
