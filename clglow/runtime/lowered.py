"""A staged graph's nodes lowered: what the planning pipeline and the offers it takes share.

`lower_nodes` lowers every device node through the `Lowerer` callback (views alias their
input's buffer owner, sub-batch pieces their whole tensor) into `LoweredNode`s. Why a module of
its own: runtime.planning (the pipeline: steps, liveness, arena) and runtime.offers (which
padded and in-place offers are safe to take, re-lowering the pair) both work on LoweredNodes,
the tensors each node reads and the tensors' device sizes; here they import them from one place
without importing each other. Pure data, no OpenCL.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..ir import Graph, Node
from ..lower.base import LowerCtx, lookup
from ..partition import DEVICE
from .host import outer_scope_names

# One device node lowered: (node, in_layout, out_layout) -> (launches, its LowerCtx). The executor
# passes one that also starts the launches' programs building (Device.prepare).
Lowerer = Callable[..., tuple]


@dataclass
class LoweredNode:
    """A node of the plan with its lowering: launches None for a host node, [] for a view."""

    node: Node
    launches: Optional[list]
    ctx: Optional[LowerCtx] = None

    @property
    def is_host(self) -> bool:
        return self.launches is None


def nbytes(graph: Graph, name: str) -> int:
    """Bytes of tensor `name` on the device (bool as one byte)."""
    v = graph.values[name]
    dtype = np.dtype(np.uint8) if np.dtype(v.dtype) == np.bool_ else np.dtype(v.dtype)
    return int(np.prod(v.shape, dtype=np.int64)) * dtype.itemsize


def lower_nodes(graph: Graph, where: dict, slices: dict, lower: Lowerer) -> tuple:
    """([LoweredNode], root, tensors made on the device): device nodes lowered, views aliased to
    their input's buffer owner, sub-batch pieces to their whole tensor."""
    lowered: list = []
    root: dict = {name: sl.whole for name, sl in slices.items()}
    on_device: set = set()
    for node in graph.nodes:
        if where[node.name] != DEVICE:
            lowered.append(LoweredNode(node, None))
        elif lookup(node).view:
            src = node.inputs[0]
            root[node.outputs[0]] = root.get(src, src)
            lowered.append(LoweredNode(node, []))
            on_device.add(node.outputs[0])
        else:
            launches, ctx = lower(node)
            lowered.append(LoweredNode(node, launches, ctx))
            on_device.update(o for o in node.outputs if o)
    return lowered, root, on_device


def reads(entry: LoweredNode) -> list:
    """The tensors a node reads: its inputs, and for a host node the outer-scope names its
    subgraphs (If/Loop/Scan bodies) use."""
    node = entry.node
    return [i for i in list(node.inputs) + (outer_scope_names(node) if entry.is_host else []) if i]


__all__ = ["LoweredNode", "Lowerer", "lower_nodes", "nbytes", "reads"]
