"""MatMul + scalar scale + bias Add + residual Add + activation -> one clglow.FusedMatMul node.

Transformer layers compute x @ W + b (+ the residual stream), and attention scores
(q @ k^T) * scale + mask: each is a GEMM followed by one or two broadcasting elementwise
passes over its output. Fused, the GEMM epilogue applies them while the tile is in registers
(gemm.cl: alpha, a per-column bias, a residual of the output's shape, an activation) and the
elementwise launches disappear.

Patterns, in graph order after the MatMul (each step optional, each intermediate consumed once
and not a graph output, all float32):
  Mul by a constant scalar   -> alpha
  Add of a per-column vector -> bias  (shape [N] or [1, ..., 1, N], N = the last output dim;
                                       a live tensor too, e.g. an attention mask)
  Add of a same-shape tensor -> residual
  Relu / LeakyRelu / Clip / Sigmoid / HardSigmoid / Tanh -> activation
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from .fuse_conv import _activation


def _scalar_const(graph: Graph, name: str) -> Optional[float]:
    c = graph.const(name)
    if c is None:
        return None
    c = np.asarray(c)
    if c.size != 1 or c.dtype != np.float32:
        return None
    return float(c.reshape(-1)[0])


def _known(graph: Graph, name: str) -> Optional[tuple]:
    v = graph.values.get(name)
    if v is None or v.shape is None or v.dtype != np.float32 or any(not isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def fuse_matmul(graph: Graph) -> Graph:
    from ..lower.base import lookup

    g = graph.copy()
    outputs = set(g.outputs)
    changed = True
    while changed:
        changed = False
        consumers = g.consumers()
        for mm in g.nodes:
            if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
                continue
            sa, sb, out_shape = _known(g, mm.input(0)), _known(g, mm.input(1)), _known(g, mm.outputs[0])
            if sa is None or sb is None or out_shape is None or len(sa) < 2 or len(sb) < 2:
                continue
            n = out_shape[-1]
            chain: list = []
            cur = mm.outputs[0]
            alpha, bias, residual, act = 1.0, "", "", ("", 0.0, 0.0)

            def single_user() -> Optional[Node]:
                users = consumers.get(cur, [])
                if len(users) != 1 or cur in outputs or users[0].domain not in ("", "ai.onnx"):
                    return None
                return users[0]

            user = single_user()
            if user is not None and user.op_type == "Mul" and len(user.inputs) == 2:
                other = user.inputs[1] if user.inputs[0] == cur else user.inputs[0]
                s = _scalar_const(g, other) if other != cur else None
                if s is not None and _known(g, user.outputs[0]) == out_shape:
                    alpha = s
                    chain.append(user)
                    cur = user.outputs[0]
            for _ in range(2):
                user = single_user()
                if user is None or user.op_type != "Add" or len(user.inputs) != 2:
                    break
                other = user.inputs[1] if user.inputs[0] == cur else user.inputs[0]
                so = _known(g, other)
                if other == cur or so is None or _known(g, user.outputs[0]) != out_shape:
                    break
                if not bias and len(so) >= 1 and so[-1] in (n, 1) and all(d == 1 for d in so[:-1]):
                    bias = other
                elif not residual and so == out_shape:
                    residual = other
                else:
                    break
                chain.append(user)
                cur = user.outputs[0]
            user = single_user()
            if user is not None:
                a = _activation(user, g)
                if a is not None:
                    act = a
                    chain.append(user)
                    cur = user.outputs[0]
            if not chain:
                continue
            attrs = {"alpha": alpha, "activation": act[0], "act_alpha": act[1], "act_beta": act[2]}
            fused = Node("FusedMatMul", mm.name, [mm.input(0), mm.input(1), bias, residual], [cur], attrs,
                         "clglow", None)
            op = lookup(fused)
            if op is None or op.supports(fused, g) is not None:
                continue
            last = g.nodes.index(chain[-1])
            g.nodes[last] = fused
            drop = {id(mm)} | {id(x) for x in chain[:-1]}
            g.nodes = [x for x in g.nodes if id(x) not in drop]
            for x in [mm] + chain[:-1]:
                g.values.pop(x.outputs[0], None)
            changed = True
            break
    return g
