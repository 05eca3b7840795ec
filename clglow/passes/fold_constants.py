"""Constant folding: evaluate on the host every node whose inputs are all known.

onnx's "light" models compute each weight with ConstantOfShape, so this pass is
what makes them runnable at all. Sizes are checked before anything is computed:
a ConstantOfShape of 4 TB fails cleanly instead of trying.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np

from .. import config
from ..errors import InvalidModel
from ..ir import Graph, Node, Value

log = logging.getLogger(__name__)

# Ops whose result is not a function of their inputs, or which are costly for nothing.
NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
                "SplitToSequence", "ConcatFromSequence", "SequenceAt", "SequenceErase", "SequenceLength",
                "Optional", "OptionalGetElement", "OptionalHasElement"}


def declared_nbytes(node: Node, graph: Graph) -> Optional[int]:
    """Bytes a node would produce, when that can be known without running it (ConstantOfShape & co.)."""
    if node.op_type in ("ConstantOfShape", "Expand", "Tile", "Range"):
        if node.op_type == "ConstantOfShape":
            shape = graph.const(node.input(0))
            if shape is None:
                return None
            value = node.attr("value")
            itemsize = np.asarray(value).dtype.itemsize if value is not None else 4
            dims = [int(d) for d in np.asarray(shape).reshape(-1)]
            if any(d < 0 for d in dims):
                raise InvalidModel(f"ConstantOfShape with negative dimension {dims}", node=node.name)
            return int(np.prod(dims, dtype=object)) * itemsize
        if node.op_type == "Range":
            vals = [graph.const(node.input(i)) for i in range(3)]
            if any(v is None for v in vals):
                return None
            start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in vals)
            if delta == 0:
                raise InvalidModel("Range with delta 0", node=node.name)
            n = max(int(np.ceil((limit - start) / delta)), 0)
            return n * np.asarray(vals[0]).dtype.itemsize
        out = graph.values.get(node.outputs[0])
        if out is not None and out.is_static and out.dtype is not None:
            return int(np.prod(out.shape, dtype=object)) * np.dtype(out.dtype).itemsize
    return None


def check_size(node: Node, graph: Graph) -> None:
    """Raise InvalidModel when a node is known to produce more than the configured cap."""
    nbytes = declared_nbytes(node, graph)
    cap = config.max_tensor_bytes() if graph.max_tensor_bytes is None else graph.max_tensor_bytes
    if nbytes is not None and nbytes > cap:
        raise InvalidModel(f"{node.op_type} would produce {nbytes} bytes, above the limit of {cap} bytes "
                           f"(CLGLOW_MAX_TENSOR_BYTES)", node=node.name)


def fold_node(node: Node, graph: Graph) -> Optional[list]:
    """Evaluate `node` if all its inputs are constant; returns its outputs or None."""
    from ..runtime.host import HostKernel

    if node.op_type in NOT_FOLDABLE or node.domain not in ("", "ai.onnx"):
        return None
    if any(i and graph.const(i) is None for i in node.inputs):
        return None
    if not any(i for i in node.inputs) and node.op_type not in ("ConstantOfShape", "EyeLike", "Range"):
        return None
    check_size(node, graph)
    try:
        kernel = HostKernel(node, graph)
        # one array per kernel input name: it lists a repeated input (Concat(b, b)) once
        return kernel.run([graph.const(i) for i in kernel.input_names])
    except InvalidModel:
        raise
    except Exception as e:  # leave it to run time rather than fail the load
        log.debug("not folding %s: %s", node.name, e)
        return None


def fold_constants(graph: Graph, skip: Optional[Callable[[Node], bool]] = None) -> Graph:
    """`graph` with every node whose inputs are all constant replaced by its values (graph
    outputs stay computed; `skip`: nodes never folded, e.g. the QDQ pass's DequantizeLinear)."""
    g = graph.copy()
    keep = []
    outputs = set(g.outputs)
    for node in g.nodes:
        held = any(o in outputs for o in node.outputs) or (skip is not None and skip(node))
        outs = None if held else fold_node(node, g)
        if outs is None:
            keep.append(node)
            continue
        for name, arr in zip([o for o in node.outputs if o], outs):
            arr = np.asarray(arr)
            g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
    g.nodes = keep
    return g
