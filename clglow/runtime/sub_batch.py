"""Sub-batches: run stretches of a batched CNN a few images at a time so activations stay in cache.

A ResNet-50 at batch 8 on a CPU device runs each layer over all eight images: a 56x56 layer's
tensors are 26 MB each there, so every layer streams its input, residual and output through
DRAM, where one image's 3.2 MB stay in cache from the layer that wrote them to the one that
reads them. Measured per image on pocl (2-core Zen 4, kernels only): layer1 7.0 ms at batch 1
against 8.1 at batch 8, layer2 10.9 vs 12.0, layer3 15.5 at batch 4 vs 16.8 at batch 8
(smaller tensors: a few images still fit, and the weights are read once per piece).

So the plan builder rewrites the specialised graph before lowering (`split`): a *segment* (a
stretch of per-image nodes between points where a single tensor is live, ResNet's block
boundaries) is repeated once per *piece* of at most `s` images, each piece's nodes working on
piece-sized tensors of their own. Where a segment meets the rest of the graph its pieces read
and write slices of the whole tensor in place (sub-buffers, `Slice`), so nothing is copied.
`s` is chosen per segment from the largest per-image activation its nodes touch: the largest
power of two whose piece stays within the budget (`budget`); a segment whose `s` would be the
whole batch is left as it is. A policy of the target (`Target.sub_batching`: the CPU family on
a device that reports its cache; a GPU wants the whole batch in one launch) and of the session's
options (`PlanOptions.sub_batch_bytes` forces a budget, 0 turns it off); static, single-stage
plans only (runtime.planning.stage).

The budget is a tunable choice (family "sub_batch", runtime/sub_batch_tune.py, `clglow tune
MODEL`): the reported cache may say little about what one image's layers keep (a KVM guest's
pocl reports the host's whole L3, 480 MB on the 2-vCPU guest measured, so cache/16 left ResNet-50 b8
unsplit), so the tuner runs the model at each distinct segmentation the declared budgets give and
stores the fastest per graph key (`graph_key`: batch, largest per-image activation, per-image
nodes); a session reads it before the cache-fraction default.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..config import PlanOptions
from ..ir import Graph, Node, Value
from ..lower.tunable import Family, register, stored
from ..target import Target

log = logging.getLogger(__name__)

# Ops that treat every image (index along axis 0) on its own when the other inputs are constants
# without a batch axis or tensors with the same batch (SE blocks' [N, C, 1, 1] scales).
_PER_IMAGE = {
    ("", "Conv"), ("clglow", "FusedConv"), ("", "AveragePool"), ("", "GlobalAveragePool"),
    ("", "GlobalMaxPool"), ("", "LpPool"), ("", "GlobalLpPool"), ("", "Relu"), ("", "LeakyRelu"),
    ("", "Clip"), ("", "Sigmoid"), ("", "HardSigmoid"), ("", "HardSwish"), ("", "Tanh"), ("", "Elu"),
    ("", "Selu"), ("", "Softplus"), ("", "Mish"), ("", "Gelu"), ("", "Add"), ("", "Sub"), ("", "Mul"),
    ("", "Div"), ("", "Max"), ("", "Min"), ("", "Sum"), ("", "PRelu"), ("clglow", "FusedElementwise"),
    ("", "MaxPool"), ("", "BatchNormalization"), ("", "InstanceNormalization"),
    ("", "LRN"),
}

# Inputs that are per-channel parameters, not operands broadcast over the images (when constant).
_PARAMETERS = {"Conv": (1, 2), "FusedConv": (1, 2), "BatchNormalization": (1, 2, 3, 4),
               "InstanceNormalization": (1, 2)}

# The per-piece activation budget as a fraction of the device's reported global memory cache
# (pocl: the L3, 32 MB on the Zen 4 measured above, giving 2 MB): ResNet-50 at batch 8 then runs
# layer1 and layer2 (3.2 and 1.6 MB per image) one image at a time, layer3 two and layer4 four,
# each within a few % of the best piece size measured per stage.
_CACHE_FRACTION = 16


@dataclass(frozen=True)
class Slice:
    """A piece tensor that is images [i0, i0 + n) of a whole tensor, in place: bytes
    [offset, offset + nbytes) of its buffer."""

    whole: str
    offset: int
    nbytes: int


# The declared budgets the tuner tries besides the cache-fraction default (bytes per piece; 0:
# off): powers of two from 256 KiB to 32 MiB, one per distinct segmentation of the model.
BUDGETS = (0,) + tuple(1 << e for e in range(18, 26))


# At most this many bytes a piece by default: the reported cache is the whole shared last level
# (pocl on a KVM guest: the host's 480 MB L3, a 30 MB budget that left ResNet-50 b8 unsplit),
# not what one image's layers keep while the weights stream past. Measured there, ResNet-50 b8
# as the whole model in turns (clglow tune, twice per device, load 6-30): 4 MiB pieces 0.62x /
# 0.79x of the unsplit run's time on Debian's pocl 3.1, 0.92x / 0.81x on PyPI's pocl 3.0; the
# a 32 MB L3 gives 2 MiB, below the cap. The tuner's choice (sub_batch family) comes first.
_MAX_DEFAULT_BUDGET = 4 << 20


def default_budget(target: Target) -> int:
    """The profile's budget: a fraction of the reported cache (at most _MAX_DEFAULT_BUDGET) where
    the target sub-batches."""
    return min(target.cache_bytes // _CACHE_FRACTION, _MAX_DEFAULT_BUDGET) if target.sub_batching else 0


def budget(target: Target, options: PlanOptions, key: Optional[tuple] = None) -> int:
    """Bytes of activation per piece (0: no sub-batches): `options.sub_batch_bytes` when set
    (CLGLOW_SUB_BATCH_BYTES or the session option), else, on a target whose policy is to
    sub-batch (Target.sub_batching), the tuning database's budget for the graph `key` or a
    fraction of the cache, else 0."""
    if options.sub_batch_bytes is not None:
        return max(0, int(options.sub_batch_bytes))
    if not target.sub_batching:
        return 0
    hit = stored(target, "sub_batch", key) if key is not None else None
    if hit is not None and isinstance(hit.get("bytes"), int) and hit["bytes"] >= 0:
        return int(hit["bytes"])
    return default_budget(target)


def graph_key(graph: Graph, device_nodes: set) -> Optional[tuple]:
    """The sub_batch family's key of a specialised graph: (batch, the largest per-image
    activation in bytes, how many per-image device nodes), None without a batch to split. Two
    graphs with the same key share a budget (a coarse key: the choice is a cache budget)."""
    batches, largest, count = set(), 0, 0
    for nd in graph.nodes:
        n = _batch(graph, nd) if nd.name in device_nodes else None
        if n is None:
            continue
        batches.add(n)
        count += 1
        largest = max([largest] + [_nbytes(graph.values[t]) // n for t in list(nd.inputs) + list(nd.outputs)
                                   if t and graph.values[t].const is None])
    if not batches:
        return None
    return (max(batches), int(largest), count)


# The last split graph's key, graph and device nodes (the tuner reads them after planning a model).
last_split: Optional[tuple] = None


def segmentation(graph: Graph, device_nodes: set, limit: int) -> tuple:
    """The (start, end, piece size) of each segment a budget gives: budgets with the same one
    plan the same graph (the tuner measures each distinct one once)."""
    return tuple((b0, b1, s) for b0, b1, s, _n in _segments(graph, device_nodes, limit)) if limit > 0 else ()


def _space(target: Target, key: tuple) -> list:
    return [{"bytes": default_budget(target)}] + [{"bytes": b} for b in BUDGETS if b != default_budget(target)]


# Measured as the whole model (runtime/sub_batch_tune.py), never by the per-shape search
# (applies: False keeps it out of search.ordered); keyed by gemm.cl's hash (the pieces' kernels).
SUB_BATCH_FAMILY = register(Family("sub_batch", "gemm", _space, lambda target, key: _space(target, key)[0],
                                   lambda target, key, p: None, flops=lambda key: float(key[0] * key[1]),
                                   applies=lambda target: False, priority=20, tolerance=1e-3))


def _nbytes(v: Value) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def _batch(graph: Graph, node: Node) -> Optional[int]:
    """N when `node` works image by image over a batch of N (its outputs and non-constant inputs
    all [N, ...], static; constant inputs without a batch axis), else None."""
    if (node.domain, node.op_type) not in _PER_IMAGE:
        return None
    if node.op_type in ("MaxPool", "BatchNormalization", "Dropout") and len([o for o in node.outputs if o]) != 1:
        return None  # MaxPool's indices count over the whole batch; training-mode outputs
    outs = [graph.values[o] for o in node.outputs if o]
    if not outs or any(not v.is_static or not v.shape or v.dtype is None for v in outs):
        return None
    n = outs[0].shape[0]
    rank = len(outs[0].shape)
    if n < 2 or any(v.shape[0] != n for v in outs):
        return None
    params = _PARAMETERS.get(node.op_type, ())
    for k, i in enumerate(node.inputs):
        if not i:
            continue
        v = graph.values[i]
        if not v.is_static or v.dtype is None:
            return None
        if k in params:  # weights and biases: constants only (a live W with Cout = N is no batch)
            if v.const is None:
                return None
            continue
        if v.const is not None:
            # a constant broadcasts the same to every image unless it has a batch axis of its own
            if len(v.shape) >= rank and v.shape and v.shape[len(v.shape) - rank] != 1:
                return None
            continue
        if len(v.shape) != rank or v.shape[0] != n:
            return None
    return n


def _piece_size(per_image: int, n: int, limit: int) -> int:
    """The largest power of two s with s * per_image <= limit (at least 1), or n when the whole
    batch fits."""
    if n * per_image <= limit:
        return n
    s = 1
    while s * 2 < n and s * 2 * per_image <= limit:
        s *= 2
    return s


def _segments(graph: Graph, device_nodes: set, limit: int) -> list:
    """[(first node index, end index, piece size, batch)]: runs of per-image device nodes cut where
    one tensor is live, blocks of equal piece size merged."""
    nodes = graph.nodes
    produced_at: dict[str, int] = {i: -1 for i in graph.inputs}
    last_use: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for o in node.outputs:
            if o:
                produced_at[o] = k
        for i in node.inputs:
            if i and graph.values[i].const is None:
                last_use[i] = k
    for o in graph.outputs:
        last_use[o] = len(nodes)
    # live[k]: tensors made before node k and read at or after it (a difference array)
    delta = [0] * (len(nodes) + 2)
    for t, end in last_use.items():
        if t in produced_at:
            delta[produced_at[t] + 1] += 1
            delta[min(end, len(nodes)) + 1] -= 1
    cut, live = [], 0
    for k in range(len(nodes) + 1):
        live += delta[k]
        cut.append(live <= 1 or k == len(nodes))
    # blocks between cuts, each with the batch and piece size of its nodes
    blocks = []
    start = 0
    for k in range(1, len(nodes) + 1):
        if not cut[k]:
            continue
        blk = nodes[start:k]
        batches = {(_batch(graph, nd) if nd.name in device_nodes else None) for nd in blk}
        n = batches.pop() if len(batches) == 1 else None
        s = None
        if n is not None:
            per_image = max(_nbytes(graph.values[t]) // n for nd in blk for t in list(nd.inputs) + list(nd.outputs)
                            if t and graph.values[t].const is None)
            s = _piece_size(per_image, n, limit)
            if s >= n:
                s = None
        blocks.append((start, k, s, n))
        start = k
    segments = []
    for b0, b1, s, n in blocks:
        if s is None:
            continue
        if segments and segments[-1][1] == b0 and segments[-1][2] == s and segments[-1][3] == n:
            segments[-1] = (segments[-1][0], b1, s, n)
        else:
            segments.append((b0, b1, s, n))
    return [sg for sg in segments if sg[1] - sg[0] >= 2]


def split(graph: Graph, device_nodes: set, outputs: Sequence[str], target: Target,
          options: PlanOptions) -> tuple:
    """(graph with the segments repeated per piece, {piece tensor: Slice}). The graph is returned
    unchanged (and no slices) when nothing is worth splitting (budget(target, options) is 0)."""
    if options.sub_batch_bytes is None and not target.sub_batching:
        return graph, {}
    global last_split
    key = graph_key(graph, device_nodes)
    last_split = (key, graph, frozenset(device_nodes)) if key is not None else None
    limit = budget(target, options, key)
    if limit <= 0:
        return graph, {}
    segments = _segments(graph, device_nodes, limit)
    if not segments:
        return graph, {}
    values = dict(graph.values)
    new_nodes: list[Node] = []
    slices: dict[str, Slice] = {}
    pos = 0
    align = target.base_align
    for b0, b1, s, n in segments:
        seg = graph.nodes[b0:b1]
        made = {o for nd in seg for o in nd.outputs if o}
        read_later = {i for nd in graph.nodes[b1:] for i in nd.inputs if i} | set(outputs)
        boundary = ({i for nd in seg for i in nd.inputs if i and i not in made and graph.values[i].const is None}
                    | (made & read_later))
        # piece offsets must be sub-buffer aligned: grow the piece until they are
        while s < n and any(_nbytes(graph.values[t]) // n * s % align for t in boundary):
            s *= 2
        if s >= n:
            continue
        new_nodes.extend(graph.nodes[pos:b0])
        pos = b1
        for i0 in range(0, n, s):
            ni = min(s, n - i0)
            tag = f"[{i0}:{i0 + ni}]"

            def piece(t: str) -> str:
                if not t or graph.values[t].const is not None:
                    return t
                name = t + tag
                if name not in values:
                    v = graph.values[t]
                    values[name] = Value(name, v.dtype, (ni,) + tuple(v.shape[1:]))
                    if t in boundary:
                        per = _nbytes(v) // n
                        slices[name] = Slice(t, i0 * per, ni * per)
                return name

            for nd in seg:
                new_nodes.append(Node(nd.op_type, nd.name + tag, [piece(i) for i in nd.inputs],
                                      [piece(o) for o in nd.outputs], dict(nd.attrs), nd.domain, nd.proto))
        log.debug("sub-batches of %d images for %s .. %s", s, seg[0].name, seg[-1].name)
    if pos == 0:
        return graph, {}
    new_nodes.extend(graph.nodes[pos:])
    return Graph(new_nodes, values, list(graph.inputs), list(graph.outputs), graph.opsets, graph.name,
                 graph.ir_version), slices
