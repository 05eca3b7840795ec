"""Storage precision: which float32 tensors a session keeps in half (SessionOptions.precision).

With precision "fp16" every float32 activation that its producer can write as half and some
consumer can read as half (the lowerings' `HalfIO` declarations, lower/base.py) is stored as
float16, and every float32 constant of at least MIN_CONST_ELEMENTS elements that only such
consumers read is converted once here (clipped to the half range; the overflows are counted and
logged). Where a half tensor meets a consumer that reads float32 only (a kernel without half
storage, the host fallback, shape math), one Cast to float32 is inserted before it; graph inputs
and outputs keep the model's types (an output stored as half gets a Cast at the edge). The
kernels compute in fp32 on half storage (kernels_cl/storage.h), so only storage rounds.

"auto" resolves to fp16 where the target profile says half storage pays (`half_pays`), else to
fp32; "fp32" leaves the graph as it is.

Example::

    graph = apply_precision(graph, resolve_precision("fp16", target), target)
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
from onnx import TensorProto

from ..config import PRECISIONS
from ..ir import Graph, Node, Value
from ..target import Target

log = logging.getLogger(__name__)

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
HALF_MAX = float(np.finfo(np.float16).max)
# Smaller float constants stay float32: scalars such as LayerNorm's epsilon or a mask's fill
# would round badly or flush to zero in half, and converting them saves nothing.
MIN_CONST_ELEMENTS = 16


def half_pays(target: Target) -> bool:
    """The profile's policy for precision="auto": half storage where the device computes in half
    (cl_khr_fp16) and the family's kernels are bound by memory traffic (GPUs). A CPU-family
    device converts every load and store, so it keeps float32."""
    return target.has_fp16 and not target.is_cpu_family


def resolve_precision(requested: Optional[str], target: Target) -> str:
    """"fp32" or "fp16": `requested` ("fp32", "fp16", "auto" or None = "fp32") on `target`."""
    requested = requested or "fp32"
    if requested not in PRECISIONS:
        raise ValueError(f"unknown precision {requested!r}; choose one of {', '.join(PRECISIONS)}")
    if requested == "auto":
        return "fp16" if half_pays(target) else "fp32"
    return requested


def _capability(node: Node, graph: Graph, target: Target):
    """The node's HalfIO when its lowering declares one and its kernel covers the node on
    `target` (judged on the float32 graph), else None: a refused fused node runs as its originals,
    the host fallback as onnx.reference, both on float32."""
    from ..lower import base as lower_base  # the registry, filled by importing clglow.lower

    op = lower_base.lookup(node)
    if op is None or op.half is None:
        return None
    try:
        if op.supports(node, graph, target) is not None:
            return None
    except Exception:  # a supports() that cannot judge this node: leave it in float32
        log.debug("precision: %s (%s) not judged; float32", node.name, node.op_type, exc_info=True)
        return None
    return op.half


def _reads_half(node: Node, name: str, caps: dict) -> bool:
    """Whether `node` can read value `name` as half at every position it takes it."""
    cap = caps.get(node.name)
    if cap is None:
        return False
    return all(i in cap.inputs for i, n in enumerate(node.inputs) if n == name)


def _decide(graph: Graph, caps: dict, consts: set) -> set:
    """The float32 activations to store in half, in graph order (`consts`: the constants that will be)."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    half: set = set()
    for node in graph.nodes:
        cap = caps.get(node.name)
        if cap is None:
            continue
        for j, name in enumerate(node.outputs):
            v = graph.values.get(name) if name else None
            if v is None or j not in cap.outputs or v.dtype is None or np.dtype(v.dtype) != F32 or v.is_const:
                continue
            if cap.follows is not None:
                if node.input(cap.follows) in half or node.input(cap.follows) in consts:
                    half.add(name)
            elif name not in outputs and any(_reads_half(c, name, caps) for c in consumers.get(name, [])):
                half.add(name)
    return half


def _half_constants(graph: Graph, caps: dict) -> list:
    """The float32 constants (MIN_CONST_ELEMENTS or more) that only half-capable inputs read."""
    consumers = graph.consumers()
    out = []
    for name, v in graph.values.items():
        if v.const is None or v.const.dtype != F32 or v.const.size < MIN_CONST_ELEMENTS or name in graph.outputs:
            continue
        users = consumers.get(name, [])
        if users and all(_reads_half(c, name, caps) for c in users):
            out.append(name)
    return out


