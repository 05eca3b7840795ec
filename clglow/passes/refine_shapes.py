"""Shape refinement after constant folding: onnx's per-node shape inference run again over the
folded graph, and Shape/Size of a static tensor folded to a constant.

Exporters compute masks and reshape targets from Shape ops; the load-time shape inference
sees those as data it cannot evaluate and leaves symbolic dims behind (GPT-2's attention mask
Expand: ('unk__0', 'unk__1', 'unk__2', 64) although its target shape folds to a constant).
Every fusion that needs static shapes (the mask as a FusedMatMul bias, the head merge as a
stored transpose, a Gemm's Reshapes) then declines, and the Shape chains stay host work on
every run. Inferred again once folding has made those inputs constant, the dims become ints;
a refined dim never contradicts a known one (a conflict keeps the old shape).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..errors import ClglowError
from ..ir import Graph, Node, Value
from .fold_constants import fold_constants

log = logging.getLogger(__name__)


def _merge(old: Optional[tuple], new: Optional[tuple]) -> Optional[tuple]:
    """`old` with its unknown dims taken from `new` (None when nothing changes or they conflict)."""
    if new is None:
        return None
    if old is None:
        return tuple(new)
    if len(old) != len(new):
        return None
    out, changed = [], False
    for a, b in zip(old, new):
        if isinstance(a, int):
            if isinstance(b, int) and a != b:
                return None
            out.append(a)
        elif isinstance(b, int):
            out.append(b)
            changed = True
        else:
            out.append(a)
    return tuple(out) if changed else None


def _shape_const(node: Node, g: Graph) -> Optional[np.ndarray]:
    """Shape / Size of a static tensor, as the constant it is."""
    from ..shapes import fold_shape_op

    if node.op_type not in ("Shape", "Size") or node.outputs[0] in g.outputs:
        return None
    return fold_shape_op(node, g)


def _refine_node(node: Node, g: Graph) -> bool:
    """Refine `node`'s output shapes in place; True when one changed."""
    from ..shapes import infer_node

    if all(o and o in g.values and g.values[o].is_static for o in node.outputs if o):
        return False  # nothing to learn: onnx's inference per node is the pass's whole cost
    try:
        inferred = infer_node(node, g)
    except (ClglowError, ValueError, TypeError, KeyError) as e:  # left to specialisation, which reports it
        log.debug("no refined shape for %s: %s", node.name, e)
        return False
    changed = False
    for name, (dtype, shape) in inferred.items():
        v = g.values.get(name)
        if v is None or v.const is not None or (dtype is not None and v.dtype is not None and dtype != v.dtype):
            continue
        merged = _merge(v.shape, shape)
        if merged is not None:
            g.values[name] = Value(name, v.dtype if v.dtype is not None else dtype, merged, None)
            changed = True
    return changed


def _walk(g: Graph) -> bool:
    """One pass in graph order; True when a shape was refined or a Shape/Size folded."""
    keep, changed = [], False
    for node in g.nodes:
        arr = _shape_const(node, g)
        if arr is not None:
            g.values[node.outputs[0]] = Value(node.outputs[0], arr.dtype, tuple(arr.shape), arr)
            changed = True
            continue
        keep.append(node)
        changed = _refine_node(node, g) or changed
    g.nodes = keep
    return changed


def refine_shapes(graph: Graph, rounds: int = 4) -> Graph:
    """`graph` with shapes inferred again in graph order (see the module doc), Shape/Size of static
    tensors folded, and whatever became constant folded; again while that teaches something."""
    g = graph.copy()
    for _ in range(rounds):
        if not _walk(g):
            break
        g = fold_constants(g)
    return g
