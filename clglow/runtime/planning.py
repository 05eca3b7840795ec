"""Buffer plans: a specialised graph's lowered nodes turned into pure data (no OpenCL here).

Why this module exists: deciding *where every tensor lives and when* is separate from binding
kernels to OpenCL memory (runtime.binding) and from running them (runtime.executor), so the
planner can be read and unit-tested on its own (tests/test_planning.py), like runtime.memory.

`stage` places a specialised graph's nodes (partition.place on the session's Target) and, where
the target's policy allows it (sub_batch.budget), splits batched stretches into pieces.
`plan_buffers` then takes every node's lowering through a `Lowerer` callback (runtime.lowered;
so this module never builds a program: the callback, runtime.executor.NodeLowerer, starts the
builds), takes the offers those lowerings make where safe (runtime.offers) and returns a
`BufferPlan`:

- typed steps: `UploadStep` (a host-made tensor copied to the device), `KernelLaunchStep`,
  `HostNodeStep` (onnx.reference on the host), `NoopStep` (a device node without launches, e.g.
  a view: it still takes a step index for liveness);
- the padded and in-place offers taken (`padded`, and `root`: every view, in-place output and
  sub-batch slice -> the tensor owning its buffer);
- liveness intervals of activations and scratch buffers and their arena offsets
  (memory.plan_offsets), or whole shared buffers (memory.assign_buffers) when the arena would
  exceed the device's largest allocation;
- which graph inputs are uploaded and which are read on the host, which constants kernels read
  as they are, and which inputs and outputs a run may bind to the caller's arrays (zero copy:
  `zero_copy`, as (step, argument position) pairs).

Every tensor that device steps touch gets a `storage` key saying which buffer it is: tensors
with equal keys share one buffer object (views, in-place outputs, tensors of one shared slot).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

from ..config import PlanOptions
from ..errors import OutOfDeviceMemory, UnsupportedNode, UnsupportedOperator
from ..ir import Graph, Node, Value
from ..lower.base import Buf, Launch, Scratch
from ..lower.select import COUNT_DTYPE, SizedOutput, count_name, host_preferred, sized_at_run_time
from ..partition import DEVICE, HOST, Placement, place
from ..target import Target
from . import sub_batch
from .host import outer_scope_names
from .lowered import LoweredNode, Lowerer, lower_nodes, nbytes
from .memory import Interval, assign_buffers, plan_offsets
from .offers import padded_slots, take_inplace_offers, take_padded_offers


# --- steps ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class UploadStep:
    """Copy tensor `name`, made on the host by an earlier host step, into its device buffer."""

    name: str


@dataclass(frozen=True, eq=False)
class KernelLaunchStep:
    """One kernel launch of a device node."""

    node: Node
    launch: Launch


@dataclass(frozen=True, eq=False)
class HostNodeStep:
    """A node run on the host (onnx.reference): its device-made inputs are read back first."""

    node: Node


@dataclass(frozen=True, eq=False)
class NoopStep:
    """A device node with no launch (a view, an empty lowering): nothing runs, yet it counts as a
    step so that the tensors it reads stay live up to it."""

    node: Node


Step = Union[UploadStep, KernelLaunchStep, HostNodeStep, NoopStep]


# --- staging: placement and sub-batches ----------------------------------------------------------
@dataclass(frozen=True)
class SizedEnd:
    """A stage ending at a device op whose outputs are sized at run time (lower/select.py): its
    count tensor and each output's bound and counted axis."""

    node: str
    count: str
    outputs: dict  # output name -> SizedOutput

    def real_shapes(self, count: int) -> dict:
        return {name: so.real(count) for name, so in self.outputs.items()}


@dataclass
class Staged:
    """A specialised graph (nodes[:stop] when staged) placed on the target, maybe sub-batched."""

    graph: Graph  # the (sub)graph the plan runs, sub-batch pieces included
    placement: list  # [Placement] of the nodes before any sub-batch split (the placement report)
    where: dict  # node name -> DEVICE | HOST, sub-batch pieces included
    slices: dict = field(default_factory=dict)  # sub-batch piece tensor -> Slice of its whole tensor
    sized: list = field(default_factory=list)  # [SizedEnd]: its device ops sized at run time


