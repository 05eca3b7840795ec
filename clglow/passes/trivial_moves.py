"""Data movement that moves nothing: a Cast to the dtype its input already has, a Reshape or an
Expand to the shape its input already has and a Concat of one input are dropped, and a Transpose that only moves axes of size 1
becomes a Reshape (a view: no launch), as does a Gather whose constant indices are 0..n-1 over
its axis of n (the same elements in the same order: GPT-2's export gathers the attention mask's
rows with an arange). And the constant half of a mask is applied at plan time:
Where(And(C, x), a, b) with C, a and b constants is Where(x, T, b), T = Where(C, a, b) (GPT-2's
causal rows And-ed with the attention mask: the And launch goes).

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
    if ids.dtype.kind not in "iu" or ids.size != shape[axis]:
        return None
    if not np.array_equal(ids.reshape(-1), np.arange(ids.size)):
        return None
    return shape[:axis] + tuple(ids.shape) + shape[axis + 1:]


def _fold_constant_mask(node: Node, g: Graph, producers: dict, consumers: dict) -> Optional[list]:
    """Where(And(C, x), a, b) -> the inputs [x, T, b] of Where, T = Where(C, a, b) stored as a
    constant (C, a, b constants; the And's output used by this Where only), else None."""
    if node.op_type != "Where" or len(node.inputs) != 3:
        return None
    a, b = g.values.get(node.input(1)), g.values.get(node.input(2))
    pre = producers.get(node.input(0))
    if a is None or b is None or a.const is None or b.const is None or pre is None or pre.op_type != "And":
        return None
    if pre.domain not in ("", "ai.onnx") or len(consumers.get(pre.outputs[0], [])) != 1 or pre.outputs[0] in g.outputs:
        return None
    ins = [g.values.get(i) for i in pre.inputs]
    if len(ins) != 2 or any(v is None for v in ins) or sum(v.const is not None for v in ins) != 1:
        return None
    c, x = (ins[0], pre.inputs[1]) if ins[0].const is not None else (ins[1], pre.inputs[0])
    t = np.where(np.asarray(c.const, bool), np.asarray(a.const), np.asarray(b.const)).astype(np.asarray(a.const).dtype)
    name = g.unique_name(node.outputs[0] + "_const_mask")
    g.values[name] = Value(name, t.dtype, t.shape, t)
    return [x, name, node.input(2)]


def remove_trivial_moves(graph: Graph) -> Graph:
    """`graph` without same-dtype Casts, same-shape Reshapes or one-input Concats, and with
    size-1-only Transposes and identity Gathers as Reshapes, and constant mask halves folded."""
    g = graph.copy()
    outputs = set(g.outputs)
    producers, consumers = g.producers(), g.consumers()
    rename: dict = {}
    keep = []
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        folded = _fold_constant_mask(node, g, producers, consumers) if node.domain in ("", "ai.onnx") else None
        if folded is not None:  # the And it read is dead now (remove_dead_nodes)
            node.inputs = folded
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
