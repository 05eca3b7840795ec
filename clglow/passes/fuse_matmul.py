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
  Relu / LeakyRelu / Clip / Sigmoid / HardSigmoid / Tanh / HardSwish, Swish (x * Sigmoid(x)),
  quick-GELU x * Sigmoid(c * x) (CLIP; Swish with alpha c),
  Gelu (the opset-20 op, or the erf form 0.5 * x * (1 + erf(x / sqrt(2))) as exporters write
  it) -> activation
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import GENERIC_TARGET, lookup
from .fuse_conv import fused_activation, gelu, in_graph_order, rewrite_to_fixed_point, scalar_const, splice_fused, swish


def _known(graph: Graph, name: str) -> Optional[tuple]:
    v = graph.values.get(name)
    if v is None or v.shape is None or v.dtype != np.float32 or any(not isinstance(d, int) for d in v.shape):
        return None
    return tuple(v.shape)


def _fuse_matmul_one(g: Graph, consumers: dict, outputs: set) -> bool:
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
            s = scalar_const(g, other) if other != cur else None
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
        a = fused_activation(user, g) if user is not None else None
        gelu_ = gelu(g, consumers, cur, outputs) if a is None else None
        sw = swish(g, consumers, cur, outputs) if a is None and gelu_ is None else None
        if a is not None:
            act = a
            chain.append(user)
            cur = user.outputs[0]
        elif gelu_ is not None:
            act = ("Gelu", 0.0, 0.0)
            chain.extend(gelu_[0])
            cur = gelu_[1]
        elif sw is not None:
            act = ("Swish", sw[2], 0.0)
            chain.extend(sw[0])
            cur = sw[1]
        if not chain:
            continue
        attrs = {"alpha": alpha, "activation": act[0], "act_alpha": act[1], "act_beta": act[2]}
        fused = Node("FusedMatMul", mm.name, [mm.input(0), mm.input(1), bias, residual], [cur], attrs,
                     "clglow", None)
        if splice_fused(g, mm, chain, fused):
            return True
    return False


def fuse_matmul(graph: Graph) -> Graph:
    return rewrite_to_fixed_point(graph, _fuse_matmul_one)


def _fold_transposes_one(g: Graph, consumers: dict, outputs: set) -> bool:
    """One Transpose folding (see fold_transposes); True when it rewrote the graph."""
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    for f in g.nodes:
        plain = f.op_type == "MatMul" and f.domain in ("", "ai.onnx")
        if not (plain or (f.op_type == "FusedMatMul" and f.domain == "clglow")):
            continue
        out = _known(g, f.outputs[0])
        if out is None or not 3 <= len(out) <= 4:
            continue
        r = len(out)
        operands = [_known(g, f.input(0)), _known(g, f.input(1))]
        if any(s is None or len(s) != r for s in operands):
            continue  # the views are batched GEMMs of equal rank (a mixer's [B, C, T] x [T, H] is not)
        attrs = ({"alpha": 1.0, "activation": "", "act_alpha": 0.0, "act_beta": 0.0} if plain
                 else dict(f.attrs))
        inputs = (list(f.inputs) + ["", "", "", ""])[:4]
        drop: list = []
        for slot, key in ((0, "perm_a"), (1, "perm_b")):
            t = producer.get(inputs[slot])
            if (attrs.get(key) or t is None or t.op_type != "Transpose" or t.domain not in ("", "ai.onnx")
                    or consumers.get(t.outputs[0], []) != [f] or t.outputs[0] in outputs
                    or g.const(t.input(0)) is not None):
                continue
            src = _known(g, t.input(0))
            if src is None or len(src) != r or _known(g, t.outputs[0]) is None:
                continue
            perm = [int(p) for p in (t.attr("perm") or list(range(r))[::-1])]
            attrs[key] = perm
            inputs[slot] = t.input(0)
            drop.append(t)
        result = f.outputs[0]
        users = consumers.get(f.outputs[0], [])
        if (not attrs.get("perm_c") and not inputs[3] and len(users) == 1 and f.outputs[0] not in outputs
                and users[0].op_type == "Transpose" and users[0].domain in ("", "ai.onnx")
                and _known(g, users[0].outputs[0]) is not None):
            perm = [int(p) for p in (users[0].attr("perm") or list(range(r))[::-1])]
            if perm[-1] == r - 1:
                attrs["perm_c"] = perm
                result = users[0].outputs[0]
                drop.append(users[0])
        if not drop:
            continue
        fused = Node("FusedMatMul", f.name, inputs, [result], attrs, "clglow", None)
        op = lookup(fused)
        if op is None or op.supports(fused, g, GENERIC_TARGET) is not None:
            continue
        fused.unfused = in_graph_order(g, drop + [f])
        i = g.nodes.index(f)
        g.nodes[i] = fused
        ids = {id(n) for n in drop}
        g.nodes = [n for n in g.nodes if id(n) not in ids]
        for n in drop:
            if n.outputs[0] != result:
                g.values.pop(n.outputs[0], None)
        if result != f.outputs[0]:
            g.values.pop(f.outputs[0], None)
        return True
    return False


def fold_transposes(graph: Graph) -> Graph:
    """Transposes around a batched MatMul become strides of the GEMM: a transformer's head
    split (q, k, v: [B, S, H, D] -> [B, H, S, D]) and merge (the attention context back to
    [B, S, H, D]). An operand produced by a Transpose used only there is read (or packed)
    through the transposed strides (attribute perm_a / perm_b of a clglow.FusedMatMul, input
    the Transpose's input); a result consumed only by a Transpose that keeps the last axis is
    stored through its strides (perm_c, output the Transpose's output). Static shapes of rank 3
    or 4 (both operands and the result), float32; a result with a residual is not transposed."""
    return rewrite_to_fixed_point(graph, _fold_transposes_one)