def stage(graph: Graph, stop: Optional[int], outputs: Sequence[str], target: Target,
          options: PlanOptions) -> Staged:
    """Place nodes[:stop] (all when stop is None) on `target`; a stage's nodes whose output
    shapes depend on data run on the device when they are ops sized at run time (`SizedEnd`),
    else on the host; a static plan's per-image stretches are split into sub-batch pieces where
    sub_batch.budget(target, options) allows."""
    nodes = graph.nodes if stop is None else graph.nodes[:stop]
    sub = Graph(nodes, graph.values, graph.inputs, list(outputs), graph.opsets, graph.name, graph.ir_version)
    placement = place(sub, target, options.host_fallback)
    sized: list = []
    if stop is not None:
        for i, node in enumerate(nodes):
            if placement[i].where == DEVICE and any(o and not graph.values[o].is_static for o in node.outputs):
                sub, end = _data_sized(sub, i, placement, options)
                if end is not None:
                    sized.append(end)
    where = {p.node: p.where for p in placement}
    if stop is None:
        split_graph, slices = sub_batch.split(sub, {n for n, w in where.items() if w == DEVICE}, outputs,
                                              target, options)
        if slices:
            where = {n.name: where[n.name] if n.name in where else DEVICE for n in split_graph.nodes}
            return Staged(split_graph, placement, where, slices)
    return Staged(sub, placement, where, sized=sized)


def _data_sized(sub: Graph, i: int, placement: list, options: PlanOptions) -> tuple:
    """A device node (node i) whose output shapes depend on data: (the graph with the node
    sized at run time, its SizedEnd) where it is such an op (lower/select.py), else placed on the
    host (`placement` edited; SizedEnd None)."""
    node = sub.nodes[i]
    rule = sized_at_run_time(node)
    faster_on_host = host_preferred(node, sub) if options.host_fallback else None
    if faster_on_host is None and rule is not None:
        return _sized_end(sub, i, rule(node, sub))
    if faster_on_host is None and not options.host_fallback:
        raise UnsupportedOperator([UnsupportedNode(node.name, node.op_type, node.domain, sub.opset(node.domain),
                                                   "output shape depends on data; host fallback is disabled")])
    placement[i] = Placement(node.name, node.op_type, HOST, faster_on_host or "output shape depends on data")
    return sub, None


def _sized_end(sub: Graph, i: int, sized: list) -> tuple:
    """(`sub` with node i's outputs at their bound shapes and its count tensor added as its
    last output, the SizedEnd); the graph's values are copied, not edited."""
    node = sub.nodes[i]
    values = dict(sub.values)
    outs = [o for o in node.outputs if o]
    for o, so in zip(outs, sized):
        values[o] = Value(o, values[o].dtype, tuple(so.bound), None)
    cn = count_name(node)
    values[cn] = Value(cn, COUNT_DTYPE, (1,), None)
    end = Node(node.op_type, node.name, list(node.inputs), list(node.outputs) + [cn], dict(node.attrs),
               node.domain, node.proto, node.unfused)
    nodes = list(sub.nodes)
    nodes[i] = end
    g = Graph(nodes, values, sub.inputs, list(sub.outputs) + [cn], sub.opsets, sub.name, sub.ir_version)
    return g, SizedEnd(node.name, cn, {o: so for o, so in zip(outs, sized) if isinstance(so, SizedOutput)})


# --- the plan --------------------------------------------------------------------------------------
@dataclass
class BufferPlan:
    """Where every tensor of a staged graph lives and when: pure data for runtime.binding."""

    graph: Graph
    steps: list  # [Step]
    outputs: list  # the names handed back
    root: dict  # view / in-place output / sub-batch slice -> the tensor owning its buffer
    slices: dict  # sub-batch piece tensor -> Slice (bytes of its owner's buffer)
    device_inputs: list  # graph inputs uploaded before the first step
    host_inputs: list  # graph inputs host steps read
    consts: list  # constants kernels read as they are (uploaded once, by the session's weight cache)
    padded: dict  # tensor -> PaddedLayout: a zeroed buffer of its own (pad_slot)
    intervals: list  # [Interval] of activations and scratch buffers, planned together
    scratch: list  # [Interval] the scratch buffers among them (names: scratch_name)
    use_arena: bool  # one arena at `offsets`, else whole buffers (slot_of, slot_sizes)
    offsets: dict  # name -> (offset, size) in the arena
    arena_size: int
    slot_of: dict  # name -> whole-buffer slot (when not use_arena)
    slot_sizes: list
    pad_slot: dict  # padded tensor -> its buffer among pad_sizes
    pad_sizes: list
    planned_bytes: int  # the arena (or slots) and padded buffers
    storage: dict  # tensor -> its buffer's key (equal keys: one buffer object)
    zero_copy_enabled: bool = False  # planned with zero copy on (the target's policy and the options)
    zero_copy: dict = field(default_factory=dict)  # input/output -> [(step index, argument position)]
    bind_outputs_at: int = -1  # the first step holding a zero-copy output's buffer (-1: none)
    # input -> [(step index, argument position)]: inputs whose kernels may read another device
    # buffer in place of theirs (a previous stage's: zero_copy_binds(aligned=True))
    stage_binds: dict = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        """The tensor owning `name`'s buffer."""
        return self.root.get(name, name)

    @property
    def scratch_bytes(self) -> int:
        return sum(iv.nbytes for iv in self.scratch)


