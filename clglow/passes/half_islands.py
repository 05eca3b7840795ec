"""A float16 or bfloat16 model's nodes whose kernels take float32 only: computed in float32
between Casts.

Why: a model exported in float16 declares its tensors float16. Most kernels read and write half
storage (their HalfIO, lower/base.py), but some take float32 only (ConvTranspose, Gemm's and
others' float16 weights). No kernel computes on bfloat16 (an LLM exported in it): there every
arithmetic node is such an island, its bfloat16 values moved by the bit-moving kernels and
converted by Cast's (lower/castlut.py, round to nearest even as onnx.reference does). Judged per target, such a node is rewritten so that its float16
constants are float32 copies (exact) and, if that is not enough, its float16 activations are
Cast to float32 before it and its float16 outputs Cast back after it: the node runs on OpenCL in
fp32 arithmetic (as the half-storage kernels do) instead of on the host, and the model's types
hold at every edge. A node that the float32 view does not make supported is left as it is (the
host fallback, as before).

Runs after the load-time passes, before the storage precision (passes/precision.py), on the
session's target.
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
from onnx import TensorProto

from ..ir import Graph, Node, Value
from ..target import Target

log = logging.getLogger(__name__)

F32 = np.dtype(np.float32)


# The narrow float types widened here -> the TensorProto type a Cast back to them names
_NARROW = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


def _narrow(graph: Graph, name: str) -> Optional[int]:
    """The TensorProto type of value `name` when it is float16 or bfloat16, else None."""
    v = graph.values.get(name) if name else None
    return None if v is None or v.dtype is None else _NARROW.get(np.dtype(v.dtype).name)


def _is_narrow(graph: Graph, name: str) -> bool:
    return _narrow(graph, name) is not None


def _refusal(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Why the node's kernel does not cover it (None: it does; "" when no kernel is registered)."""
    from ..lower import base as lower_base  # the registry, filled by importing clglow.lower

    op = lower_base.lookup(node)
    if op is None:
        return ""
    try:
        return op.supports(node, graph, target)
    except Exception:  # a supports() that cannot judge this node: as refused
        return "not judged"


class _Rewriter:
    """Adds float32 twins of float16 values to a graph: constants converted once, activations
    through one Cast each (shared by every node that needs it)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.twins: dict = {}
        self.casts: list = []  # Cast nodes to put before the node being rewritten

    def _name(self, base: str) -> str:
        name, i = base, 1
        while name in self.graph.values:
            name, i = f"{base}_{i}", i + 1
        return name

    def f32_of(self, name: str, constants_only: bool) -> Optional[str]:
        if name in self.twins:
            return self.twins[name]
        v = self.graph.values[name]
        if v.const is None and constants_only:
            return None
        twin = self._name(f"{name}/f32")
        if v.const is not None:
            arr = np.asarray(v.const, F32)
            self.graph.values[twin] = Value(twin, F32, tuple(arr.shape), arr)
        else:
            self.graph.values[twin] = Value(twin, F32, v.shape)
            self.casts.append(Node("Cast", self._name(f"{twin}_cast"), [name], [twin], {"to": TensorProto.FLOAT}))
        self.twins[name] = twin
        return twin


def _try(node: Node, graph: Graph, target: Target, rw: _Rewriter, whole: bool) -> Optional[list]:
    """The nodes replacing `node` (Casts, the node on float32, Casts back), or None when the
    float32 view does not make the kernel cover it; `whole`: activations and outputs too, not
    only the float16 constants."""
    mark = (dict(rw.twins), len(rw.casts), set(graph.values))
    inputs = [(rw.f32_of(n, not whole) or n) if _is_narrow(graph, n) else n for n in node.inputs]
    outputs, after = list(node.outputs), []
    if whole:
        for j, o in enumerate(node.outputs):
            if _is_narrow(graph, o) and graph.values[o].const is None:
                wide = rw._name(f"{o}/f32")
                graph.values[wide] = Value(wide, F32, graph.values[o].shape)
                outputs[j] = wide
                after.append(Node("Cast", rw._name(f"{o}_cast"), [wide], [o], {"to": _narrow(graph, o)}))
    trial = Node(node.op_type, node.name, inputs, outputs, dict(node.attrs), node.domain, None, node.unfused)
    if inputs != node.inputs or outputs != node.outputs:
        if _refusal(trial, graph, target) is None:
            made = rw.casts[mark[1]:]
            return made + [trial] + after
    rw.twins = mark[0]  # undo: the values and Casts this try added
    del rw.casts[mark[1]:]
    for k in set(graph.values) - mark[2]:
        del graph.values[k]
    return None


def widen_half_nodes(graph: Graph, target: Target) -> Graph:
    """`graph` with each float16 node its kernel refuses rewritten onto float32 where that makes
    the kernel cover it (see the module doc): a copy, or `graph` itself when nothing is float16.
    (A fused node is left alone: its original nodes, should it fall back, write its outputs.)"""
    if not any(v.dtype is not None and np.dtype(v.dtype).name in _NARROW for v in graph.values.values()):
        return graph
    graph = graph.copy()
    rw = _Rewriter(graph)
    nodes: list = []
    widened = 0
    for node in graph.nodes:
        io = [n for n in list(node.inputs) + list(node.outputs) if n]
        why = None
        if node.op_type != "Cast" and not node.unfused and any(_is_narrow(graph, n) for n in io):
            why = _refusal(node, graph, target)
        if not why:  # covered as it is, no kernel at all, or nothing float16
            nodes.append(node)
            continue
        made = _try(node, graph, target, rw, whole=False) or _try(node, graph, target, rw, whole=True)
        if made is None:
            nodes.append(node)
            continue
        nodes.extend(made)
        rw.casts.clear()
        widened += 1
    if widened:
        log.info("float16 / bfloat16 model: %d node(s) computed in float32 between Casts (their kernels take float32)", widened)
    graph.nodes = nodes
    return graph


__all__ = ["widen_half_nodes"]