def _to_half(name: str, arr: np.ndarray) -> np.ndarray:
    """`arr` as float16, clipped to the half range (the count of clipped values logged)."""
    over = int(np.count_nonzero(np.abs(arr) > HALF_MAX) - np.count_nonzero(np.isinf(arr)))
    if over:
        log.warning("precision fp16: %d values of constant %r beyond the half range, clipped to +-%g",
                    over, name, HALF_MAX)
    return np.clip(arr, -HALF_MAX, HALF_MAX).astype(F16)


def _cast_node(graph: Graph, src: str, dst: str, to: int, dtype: np.dtype, shape) -> Node:
    graph.values[dst] = Value(dst, dtype, shape)
    return Node("Cast", graph.unique_name(f"{dst}_cast"), [src], [dst], {"to": to})


def _wants(node: Node, i: int, name: str, caps: dict, half: set) -> Optional[bool]:
    """The storage input i of `node` needs: True half, False float32, None either (as stored).
    Inputs of a node whose outputs follow an input (views, moves) are all stored as the outputs."""
    cap = caps.get(node.name)
    if cap is None or i not in cap.inputs:
        return False
    if cap.follows is None:
        return None
    return any(o in half for o in node.outputs if o)


def _is_f32(graph: Graph, name: str) -> bool:
    v = graph.values.get(name)
    return v is not None and v.dtype is not None and np.dtype(v.dtype) == F32


def _insert_casts(graph: Graph, caps: dict, half: set, consts: set) -> None:
    """A Cast before each input stored otherwise than its consumer reads it (one per value and
    type), and at each graph output stored as half (its producer then writes a renamed half value)."""
    nodes: list = []
    cast: dict = {}
    renamed = {}
    for name in graph.outputs:
        if name in half:
            renamed[name] = graph.unique_name(f"{name}__fp16")
    for name, hname in renamed.items():
        v = graph.values.pop(name)
        graph.values[hname] = Value(hname, v.dtype, v.shape)
        half.discard(name)
        half.add(hname)
    for node in graph.nodes:
        node.inputs = [renamed.get(n, n) for n in node.inputs]
        node.outputs = [renamed.get(o, o) for o in node.outputs]
        for i, n in enumerate(node.inputs):
            stored = n in half or n in consts  # the model's own float16 values are not this pass's
            if not n or not (stored or _is_f32(graph, n)):
                continue
            want = _wants(node, i, n, caps, half)
            if want is None or want == stored:
                continue
            if (n, want) not in cast:
                dst = graph.unique_name(f"{n}__{'fp16' if want else 'fp32'}")
                to, dt = (TensorProto.FLOAT16, F16) if want else (TensorProto.FLOAT, F32)
                nodes.append(_cast_node(graph, n, dst, to, dt, graph.values[n].shape))
                cast[(n, want)] = dst
            node.inputs[i] = cast[(n, want)]
        nodes.append(node)
        for o in node.outputs:
            if o in renamed.values():
                name = next(k for k, v in renamed.items() if v == o)
                nodes.append(_cast_node(graph, o, name, TensorProto.FLOAT, F32, graph.values[o].shape))
    graph.nodes = nodes


def apply_precision(graph: Graph, precision: str, target: Target) -> Graph:
    """`graph` with its storage precision applied (a copy; the graph itself when "fp32")."""
    if precision == "fp32":
        return graph
    if precision != "fp16":
        raise ValueError(f"apply_precision takes a resolved precision (fp32, fp16), got {precision!r}")
    g = graph.copy()
    caps = {n.name: c for n in g.nodes if (c := _capability(n, g, target)) is not None}
    consts = _half_constants(g, caps)
    half = _decide(g, caps, set(consts))
    for name in consts:
        v = g.values[name]
        g.values[name] = Value(name, F16, v.shape, _to_half(name, v.const))
    for name in half:
        g.values[name].dtype = F16
    _insert_casts(g, caps, half, set(consts))
    casts = len(g.nodes) - len(graph.nodes)
    log.info("precision fp16: %d activations and %d constants in half, %d Casts (%d of %d nodes read half)",
             len(half), len(consts), casts, len(caps), len(graph.nodes))
    return g