def scratch_name(node: str, slot: int) -> str:
    """The planner's name for a node's scratch buffer (NUL: never an ONNX tensor name)."""
    return f"\0scratch:{node}:{slot}"


def plan_buffers(staged: Staged, outputs: Sequence[str], lower: Lowerer, target: Target,
                 zero_copy: bool = False) -> BufferPlan:
    """The buffer plan of a staged graph: every device node lowered through `lower`, the padded
    and in-place offers taken where safe, steps with uploads at host -> device borders, liveness,
    arena offsets within `target`'s memory limits, and (when `zero_copy`) the inputs and
    outputs that may be bound to host arrays. Raises OutOfDeviceMemory before anything is
    allocated when a tensor or the whole plan cannot fit."""
    graph, slices, outputs = staged.graph, staged.slices, list(outputs)
    lowered, root, on_device = lower_nodes(graph, staged.where, slices, lower)
    pinned = set(graph.inputs) | set(outputs)
    padded = take_padded_offers(graph, lowered, root, pinned, lower)
    take_inplace_offers(graph, lowered, root, pinned)
    root = _compress(root)
    for name in slices:  # written by a piece: the whole tensor is made on the device
        if name in on_device:
            on_device.add(root[name])
    sched = _schedule(graph, lowered, root, on_device, slices, outputs)
    bp = _layout(graph, sched, root, slices, padded, outputs, target)
    bp.stage_binds = zero_copy_binds(bp, aligned=True)
    if zero_copy:
        bp.zero_copy_enabled = True
        bp.zero_copy = zero_copy_binds(bp)
        bp.bind_outputs_at = min((s for o in outputs if o in bp.zero_copy for s, _ in bp.zero_copy[o]),
                                 default=-1)
    return bp


def _compress(root: dict) -> dict:
    """Every entry pointing at the final owner (a view of an output later written in place
    points at the in-place owner, not at that output)."""
    out = {}
    for t in root:
        owner, seen = root[t], {t}
        while owner in root and owner not in seen:
            seen.add(owner)
            owner = root[owner]
        out[t] = owner
    return out


# --- steps and liveness ----------------------------------------------------------------------------
@dataclass
class _Schedule:
    """The step list with its transfers, and each buffer owner's first and last step."""

    steps: list = field(default_factory=list)
    device_inputs: list = field(default_factory=list)
    host_inputs: list = field(default_factory=list)
    consts: list = field(default_factory=list)
    first: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    scratch: dict = field(default_factory=dict)  # scratch name -> Interval

    def use(self, owner: str, idx: int) -> None:
        self.last[owner] = max(self.last.get(owner, -1), idx)


def _schedule(graph: Graph, lowered: list, root: dict, on_device: set, slices: dict,
              outputs: list) -> _Schedule:
    """Steps in node order, an upload before the first device read of a tensor a host step
    made (graph inputs: before the first step), liveness per buffer owner; outputs live to the
    end."""
    s = _Schedule()
    uploaded: set = set()
    graph_inputs = set(graph.inputs)
    for e in lowered:
        if e.is_host:
            _schedule_host(graph, e.node, root, on_device, graph_inputs, s)
        else:
            _schedule_device(graph, e, root, on_device, slices, graph_inputs, uploaded, s)
    end = len(s.steps)
    for o in outputs:
        if root.get(o, o) in on_device or o in on_device:
            rt = root.get(o, o)
            s.last[rt] = end
            s.first.setdefault(rt, 0)
    return s


