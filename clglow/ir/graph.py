"""The IR: Value (typed, shaped, optionally constant), Node and Graph.

The IR is deliberately close to ONNX (names identify values, an empty input name
means an absent optional input) so that the frontend is a thin translation and
passes can be read next to the ONNX spec. Shapes are tuples whose entries are
ints (static), strings (symbolic) or None (unknown); `shape is None` means the
rank is unknown.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Union

import numpy as np
import onnx

Dim = Union[int, str, None]
Shape = Optional[tuple]  # tuple[Dim, ...] or None for unknown rank


@dataclass
class Value:
    """A tensor flowing through the graph."""

    name: str
    dtype: Optional[np.dtype] = None
    shape: Shape = None
    const: Optional[np.ndarray] = None  # set for initializers and folded constants

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)


@dataclass
class Node:
    """One operator application. `attrs` holds python values (see frontend)."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    proto: Optional[onnx.NodeProto] = None  # the original node, kept for host execution
    # the nodes a fusion pass replaced by this one, in graph order: what runs instead when the
    # fused node cannot be lowered on a device (partition.unfuse)
    unfused: tuple = ()

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> str:
        """Name of input i, or '' when it is absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def to_proto(self) -> onnx.NodeProto:
        """An ONNX NodeProto for this node (the original one when unchanged)."""
        if self.proto is not None:
            if list(self.proto.input) == self.inputs and list(self.proto.output) == self.outputs:
                return self.proto
            p = onnx.NodeProto()
            p.CopyFrom(self.proto)
            del p.input[:]
            del p.output[:]
            p.input.extend(self.inputs)
            p.output.extend(self.outputs)
            return p
        from onnx import helper, numpy_helper

        attrs = {}
        for k, v in self.attrs.items():
            attrs[k] = numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
        return helper.make_node(self.op_type, self.inputs, self.outputs, name=self.name,
                                domain=self.domain or None, **attrs)


@dataclass
class Graph:
    """A topologically ordered list of nodes over named values."""

    nodes: list[Node]
    values: dict[str, Value]
    inputs: list[str]  # run-time inputs (initializers excluded)
    outputs: list[str]
    opsets: dict[str, int] = field(default_factory=dict)
    name: str = "graph"
    ir_version: int = 8
    # the cap on any tensor the model declares or a fold produces (SessionOptions.max_tensor_bytes;
    # None: CLGLOW_MAX_TENSOR_BYTES), kept with the graph so that plan-time folding obeys it too
    max_tensor_bytes: Optional[int] = None

    def opset(self, domain: str = "") -> int:
        if domain in ("", "ai.onnx"):
            return self.opsets.get("", self.opsets.get("ai.onnx", 1))
        return self.opsets.get(domain, 1)

    def value(self, name: str) -> Value:
        return self.values[name]

    def const(self, name: str) -> Optional[np.ndarray]:
        v = self.values.get(name) if name else None
        return None if v is None else v.const

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        """Who reads each value: node inputs, and the nodes whose subgraphs (If/Loop/Scan bodies)
        read it from this scope, so a pass never fuses or drops a value only a body reads."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
            if has_subgraphs(n):
                for i in outer_scope_names(n):
                    if i not in n.inputs:
                        out.setdefault(i, []).append(n)
        return out

    def iter_values(self) -> Iterator[Value]:
        return iter(self.values.values())

    def copy(self) -> "Graph":
        """A copy whose node list, values and attributes may be edited; constants are shared."""
        values = {k: Value(v.name, v.dtype, v.shape, v.const) for k, v in self.values.items()}
        nodes = [Node(n.op_type, n.name, list(n.inputs), list(n.outputs), dict(n.attrs), n.domain, n.proto,
                      n.unfused) for n in self.nodes]
        return Graph(nodes, values, list(self.inputs), list(self.outputs), dict(self.opsets),
                     self.name, self.ir_version, self.max_tensor_bytes)

    def unique_name(self, base: str) -> str:
        """A value/node name not used yet."""
        taken = set(self.values) | {n.name for n in self.nodes}
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"


def clone_deep(g: Graph) -> Graph:
    return copy.deepcopy(g)


def has_subgraphs(node: "Node") -> bool:
    """Whether an attribute of `node` holds a graph (If branches, Loop/Scan bodies)."""
    return any(isinstance(v, onnx.GraphProto) or (isinstance(v, (list, tuple)) and any(isinstance(x, onnx.GraphProto) for x in v))
               for v in node.attrs.values())


def outer_scope_names(node: Node) -> list[str]:
    """Names a node's subgraphs read from the enclosing graph (If/Loop/Scan bodies)."""
    proto = node.to_proto()
    used: list[str] = []

    def walk(g: onnx.GraphProto, bound: set) -> None:
        bound = set(bound) | {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            for i in n.input:
                if i and i not in bound and i not in used:
                    used.append(i)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g, bound)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        walk(sg, bound)
            bound |= set(n.output)

    for a in proto.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            walk(a.g, set())
        elif a.type == onnx.AttributeProto.GRAPHS:
            for sg in a.graphs:
                walk(sg, set())
    return used
