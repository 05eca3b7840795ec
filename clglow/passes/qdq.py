"""QDQ fusion: DequantizeLinear -> float op -> QuantizeLinear chains become integer ops.

onnxruntime's quantizer (QDQ format) and QAT exporters write quantized models as the float graph
wrapped in QuantizeLinear/DequantizeLinear pairs. Run literally, every op computes in float32;
this pass rewrites the patterns onnxruntime's own QDQ transformers fuse into the integer ops
that clglow's int8 kernels run:

- DQ(x), DQ(w) [, bias] -> Conv / MatMul / Gemm / MatMul + Add(bias) -> [Relu | Clip] -> Q
  becomes QLinearConv / QLinearMatMul / com.microsoft QGemm. The bias becomes int32 in the
  accumulator's scale (round(beta * bias / (alpha * x_scale * w_scale)), as onnxruntime's
  quantizer writes it) and the activation becomes the node attribute `qclamp` = [lo, hi], the
  quantized clamp bounds (exact: quantization is monotonic, so Q(clip(v, a, b)) ==
  clip(Q(v), Q(a), Q(b))).
- DQ -> {Add, Mul} -> [Relu | Clip] -> Q: com.microsoft QLinearAdd / QLinearMul (an activation
  as an integer Clip after it); DQ -> {AveragePool,
  GlobalAveragePool, Sigmoid, LeakyRelu, Softmax} -> Q: com.microsoft QLinearAveragePool /
  QLinearGlobalAveragePool / QLinearSigmoid / QLinearLeakyRelu / QLinearSoftmax; DQ -> Concat -> Q:
  com.microsoft QLinearConcat.
- DQ -> Relu / Clip -> Q with the same parameters on both sides: an integer Clip at the
  quantized bounds (exact).
- DQ -> {MaxPool, Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Resize(nearest), Slice, Expand,
  Gather, GatherElements, DepthToSpace, SpaceToDepth, Tile} -> Q with
  the same scale and zero point on both sides: the op runs on the integer tensor itself (exact:
  these ops only select or move elements, and Q(DQ(v)) == v).

Every rewritten node keeps the nodes it replaced in Node.unfused, so a node no kernel covers on
the session's Target runs as the original float graph (partition.unfuse, the engine's retry).
By default (`require_kernel`) a pattern is only rewritten when a device lowering is registered
that accepts the new node on a generic Target, as splice_fused does for the float fusions.

The pass runs before constant folding (pipeline.py): the weights' DequantizeLinear nodes have
constant inputs and would otherwise be folded to float weights before they are seen. It folds
the other constant nodes itself first (a QAT model's Q(float weight) -> DQ, shape chains),
leaving the DequantizeLinear nodes for the patterns; what stays unfused is folded later.

The patterns themselves (matching and building the integer nodes) are in passes/qdq_patterns.py;
this module applies them to the graph.
"""
from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, Value
from ..lower.base import GENERIC_TARGET, lookup
from .fold_constants import fold_constants
from .fuse_conv import in_graph_order
from .qdq_patterns import MS, Rewrite, is_qdq, match

log = logging.getLogger(__name__)


def accepted(node: Node, g: Graph) -> bool:
    """A device lowering is registered for `node` and accepts it on a generic Target."""
    op = lookup(node)
    try:
        return op is not None and op.supports(node, g, GENERIC_TARGET) is None
    except Exception as e:  # noqa: BLE001 - a supports() that chokes declines the node
        log.debug("qdq: %s declined: %s", node.name, e)
        return False