def _schedule_host(graph: Graph, node: Node, root: dict, on_device: set, graph_inputs: set,
                   s: _Schedule) -> None:
    idx = len(s.steps)
    outer = [n for n in outer_scope_names(node) if n not in node.inputs and n in graph.values]
    for i in list(node.inputs) + outer:  # subgraph bodies (If/Loop/Scan) may read outer-scope values
        if i and (root.get(i, i) in on_device or i in on_device) and graph.values[i].const is None:
            s.use(root.get(i, i), idx)
        if i and i in graph_inputs and i not in s.host_inputs:
            s.host_inputs.append(i)
    s.steps.append(HostNodeStep(node))


def _schedule_device(graph: Graph, e: LoweredNode, root: dict, on_device: set, slices: dict,
                     graph_inputs: set, uploaded: set, s: _Schedule) -> None:
    node, launches = e.node, e.launches
    bound = {a.name for launch in launches for a in launch.args if isinstance(a, Buf)}
    read: list = []
    for i in node.inputs:
        if not i:
            continue
        owner = root.get(i, i)
        if graph.values[i].const is not None or graph.values[owner].const is not None:
            # constants a kernel reads as they are (or through a view): the weight cache's copy
            if i in bound and owner not in s.consts:
                s.consts.append(owner)
            continue
        read.append(owner)
        t = owner if i in slices else i  # a piece's slice: its whole tensor is what comes in
        if root.get(t, t) not in on_device and t not in uploaded:  # made on the host, or a graph input
            uploaded.add(t)
            on_device.add(t)
            if t in graph_inputs:  # uploaded before the first step
                s.first[t] = 0
                s.device_inputs.append(t)
            else:
                s.first[t] = len(s.steps)
                s.steps.append(UploadStep(t))
    idx = len(s.steps)  # the node's first launch, after its uploads: every input is read there
    for owner in read:
        s.use(owner, idx)
    for o in node.outputs:
        if o and (root.get(o, o) == o or o in slices):  # a slice's first writer starts its whole tensor
            rt = root.get(o, o)
            s.first.setdefault(rt, idx)
            s.use(rt, idx)
    node_first = len(s.steps)
    for launch in launches:
        for a in launch.args:
            if isinstance(a, Scratch):
                # live over all of this node's launches: from its first (the node's inputs count
                # as read there, yet later launches still read them) to its last use
                key = scratch_name(node.name, a.slot)
                iv = s.scratch.get(key)
                if iv is None:
                    s.scratch[key] = Interval(key, a.nbytes, node_first, len(s.steps))
                else:
                    iv.nbytes, iv.end = max(iv.nbytes, a.nbytes), len(s.steps)
        s.steps.append(KernelLaunchStep(node, launch))
    if not launches:
        s.steps.append(NoopStep(node))


# --- memory ----------------------------------------------------------------------------------------
def _layout(graph: Graph, s: _Schedule, root: dict, slices: dict, padded: dict, outputs: list,
            target: Target) -> BufferPlan:
    """Arena offsets (or shared slots) for the activations and scratch, buffers for the padded
    tensors, checked against the target's limits; every device tensor's storage key."""
    consts = set(s.consts)
    intervals = [Interval(name, nbytes(graph, name), s.first[name], s.last.get(name, s.first[name]))
                 for name in s.first if name not in consts and name not in padded]
    intervals.extend(s.scratch.values())
    for iv in intervals:
        if iv.nbytes > target.max_alloc_size:
            raise OutOfDeviceMemory(f"tensor {iv.name!r} needs {iv.nbytes} bytes, more than the device's largest "
                                    f"allocation ({target.max_alloc_size} bytes)", device=target.name)
    # One arena with every tensor at a planned offset (sub-buffers) when the device allows an
    # allocation that large; else whole buffers shared by tensors with disjoint lifetimes.
    offsets, arena_size = plan_offsets(intervals, target.base_align)
    use_arena = arena_size <= target.max_alloc_size
    slot_of: dict = {}
    slot_sizes: list = []
    if use_arena:
        planned = arena_size
    else:
        slot_of, slot_sizes = assign_buffers(intervals)
        planned = sum(slot_sizes)
    pad_slot, pad_sizes = padded_slots(graph, padded, s.first, s.last)
    planned += sum(pad_sizes)
    if planned > target.global_mem_size:
        raise OutOfDeviceMemory(f"the activations need {planned} bytes, more than the device's memory "
                                f"({target.global_mem_size} bytes)", device=target.name)
    bp = BufferPlan(graph, s.steps, outputs, root, slices, s.device_inputs, s.host_inputs, s.consts, padded,
                    intervals, list(s.scratch.values()), use_arena, offsets if use_arena else {}, arena_size,
                    slot_of, slot_sizes, pad_slot, pad_sizes, planned, {})
    bp.storage = _storage(bp)
    return bp


