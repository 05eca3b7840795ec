"""Placement: each node goes to the OpenCL device when a kernel covers it, else to the host.

The placement is reported (node, op, where, why), never silent. With host
fallback disabled any node that would land on the host raises
UnsupportedOperator listing all of them at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import onnx

from .errors import UnsupportedNode, UnsupportedOperator
from .frontend.onnx_model import attribute_value, type_to_dtype_shape
from .ir import Graph, Node, Value
from .lower import lookup
from .lower.base import GENERIC_TARGET
from .runtime.host import host_supported
from .target import Target

DEVICE = "opencl"
HOST = "host"


@dataclass(frozen=True)
class Placement:
    node: str
    op_type: str
    where: str  # "opencl" | "host"
    reason: str  # why it is on the host ("" on the device)

    def __str__(self) -> str:
        why = f"  ({self.reason})" if self.reason else ""
        return f"{self.where:7s} {self.op_type:22s} {self.node}{why}"


def device_reason(node: Node, graph: Graph, target: Optional[Target] = None) -> Optional[str]:
    """None when an OpenCL kernel covers the node on `target` (None: a generic device, without
    fp64), else why not."""
    op = lookup(node)
    if op is None:
        dom = node.domain or "ai.onnx"
        return f"no OpenCL kernel for {dom}.{node.op_type}"
    try:
        return op.supports(node, graph, target if target is not None else GENERIC_TARGET)
    except Exception as e:  # a supports() that chokes on odd attributes declines the node
        return f"kernel check failed: {e}"


def place(graph: Graph, target: Optional[Target] = None, host_fallback: bool = True) -> list[Placement]:
    """Where each node runs on `target` (the session's Target; None: a generic device)."""
    result: list[Placement] = []
    refused: list[UnsupportedNode] = []
    for node in graph.nodes:
        reason = device_reason(node, graph, target)
        if reason is None:
            result.append(Placement(node.name, node.op_type, DEVICE, ""))
            continue
        opset = graph.opset(node.domain)
        if not host_fallback:
            refused.append(UnsupportedNode(node.name, node.op_type, node.domain, opset,
                                           reason + "; host fallback is disabled"))
            continue
        host_reason = host_supported(node, opset)
        if host_reason is not None:
            refused.append(UnsupportedNode(node.name, node.op_type, node.domain, opset,
                                           f"{reason}; {host_reason}"))
            continue
        result.append(Placement(node.name, node.op_type, HOST, reason))
    if refused:
        raise UnsupportedOperator(refused)
    return result


def unfuse(graph: Graph, names: set) -> Graph:
    """A copy of `graph` with each fused node named in `names` replaced by the nodes its fusion
    pass replaced (Node.unfused, one level: a nested fusion is tried again on its own). The rule
    for every fusion: a fused node that cannot be lowered runs as its original nodes, never
    refuses the model. Values the fusion dropped are left for shape specialisation to infer."""
    g = graph.copy()
    nodes: list = []
    for node in g.nodes:
        if node.name in names and node.unfused:
            nodes.extend(Node(n.op_type, n.name, list(n.inputs), list(n.outputs), dict(n.attrs), n.domain,
                              n.proto, n.unfused) for n in node.unfused)
        else:
            nodes.append(node)
    g.nodes = nodes
    return g


def refused_fusions(graph: Graph, nodes: list, target: Optional[Target]) -> set:
    """Names of the fused nodes among `nodes` that no kernel covers on `target`: they would land
    on the host, which has no implementation of clglow's fused ops (see unfuse)."""
    return {n.name for n in nodes if n.unfused and device_reason(n, graph, target) is not None}


def failed_fusion(graph: Graph, error: BaseException) -> Optional[str]:
    """The fused node of `graph` (with originals to fall back on) that `error` names: an
    InvalidModel raised by its lowering or shape rule (a sub-batch piece's name is the node's with
    a [i:j] tag), or an UnsupportedOperator listing it; None when the error is about another node."""
    named = [getattr(error, "node", None)] + [u.name for u in getattr(error, "nodes", [])]
    fused = {n.name for n in graph.nodes if n.unfused}
    for name in named:
        if not name:
            continue
        if name in fused:
            return name
        base = name[:name.rfind("[")] if name.endswith("]") and "[" in name else None
        if base in fused:
            return base
    return None


def format_placement(placements: list[Placement]) -> str:
    n_dev = sum(p.where == DEVICE for p in placements)
    lines = [f"{n_dev}/{len(placements)} nodes on OpenCL, {len(placements) - n_dev} on the host"]
    lines += [str(p) for p in placements]
    return "\n".join(lines)


def judge_node(node: onnx.NodeProto, opset: int, types: Optional[dict] = None,
               target: Optional[Target] = None) -> tuple:
    """Cheap verdict for one NodeProto without importing a model or weights (ONNXIFI's compatibility
    probe): ('SUCCESS' | 'FALLBACK' | 'UNSUPPORTED_OPERATOR', reason). `types` maps value names to
    declared onnx.TypeProto where the caller knows them; `target` is the device's Target (None: a
    generic device, without fp64)."""
    types = types or {}
    attrs = {a.name: attribute_value(a) for a in node.attribute}
    values: dict = {}
    for name in list(node.input) + list(node.output):
        if not name or name in values:
            continue
        tp = types.get(name)
        dtype, shape = type_to_dtype_shape(tp) if tp is not None else (None, None)
        values[name] = Value(name, dtype, shape)
    n = Node(node.op_type, node.name or node.op_type, list(node.input), list(node.output), attrs,
                node.domain, node)
    g = Graph([n], values, [], [], {node.domain or "": opset})
    reason = device_reason(n, g, target)
    if reason is None:
        return "SUCCESS", ""
    host = host_supported(n, opset)
    if host is None:
        return "FALLBACK", reason
    return "UNSUPPORTED_OPERATOR", f"{reason}; {host}"
