"""The offers a node's lowering makes to the planner, and which of them it takes.

A lowering may offer to read its input as a zero-padded image (LowerCtx.offer_padded_in), to
store its output as one (offer_padded_out), or to write an output over an input's buffer
(LowerCtx.may_update). Why a module of its own: taking an offer is a judgement over the whole
graph (readers, pinned tensors, shared buffers, later reads) and, for the padded pair, a second
lowering of both nodes; runtime.planning runs these between lowering and scheduling and gives
the padded tensors their buffers here (padded_slots). Pure data, no OpenCL.
"""
from __future__ import annotations

import logging

from ..ir import Graph
from .lowered import LoweredNode, Lowerer, nbytes, reads

log = logging.getLogger(__name__)


def take_padded_offers(graph: Graph, lowered: list, root: dict, pinned: set, lower: Lowerer) -> dict:
    """Pair a conv that reads its input as a zero-padded image (LowerCtx.offer_padded_in: a
    stride-1 implicit GEMM, which would copy X into that image first, im2col.cl conv_phases)
    with the 1x1 conv producing X (offer_padded_out: its GEMM can store there directly) when X
    has no other reader, is not handed back and shares no buffer. Both are lowered again with the
    layout fixed; X then gets a buffer of its own, zeroed once (only the pixels are ever written).
    Returns {tensor: PaddedLayout}. ResNet's bottlenecks: one launch and one pass over X fewer per
    stride-1 3x3."""
    maker = {o: k for k, e in enumerate(lowered) if not e.is_host for o in e.node.outputs if o}
    readers: dict = {}
    for e in lowered:
        for i in reads(e):
            readers[i] = readers.get(i, 0) + 1
    shared = set(root) | set(root.values())
    padded: dict = {}
    for k, e in enumerate(lowered):
        layout = e.ctx.offer_padded_in if e.ctx is not None else None
        x = e.node.inputs[0] if e.node.inputs else ""
        if layout is None or not x or x in pinned or x in shared or readers.get(x) != 1 or x not in maker:
            continue
        producer = lowered[maker[x]]
        if producer.ctx is None or not producer.ctx.offer_padded_out or producer.node.outputs[0] != x:
            continue
        launches, pctx = lower(producer.node, out_layout=layout)
        lowered[maker[x]] = LoweredNode(producer.node, launches, pctx)
        launches, ctx = lower(e.node, in_layout=layout)
        lowered[k] = LoweredNode(e.node, launches, ctx)
        padded[x] = layout
        log.debug("%s writes %s as %s's padded input", producer.node.name, x, e.node.name)
    return padded


def take_inplace_offers(graph: Graph, lowered: list, root: dict, pinned: set) -> None:
    """Let an output take over an input's buffer where its lowering offered it (LowerCtx.may_update,
    e.g. a FusedConv's residual: the GEMM adds Z and writes Y in place, no separate Y to allocate
    and fill) and it is safe: the input is an activation made on the device (not a constant, a
    graph input or a tensor handed back), of the output's size, read by this node only once, and
    neither it nor any tensor sharing its buffer is read later. Records root[output] = the
    input's buffer owner, as for views."""
    def r(name: str) -> str:
        return root.get(name, name)

    if not any(e.ctx is not None and e.ctx.inplace for e in lowered):
        return
    last_read = {i: idx for idx, e in enumerate(lowered) for i in reads(e)}
    made_on_device: set = set()
    members: dict = {}  # buffer owner -> the tensors sharing its buffer (views, slices)
    for t, owner in root.items():
        members.setdefault(owner, set()).add(t)
    for idx, e in enumerate(lowered):
        node = e.node
        for j, i in (e.ctx.inplace if e.ctx is not None else {}).items():
            out, src = node.outputs[j], node.inputs[i]
            if not out or not src or out in root:
                continue
            owner = r(src)
            sharing = [t for t in members.get(owner, set()) | {owner} if t != out]
            if (owner not in made_on_device or owner in pinned or any(t in pinned for t in sharing)
                    or graph.values[src].const is not None
                    or sum(r(x) == owner for x in node.inputs if x) != 1
                    or any(last_read.get(t, -1) > idx for t in sharing)
                    or nbytes(graph, out) != nbytes(graph, owner) or nbytes(graph, out) == 0):
                continue
            root[out] = owner
            members.setdefault(owner, set()).add(out)
            log.debug("%s: %s written in place of %s", node.name, out, src)
        if not e.is_host:
            made_on_device.update(r(o) for o in node.outputs if o)


def padded_slots(graph: Graph, padded: dict, first: dict, last: dict) -> tuple:
    """Buffers for the padded activations: tensors of one layout and shape whose lifetimes do not
    overlap share one (their padding is the same zeros, each producer rewrites every pixel):
    ResNet-50's 11 take 3. Returns ({tensor: slot}, [slot bytes])."""
    slot_of: dict = {}
    sizes: list = []
    free_at: dict = {}  # (layout, n, c) -> [(slot, last step using it)]
    for name in sorted(padded, key=lambda t: first.get(t, 0)):
        shape = graph.values[name].shape
        key = (padded[name], int(shape[0]), int(shape[1]))
        slots = free_at.setdefault(key, [])
        start, end = first.get(name, 0), last.get(name, first.get(name, 0))
        for i, (slot, busy_until) in enumerate(slots):
            if busy_until < start:
                slots[i] = (slot, end)
                break
        else:
            slot = len(sizes)
            sizes.append(padded[name].nbytes(key[1], key[2]))
            slots.append((slot, end))
        slot_of[name] = slot
    return slot_of, sizes


__all__ = ["padded_slots", "take_inplace_offers", "take_padded_offers"]
