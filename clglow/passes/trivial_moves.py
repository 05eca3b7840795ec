"""Data movement that moves nothing: a Cast to the dtype its input already has, a Reshape or an
Expand to the shape its input already has and a Concat of one input are dropped, and a Transpose that only moves axes of size 1
becomes a Reshape (a view: no launch), as does a Gather whose constant indices are 0..n-1 over
its axis of n (the same elements in the same order: GPT-2's export gathers the attention mask's
rows with an arange).

A decode step's head split transposes [1, 1, H, D] to [1, H, 1, D] (the same bytes in the same
order) and its attention casts float32 probabilities to float32: each was a launch on every
run. Static shapes only (the Transpose); graph outputs are left as they are.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..dtypes import onnx_to_numpy
from ..ir import Graph, Node, Value


def _same_dtype_cast(node: Node, g: Graph) -> bool:
    if node.op_type != "Cast" or len(node.inputs) != 1:
        return False
    v = g.values.get(node.inputs[0])
    to = node.attr("to")
    if v is None or v.dtype is None or to is None:
        return False
    try:
        return np.dtype(onnx_to_numpy(int(to))) == np.dtype(v.dtype)
    except (KeyError, TypeError, ValueError):
        return False


def _same_shape_reshape(node: Node, g: Graph) -> bool:
    """A Reshape (or Flatten, Squeeze, Unsqueeze, Expand) whose static output shape is its
    input's (Hugging Face's attention masks expand a mask to the shape it already has)."""
    if node.op_type not in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand") or len(node.outputs) != 1:
        return False
    a, b = g.values.get(node.input(0)), g.values.get(node.outputs[0])
    return a is not None and b is not None and a.is_static and b.is_static and tuple(a.shape) == tuple(b.shape)


def _single_concat(node: Node) -> bool:
    """A Concat of one input (its copy): GPT-2's export concatenates the first layer's past keys
    with nothing before the new token's."""
    return node.op_type == "Concat" and len([i for i in node.inputs if i]) == 1 and len(node.inputs) == 1


def _moves_only_ones(node: Node, g: Graph) -> Optional[tuple]:
    """The output shape of a Transpose whose axes of size > 1 keep their order, else None."""
    if node.op_type != "Transpose":
        return None
    v = g.values.get(node.input(0))
    if v is None or not v.is_static:
        return None
    shape = tuple(v.shape)
    perm = [int(p) for p in (node.attr("perm") or list(range(len(shape)))[::-1])]
    if sorted(perm) != list(range(len(shape))):
        return None
    big = [p for p in perm if shape[p] != 1]
    return tuple(shape[p] for p in perm) if big == sorted(big) else None


def _identity_gather(node: Node, g: Graph) -> Optional[tuple]:
    """The output shape of a Gather whose constant indices are 0, 1, .., n-1 over an axis of n
    (static shapes), else None."""
    if node.op_type != "Gather" or len(node.inputs) != 2:
        return None
    data, idx = g.values.get(node.input(0)), g.values.get(node.input(1))
    if data is None or idx is None or not data.is_static or idx.const is None:
        return None
    shape, axis = tuple(data.shape), int(node.attr("axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape):
        return None
    ids = np.asarray(idx.const)
    if ids.dtype.kind not in "iu" or ids.size != shape[axis] or not np.array_equal(ids.reshape(-1), np.arange(ids.size)):
        return None
    return shape[:axis] + tuple(ids.shape) + shape[axis + 1:]


def remove_trivial_moves(graph: Graph) -> Graph:
    """`graph` without same-dtype Casts, same-shape Reshapes or one-input Concats, and with
    size-1-only Transposes and identity Gathers as Reshapes."""
    g = graph.copy()
    outputs = set(g.outputs)
    rename: dict = {}
    keep = []
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        if node.domain not in ("", "ai.onnx") or node.outputs[0] in outputs:
            keep.append(node)
            continue
        if _same_dtype_cast(node, g) or _same_shape_reshape(node, g) or _single_concat(node):
            rename[node.outputs[0]] = node.inputs[0]
            g.values.pop(node.outputs[0], None)
            continue
        shape = _moves_only_ones(node, g)
        if shape is None:
            shape = _identity_gather(node, g)
        if shape is not None:
            target = g.unique_name(node.outputs[0] + "_shape")
            arr = np.array(shape, np.int64)
            g.values[target] = Value(target, arr.dtype, arr.shape, arr)
            node = Node("Reshape", node.name, [node.inputs[0], target], list(node.outputs))
        keep.append(node)
    g.nodes = keep
    return g