def fallback_nodes(g: Graph, rw: Rewrite, node: Node, replaced: set) -> tuple:
    """The nodes `node` runs as when it cannot lower (Node.unfused): those it replaces, in
    graph order, with a private copy of each DequantizeLinear it reads but leaves in the graph.
    Such a DequantizeLinear may be removed by a later rewrite of its other readers (the SE
    block's GlobalAveragePool and Mul read one), and each fallback must run on its own."""
    originals = list(in_graph_order(g, rw.replaced))
    if rw.split is not None:  # the fallback ends at the new node's own output
        act, q_t = rw.split
        originals = [n for n in originals if n is not act and n is not rw.q] + [q_t]
    rename, copies = {}, []
    for dq in {id(d): d for d in rw.dqs}.values():
        if id(dq) in replaced or dq.outputs[0] in rename:
            continue
        out = g.unique_name(f"{dq.outputs[0]}/{node.name}")
        rename[dq.outputs[0]] = out
        copies.append(Node(dq.op_type, f"{dq.name}/{node.name}", list(dq.inputs), [out], dict(dq.attrs), dq.domain,
                           dq.proto))
    if not copies:
        return tuple(originals)
    return tuple(copies) + tuple(Node(n.op_type, n.name, [rename.get(i, i) for i in n.inputs], list(n.outputs),
                                      dict(n.attrs), n.domain, n.proto, n.unfused) for n in originals)


def apply(g: Graph, rw: Rewrite, node: Node, consumers: dict, require_kernel: bool) -> bool:
    """Put `node` where the QuantizeLinear was, dropping the nodes it replaces (the
    DequantizeLinear nodes only when nothing else reads them); False, `g` unchanged, when
    `require_kernel` and no device lowering takes it."""
    replaced = {id(n) for n in rw.replaced}
    outputs = set(g.outputs)
    for dq in rw.dqs:
        if id(dq) not in replaced and dq.outputs[0] not in outputs and \
                all(id(u) in replaced for u in consumers.get(dq.outputs[0], [])):
            rw.replaced.append(dq)
            replaced.add(id(dq))
    for name, arr in rw.consts.items():
        g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
    if node.domain == MS:
        g.opsets.setdefault(MS, 1)
    g.values.update(rw.values)
    if require_kernel and not (accepted(node, g) and (rw.tail is None or accepted(rw.tail, g))):
        for name in list(rw.consts) + list(rw.values):
            g.values.pop(name, None)
        return False
    node.unfused = fallback_nodes(g, rw, node, replaced)
    at = g.nodes.index(rw.q)
    g.nodes[at:at + 1] = [node] + ([rw.tail] if rw.tail is not None else [])
    g.nodes = [n for n in g.nodes if id(n) not in replaced or n is node]
    keep = set(node.outputs) | (set(rw.tail.outputs) if rw.tail is not None else set())
    for n in rw.replaced:
        for o in n.outputs:
            if o and o not in keep:
                g.values.pop(o, None)
    log.debug("qdq: %s -> %s", [n.name for n in node.unfused], node.op_type)
    return True


def fold_except_dq(graph: Graph) -> Graph:
    """`graph` with its constant nodes folded, but for DequantizeLinear (see the module docstring)."""
    return fold_constants(graph, skip=lambda n: is_qdq(n, "DequantizeLinear"))


def fuse_qdq(graph: Graph, require_kernel: bool = True) -> Graph:
    """`graph` with its QDQ patterns rewritten to integer ops (module docstring); unchanged (the
    same object) when it has no QuantizeLinear. `require_kernel`: only where a device lowering
    accepts the new node (False: every pattern, for tests of the rewrite itself)."""
    if not any(is_qdq(n, "QuantizeLinear") for n in graph.nodes):
        return graph
    g = fold_except_dq(graph)
    tried: set = set()
    progress = True
    while progress:
        progress = False
        producers, consumers, outputs = g.producers(), g.consumers(), set(g.outputs)
        for q in list(g.nodes):
            if not is_qdq(q, "QuantizeLinear") or id(q) in tried:
                continue
            tried.add(id(q))
            found = match(q, g, producers, consumers, outputs)
            if found is not None and apply(g, found[0], found[1], consumers, require_kernel):
                progress = True
                break
    return g