def _storage(bp: BufferPlan) -> dict:
    """tensor -> its buffer's key: ("arena", name) sub-buffers, ("slot", k) shared whole buffers,
    ("slice", name) a sub-batch piece's bytes of its owner, ("const", name), ("pad", k); a view
    or in-place output has its owner's key. Scratch buffers are not tensors (bound by name)."""
    graph = bp.graph
    storage: dict = {}
    names = bp.offsets if bp.use_arena else bp.slot_of
    for name in names:
        if not name.startswith("\0"):
            storage[name] = ("arena", name) if bp.use_arena else ("slot", bp.slot_of[name])
    for name in bp.slices:
        storage[name] = ("slice", name)
    for name in bp.consts:
        storage[name] = ("const", name)
    for name, slot in bp.pad_slot.items():
        storage[name] = ("pad", slot)
    for view, src in bp.root.items():
        if view in bp.slices:
            continue
        if src in storage:
            storage[view] = storage[src]
        elif graph.values[src].const is not None:
            storage[view] = storage[src] = ("const", src)
    return storage


# --- zero copy -------------------------------------------------------------------------------------
def zero_copy_binds(bp: BufferPlan, aligned: bool = False) -> dict:
    """The graph inputs and outputs a run may bind to host arrays instead of copying them (zero
    copy, as onnxruntime's CPU provider reads a numpy input where it lies and writes its outputs
    into the arrays it returns), for a target whose CL_MEM_USE_HOST_PTR buffers are host memory
    itself (Target.zero_copy). Bound, per run:
    - an input whose buffer (itself or a view's) only kernels read, each through unaligned loads
      (Buf.unaligned: a caller's array is aligned to its element only), to the caller's array;
    - an output whose buffer no other output, graph input or host step shares, to the array the
      run returns, allocated aligned like a device buffer (so any kernel may write it).
    Neither when the buffer is sliced into sub-batch pieces (sub-buffers of the arena's copy).
    No name is bound both ways: an input handed back as an output is copied.
    With `aligned` the inputs alone, for buffers at the device's base alignment (a previous run
    stage's, runtime.engine): any kernel may read those, unaligned loads or not, and one that
    no kernel reads (every reader empty at these shapes) is neither bound nor copied.
    Returns name -> [(step index, argument position)] for every kernel argument holding its buffer."""
    uses: dict = {}  # tensor -> [(step, argument position, read unaligned)]
    host_read: set = set()
    for k, st in enumerate(bp.steps):
        if isinstance(st, KernelLaunchStep):
            for pos, a in enumerate(st.launch.args):
                if isinstance(a, Buf):
                    uses.setdefault(a.name, []).append((k, pos, a.unaligned))
        elif isinstance(st, HostNodeStep):  # its inputs and what its subgraphs read (If/Loop/Scan)
            host_read.update(i for i in list(st.node.inputs) + outer_scope_names(st.node) if i)
        elif isinstance(st, UploadStep):  # written from the host
            host_read.add(st.name)
    sliced = {sl.whole for sl in bp.slices.values()} | set(bp.slices)
    inputs = set(bp.device_inputs)
    outputs = bp.outputs
    sharing: dict = {}  # storage key -> the tensors on that buffer
    for t, key in bp.storage.items():
        sharing.setdefault(key, []).append(t)
    binds: dict = {}
    for name in list(bp.device_inputs) + ([] if aligned else [o for o in outputs if o not in inputs]):
        key = bp.storage.get(name)
        if key is None or key[0] == "const":  # a folded output: the weight cache's buffer, never the caller's
            continue
        aliases = sharing[key]
        found = [u for t in aliases for u in uses.get(t, [])]
        if (not found and not aligned) or any(t in host_read or t in sliced for t in aliases):
            continue
        if name in inputs:
            if not (aligned or all(ok for _, _, ok in found)) or any(t in outputs for t in aliases):
                continue
        elif sum(t in outputs for t in aliases) > 1 or any(t in inputs for t in aliases):
            continue
        binds[name] = [(k, pos) for k, pos, _ in found]
    return binds


__all__ = ["BufferPlan", "HostNodeStep", "KernelLaunchStep", "NoopStep", "Staged", "Step", "UploadStep",
           "plan_buffers", "scratch_name", "stage", "zero_copy_binds"]
