"""Execution plans: a specialised graph turned into enqueued OpenCL work.

A `Plan` is built once per concrete input signature: every device node is
lowered to launches whose kernels are created and bound to their buffers up
front, buffers are planned by liveness and allocated once, weights come from
the session's upload cache. Running a plan is then a loop of enqueues on the
session's in-order queue (the caller's `wait_for` events on the first command;
each command's event kept for its outputs); the host is touched only at
host-fallback nodes and at the edges.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyopencl as cl

from .. import config
from ..errors import DeviceError, InvalidModel, OutOfDeviceMemory
from ..ir import Graph
from ..lower import LowerCtx, TensorInfo, lookup
from ..lower.base import Buf, ConstBuf, PaddedLayout, Scratch
from ..errors import UnsupportedNode, UnsupportedOperator
from ..partition import DEVICE, HOST, Placement, place
from .host import HostKernel, _outer_scope_names
from . import sub_batch
from .memory import Interval, assign_buffers, plan_offsets
from .sub_batch import Slice

log = logging.getLogger(__name__)


def cl_call(what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run an OpenCL call, turning pyopencl errors into clglow DeviceError/OutOfDeviceMemory."""
    try:
        return fn(*args, **kwargs)
    except cl.Error as e:
        raise cl_error(what, e) from None


def cl_error(what: str, e: cl.Error) -> DeviceError:
    """The clglow error for a failed OpenCL call (`what` says what was being done)."""
    code = getattr(e, "code", None)
    name = getattr(e, "routine", "") or ""
    status = _status_name(code)
    if status in ("MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES", "OUT_OF_HOST_MEMORY",
                  "INVALID_BUFFER_SIZE"):
        return OutOfDeviceMemory(f"{what} failed: {e}", status)
    return DeviceError(f"{what} failed ({name}): {e}", status)


def _status_name(code: Optional[int]) -> Optional[str]:
    if code is None:
        return None
    for k, v in vars(cl.status_code).items():
        if v == code and k.isupper():
            return k
    return str(code)


_live_lock = threading.Lock()
_live: dict = {}  # id(buffer) -> bytes, for every buffer clglow allocated and has not released


def device_alloc(context: cl.Context, nbytes: int, what: str, flags: int = cl.mem_flags.READ_WRITE) -> cl.Buffer:
    """Every device allocation of clglow goes through here: errors become OutOfDeviceMemory /
    DeviceError naming `what`, and live buffers are counted (tests patch this to inject faults)."""
    buf = cl_call(f"allocating {what} ({nbytes} bytes)", cl.Buffer, context, flags, max(int(nbytes), 4))
    with _live_lock:
        _live[id(buf)] = buf.size
    return buf


def device_free(buf: cl.Buffer) -> None:
    with _live_lock:
        _live.pop(id(buf), None)
    buf.release()


def live_buffers() -> tuple:
    """(count, bytes) of device buffers allocated by clglow and not yet released."""
    with _live_lock:
        return len(_live), sum(_live.values())


class WeightCache:
    """Device copies of constants (weights, packed panels, index tables), uploaded once per session."""

    def __init__(self, context: cl.Context, queue: cl.CommandQueue):
        self.context, self.queue = context, queue
        self._buffers: dict[str, cl.Buffer] = {}
        self._keep: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def get(self, key: str, array: np.ndarray) -> cl.Buffer:
        with self._lock:
            buf = self._buffers.get(key)
            if buf is None:
                arr = np.ascontiguousarray(array)
                if arr.dtype == np.bool_:
                    arr = arr.astype(np.uint8)
                buf = device_alloc(self.context, arr.nbytes, f"constant {key!r}", cl.mem_flags.READ_ONLY)
                if arr.nbytes:
                    cl_call(f"uploading constant {key!r}", cl.enqueue_copy, self.queue, buf, arr, is_blocking=True)
                self._buffers[key] = buf
            return buf

    def get_const(self, name: str, array: np.ndarray) -> cl.Buffer:
        """The device copy of constant tensor `name`. Keyed by the array's identity too: a constant
        folded at one input shape shares its name with the one folded at another."""
        key = f"{name}@{id(array):x}"
        buf = self.get(key, array)
        self._keep[key] = array  # holds the id while the buffer exists
        return buf

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self._buffers.values())

    def release(self) -> None:
        with self._lock:
            for b in self._buffers.values():
                device_free(b)
            self._buffers.clear()
            self._keep.clear()


@dataclass
class KernelStep:
    kernel: cl.Kernel
    gsize: tuple
    lsize: Optional[tuple]
    writes: list  # the tensors (buffer owners) it writes: their events are kept for readers
    label: str
    kernel_name: str
    op_type: str


@dataclass
class HostStep:
    impl: HostKernel
    inputs: list
    outputs: list
    label: str
    op_type: str


@dataclass
class Plan:
    """Everything needed to run one specialised (sub)graph."""

    graph: Graph
    placement: list[Placement]
    steps: list
    device_tensors: dict  # name -> cl.Buffer (activations, views and weights that device steps touch)
    host_inputs: list  # graph inputs needed on the host
    device_inputs: list  # graph inputs uploaded to the device
    outputs: list  # names this plan hands back on the host
    stop: Optional[int]  # None, or the number of nodes this stage covers (dynamic shapes)
    arena_bytes: int  # activations and scratch buffers, planned together by liveness
    scratch_bytes: int  # the scratch buffers' sizes summed (informative: they live inside the arena)
    n_launches: int
    root: dict = field(default_factory=dict)  # view tensor -> tensor owning the buffer
    # graph input or output -> every (kernel, argument position) holding its buffer, for those
    # bound to host arrays without a copy (see _zero_copy_binds, execute)
    host_binds: dict = field(default_factory=dict)
    bound_to_host: set = field(default_factory=set)  # inputs/outputs whose kernels now hold a host array
    bind_outputs_at: int = -1  # the first step touching a bound output's buffer (-1: none)
    orphans: list = field(default_factory=list)  # (marker, host buffers) of failed runs still in flight
    next_stages: dict = field(default_factory=dict)
    _buffers: list = field(default_factory=list)

    def release(self) -> None:
        for b in self._buffers:
            device_free(b)
        self._buffers.clear()
        for st in self.next_stages.values():
            st.release()


def _tensor_info(graph: Graph, name: str) -> Optional[TensorInfo]:
    if not name:
        return None
    v = graph.values[name]
    return TensorInfo(name, np.dtype(v.dtype), tuple(int(d) for d in v.shape))


def _nbytes(graph: Graph, name: str) -> int:
    v = graph.values[name]
    dtype = np.dtype(np.uint8) if np.dtype(v.dtype) == np.bool_ else np.dtype(v.dtype)
    return int(np.prod(v.shape, dtype=np.int64)) * dtype.itemsize


def _scratch_name(node: str, slot: int) -> str:
    """The planner's name for a node's scratch buffer (NUL: never an ONNX tensor name)."""
    return f"\0scratch:{node}:{slot}"


def prewarm(graph: Graph, stop: Optional[int], device, host_fallback: bool, memo: dict) -> None:
    """Lower a specialised graph's device nodes (nodes[:stop] when staged) only to start their
    programs building and their code generating (Device.prepare), e.g. while a cold start's GEMM
    tuner still measures: lowered with the tiles the device has now, which the tuner keeps
    unless another candidate wins clearly. Best effort: anything that fails here is left for
    build_plan to report. `memo` keeps the derived constants (packed weights) for build_plan;
    its keys name source arrays by id, so the caller keeps `graph` alive as long as `memo`."""
    nodes = graph.nodes if stop is None else graph.nodes[:stop]
    try:
        sub = Graph(nodes, graph.values, graph.inputs, list(graph.outputs), graph.opsets, graph.name,
                    graph.ir_version)
        for p, node in zip(place(sub, device.info, host_fallback), nodes):
            if p.where == DEVICE and not lookup(node).view:
                _lower_node(node, graph, device, memo=memo)
    except Exception as e:  # noqa: BLE001 - an optimisation; build_plan reports real problems
        log.debug("prewarming %s stopped: %s", graph.name, e)


def build_plan(graph: Graph, stop: Optional[int], outputs: Sequence[str], device, weights: WeightCache,
               host_fallback: bool = True, memo: Optional[dict] = None) -> Plan:
    """Lower a specialised graph (nodes[:stop] when staged) into a ready-to-run Plan. `memo`:
    derived constants computed earlier for it (prewarm)."""
    nodes = graph.nodes if stop is None else graph.nodes[:stop]
    sub = Graph(nodes, graph.values, graph.inputs, list(outputs), graph.opsets, graph.name, graph.ir_version)
    placement = place(sub, device.info, host_fallback)
    if stop is not None and placement and placement[-1].where == DEVICE:
        # the last node of a stage has data-dependent output shapes: only the host can run it
        last_node = nodes[-1]
        if not host_fallback:
            raise UnsupportedOperator([UnsupportedNode(last_node.name, last_node.op_type, last_node.domain,
                                                       graph.opset(last_node.domain),
                                                       "output shape depends on data; host fallback is disabled")])
        placement[-1] = Placement(last_node.name, last_node.op_type, HOST, "output shape depends on data")
    where = {p.node: p.where for p in placement}
    slices: dict[str, Slice] = {}
    if stop is None:  # per-image stretches of a batch run a few images at a time (runtime.sub_batch)
        split_graph, slices = sub_batch.split(sub, {n for n, w in where.items() if w == DEVICE}, outputs,
                                              device.info)
        if slices:
            graph = sub = split_graph
            nodes = sub.nodes
            where = {n.name: where[n.name] if n.name in where else DEVICE for n in nodes}

    # 1. lower every node; work out which tensors live on the device
    lowered: list = []  # (node, launches | None, is_host)
    # view output (or output updating an input in place, or a sub-batch piece that is a slice of a
    # whole tensor) -> underlying tensor
    root: dict[str, str] = {name: sl.whole for name, sl in slices.items()}
    on_device: set = set()
    ctxs: dict[str, LowerCtx] = {}  # device node name -> its lowering context
    memo = {} if memo is None else memo  # derived constants (packed weights) for this plan, by key
    for node in nodes:
        if where[node.name] == DEVICE:
            if lookup(node).view:
                src = node.inputs[0]
                root[node.outputs[0]] = root.get(src, src)
                lowered.append((node, [], False))
                on_device.add(node.outputs[0])
                continue
            launches, ctxs[node.name] = _lower_node(node, graph, device, memo=memo)
            lowered.append((node, launches, False))
            on_device.update(o for o in node.outputs if o)
        else:
            lowered.append((node, None, True))

    pinned = set(graph.inputs) | set(outputs)
    padded = _take_padded_offers(graph, lowered, ctxs, root, pinned, device, memo)
    _take_inplace_offers(graph, lowered, ctxs, root, pinned)
    for name in slices:  # a whole tensor that is itself a view: its slices are of the owner's buffer
        while root[name] in root:
            root[name] = root[root[name]]
        if name in on_device:  # written by a piece: the whole tensor is made on the device
            on_device.add(root[name])

    # 2. the step list with transfers at the borders; liveness per root tensor
    def r(name: str) -> str:
        return root.get(name, name)

    steps: list = []
    device_inputs: list = []
    host_inputs: list = []
    uploaded: set = set()
    downloads_needed: set = set()
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    consts_on_device: set = set()
    scratch_ivs: dict[str, Interval] = {}  # scratch buffers, planned in the arena with the activations

    def use(name: str, idx: int) -> None:
        rt = r(name)
        last[rt] = max(last.get(rt, -1), idx)

    graph_inputs = set(graph.inputs)
    for node, launches, is_host in lowered:
        idx = len(steps)
        if is_host:  # subgraph bodies (If/Loop/Scan) may read outer-scope values too
            outer = [n for n in _outer_scope_names(node) if n not in node.inputs and n in graph.values]
            for i in list(node.inputs) + outer:
                if i and (r(i) in on_device or i in on_device) and graph.values[i].const is None:
                    downloads_needed.add(i)
                    use(i, idx)
                if i and i in graph_inputs and i not in host_inputs:
                    host_inputs.append(i)
            steps.append(("host", node))
            continue
        bound = {a.name for launch in launches for a in launch.args if isinstance(a, Buf)}
        for i in node.inputs:
            if not i:
                continue
            v = graph.values[i]
            if v.const is not None:
                if i in bound:  # constants a kernel reads as they are (packed copies come as ConstBuf)
                    consts_on_device.add(i)
                continue
            t = r(i) if i in slices else i  # a piece's slice: its whole tensor is what comes in
            if r(t) not in on_device and t not in uploaded:  # produced on the host or a graph input
                uploaded.add(t)
                on_device.add(t)
                first[t] = idx
                if t in graph_inputs:  # uploaded before the first step
                    first[t] = 0
                    device_inputs.append(t)
                else:
                    steps.append(("upload", t))
                    idx = len(steps)
            use(i, idx)
        for o in node.outputs:
            if o and (r(o) == o or o in slices):  # a slice's first writer starts its whole tensor
                first.setdefault(r(o), idx)
                last[r(o)] = max(last.get(r(o), -1), idx)
        node_first = len(steps)
        for launch in launches:
            for a in launch.args:
                if isinstance(a, Scratch):
                    # live over all of this node's launches: from its first (the node's inputs
                    # count as read there, yet later launches still read them) to its last use
                    key = _scratch_name(node.name, a.slot)
                    iv = scratch_ivs.get(key)
                    if iv is None:
                        scratch_ivs[key] = Interval(key, a.nbytes, node_first, len(steps))
                    else:
                        iv.nbytes, iv.end = max(iv.nbytes, a.nbytes), len(steps)
            steps.append(("kernel", node, launch))
        if not launches:
            steps.append(("noop", node))
    end = len(steps)
    out_set = list(outputs)
    for o in out_set:
        if r(o) in on_device or o in on_device:
            rt = r(o)
            last[rt] = end
            first.setdefault(rt, 0)

    # 3. allocate: activations and scratch planned together by liveness
    intervals = []
    for name in first:
        if name in consts_on_device or name in padded:  # padded: a zeroed buffer of its own (below)
            continue
        intervals.append(Interval(name, _nbytes(graph, name), first[name], last.get(name, first[name])))
    intervals.extend(scratch_ivs.values())
    for iv in intervals:  # checked before anything is allocated
        if iv.nbytes > device.info.max_alloc_size:
            raise OutOfDeviceMemory(f"tensor {iv.name!r} needs {iv.nbytes} bytes, more than the device's largest "
                                    f"allocation ({device.info.max_alloc_size} bytes)", device=device.info.name)
    # One arena with every tensor at a planned offset (sub-buffers) when the device allows an
    # allocation that large; else whole buffers shared by tensors with disjoint lifetimes.
    offsets, arena_size = plan_offsets(intervals, device.info.base_align)
    use_arena = arena_size <= device.info.max_alloc_size
    if use_arena:
        planned = arena_size
    else:
        assignment, slot_sizes = assign_buffers(intervals)
        planned = sum(slot_sizes)
    pad_slot, pad_sizes = _padded_slots(graph, padded, first, last)
    planned += sum(pad_sizes)
    if planned > device.info.global_mem_size:
        raise OutOfDeviceMemory(f"the activations need {planned} bytes, more than the device's memory "
                                f"({device.info.global_mem_size} bytes)", device=device.info.name)
    buffers: list = []
    try:
        region: dict = {}  # tensor or scratch name -> its cl.Buffer
        if use_arena:
            arena = device_alloc(device.context, arena_size, "the activation arena")
            buffers.append(arena)
            for name, (off, size) in offsets.items():
                region[name] = cl_call(f"carving {name!r} from the arena", arena.get_sub_region, off, size)
            place_of = {name: (arena, off) for name, (off, _) in offsets.items()}
        else:
            slots = []
            for size in slot_sizes:
                b = device_alloc(device.context, size, "an activation buffer")
                buffers.append(b)
                slots.append(b)
            region = {name: slots[s] for name, s in assignment.items()}
            place_of = {name: (slots[s], 0) for name, s in assignment.items()}
        for name, sl in slices.items():  # images [i0, i0 + n) of the whole tensor, in place
            owner = r(name)
            if owner not in place_of:
                raise InvalidModel(f"sub-batch piece {name!r} of {owner!r} has no device buffer")
            base, off = place_of[owner]
            region[name] = cl_call(f"carving {name!r} from {owner!r}", base.get_sub_region, off + sl.offset,
                                   sl.nbytes)
        device_tensors: dict = {}
        for name, b in region.items():
            if not name.startswith("\0"):  # scratch buffers are bound by their own name
                device_tensors[name] = b
        for name in consts_on_device:
            device_tensors[name] = weights.get_const(name, graph.values[name].const)
        pad_bufs = []
        for nbytes in pad_sizes:
            b = device_alloc(device.context, nbytes, "a padded activation")
            buffers.append(b)
            pad_bufs.append(b)
            cl_call("zeroing a padded activation", cl.enqueue_fill_buffer, weights.queue, b, np.float32(0), 0,
                    nbytes).wait()
        for name, slot in pad_slot.items():
            device_tensors[name] = pad_bufs[slot]
        for view, src in root.items():
            if view in slices:
                continue  # bound to its own sub-region above
            if src in device_tensors:
                device_tensors[view] = device_tensors[src]
            elif graph.values[src].const is not None:
                device_tensors[view] = device_tensors[src] = weights.get_const(src, graph.values[src].const)

        # 4. kernels bound to their arguments, once
        final_steps: list = []
        buf_uses: dict = {}  # tensor -> [(kernel, argument position, read unaligned)]
        n_launches = 0
        for st in steps:
            kind = st[0]
            if kind == "host":
                node = st[1]
                final_steps.append(HostStep(HostKernel(node, graph), [i for i in node.inputs], 
                                            [o for o in node.outputs], node.name, node.op_type))
            elif kind == "upload":
                final_steps.append(("upload", st[1]))
            elif kind == "kernel":
                node, launch = st[1], st[2]
                prg = device.program(launch.program, launch.build_options())
                try:
                    knl = cl.Kernel(prg, launch.kernel)
                except cl.Error as e:
                    raise InvalidModel(f"kernel {launch.kernel!r} not found in {launch.program}.cl: {e}",
                                       node=node.name) from None
                args = []
                writes = []
                for a in launch.args:
                    if isinstance(a, Buf):
                        if a.name not in device_tensors:
                            raise InvalidModel(f"tensor {a.name!r} has no device buffer", node=node.name)
                        buf_uses.setdefault(a.name, []).append((knl, len(args), a.unaligned))
                        args.append(device_tensors[a.name])
                        if a.name in node.outputs:
                            writes.append(r(a.name))
                    elif isinstance(a, Scratch):
                        args.append(region[_scratch_name(node.name, a.slot)])
                    elif isinstance(a, ConstBuf):
                        args.append(weights.get("const:" + a.key, a.array))
                    else:
                        args.append(a)
                try:
                    knl.set_args(*args)
                except (cl.Error, TypeError, ValueError) as e:
                    raise InvalidModel(f"binding arguments of kernel {launch.kernel!r} failed: {e}",
                                       node=node.name) from None
                final_steps.append(KernelStep(knl, tuple(int(x) for x in launch.gsize),
                                              None if launch.lsize is None else tuple(int(x) for x in launch.lsize),
                                              writes, node.name, launch.kernel, node.op_type))
                n_launches += 1
        host_binds = _zero_copy_binds(device, device_inputs, device_tensors, buf_uses, slices, out_set,
                                      final_steps) if config.zero_copy() else {}
        out_kernels = {id(knl) for o in out_set if o in host_binds for knl, _ in host_binds[o]}
        bind_at = next((i for i, st in enumerate(final_steps)
                        if isinstance(st, KernelStep) and id(st.kernel) in out_kernels), -1)
        return Plan(sub, placement, final_steps, device_tensors, host_inputs, device_inputs, out_set, stop,
                    planned, sum(iv.nbytes for iv in scratch_ivs.values()), n_launches, root=root,
                    host_binds=host_binds, bind_outputs_at=bind_at, _buffers=buffers)
    except BaseException:  # a failed plan gives back what it allocated: the session stays usable
        for b in buffers:
            device_free(b)
        raise


def _zero_copy_binds(device, device_inputs: Sequence[str], device_tensors: dict, buf_uses: dict,
                     slices: dict, outputs: Sequence[str], steps: Sequence) -> dict:
    """The graph inputs and outputs a run may bind to host arrays instead of copying them (zero
    copy, as onnxruntime's CPU provider reads a numpy input where it lies and writes its outputs
    into the arrays it returns), on a device whose CL_MEM_USE_HOST_PTR buffers are host memory
    itself (DeviceInfo.host_memory). Bound, per run:
    - an input whose buffer (itself or a view's) only kernels read, each through unaligned loads
      (Buf.unaligned: a caller's array is aligned to its element only), to the caller's array;
    - an output whose buffer no other output, graph input or host step shares, to the array the
      run returns, allocated aligned like a device buffer (so any kernel may write it).
    Neither when the buffer is sliced into sub-batch pieces (sub-buffers of the arena's copy).
    No name is bound both ways: an input handed back as an output is copied.
    Returns name -> [(kernel, argument position)] for every kernel argument holding its buffer."""
    if not device.info.host_memory:
        return {}
    host_read = {i for st in steps if isinstance(st, HostStep) for i in st.inputs if i}
    host_read |= {st[1] for st in steps if isinstance(st, tuple)}  # uploads: written from the host
    sliced = {sl.whole for sl in slices.values()} | set(slices)
    inputs = set(device_inputs)
    binds: dict = {}
    for name in list(device_inputs) + [o for o in outputs if o not in inputs]:
        buf = device_tensors.get(name)
        if buf is None:
            continue
        aliases = [t for t, b in device_tensors.items() if b is buf]
        uses = [u for t in aliases for u in buf_uses.get(t, [])]
        if not uses or any(t in host_read or t in sliced for t in aliases):
            continue
        if name in inputs:
            if not all(ok for _, _, ok in uses) or any(t in outputs for t in aliases):
                continue
        elif sum(t in outputs for t in aliases) > 1 or any(t in inputs for t in aliases):
            continue
        binds[name] = [(knl, pos) for knl, pos, _ in uses]
    return binds


def _host_buffer(context: cl.Context, arr: np.ndarray, writable: bool = False) -> Optional[cl.Buffer]:
    """A buffer that is `arr`'s memory itself (CL_MEM_USE_HOST_PTR), or None when the array
    cannot be one (not float-aligned, read-only memory pyopencl will not wrap)."""
    if arr.ctypes.data % 4:
        return None
    flags = (cl.mem_flags.READ_WRITE if writable else cl.mem_flags.READ_ONLY) | cl.mem_flags.USE_HOST_PTR
    try:
        return cl.Buffer(context, flags, hostbuf=arr)
    except (cl.Error, TypeError, ValueError, BufferError):
        return None


def _aligned_empty(shape: tuple, dtype: np.dtype, align: int) -> np.ndarray:
    """An uninitialised array whose data starts on an `align`-byte boundary (a device buffer's
    base alignment: kernels may store aligned vectors into it)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _bind(plan: Plan, name: str, buf: cl.Buffer, host: bool) -> None:
    """Point the kernels that hold `name`'s buffer at `buf`: a host array's (`host`) or the
    tensor's own device buffer again. execute() binds every name of plan.host_binds each run
    before the first step touching it, so no kernel is enqueued still holding an earlier run's
    host buffer (released, its memory the caller's again); nothing else enqueues plan steps."""
    if not host and name not in plan.bound_to_host:
        return  # already bound to its device buffer
    for knl, pos in plan.host_binds[name]:
        knl.set_arg(pos, buf)
    if host:
        plan.bound_to_host.add(name)
    else:
        plan.bound_to_host.discard(name)


def _lower_node(node, graph: Graph, device, in_layout: Optional[PaddedLayout] = None,
                out_layout: Optional[PaddedLayout] = None, memo: Optional[dict] = None) -> tuple:
    """(launches, LowerCtx) of one device node; its programs start building (and warming up)
    while the rest of the model loads. `memo`: the plan's derived constants (LowerCtx.derived)."""
    ctx = LowerCtx(node, graph, [_tensor_info(graph, i) for i in node.inputs],
                   [_tensor_info(graph, o) for o in node.outputs if o], device.info)
    ctx.in_layout, ctx.out_layout = in_layout, out_layout
    ctx.derived_memo = memo
    try:
        launches = lookup(node).lower(ctx)
    except (InvalidModel, DeviceError):
        raise
    except Exception as e:
        raise InvalidModel(f"lowering {node.op_type} failed: {e}", node=node.name) from e
    for launch in launches:
        device.prepare(launch.program, launch.build_options(), launch.kernel, launch.lsize, launch.noop_args)
    return launches, ctx


def _padded_slots(graph: Graph, padded: dict, first: dict, last: dict) -> tuple:
    """Buffers for the padded activations: tensors of one layout and shape whose lifetimes do not
    overlap share one (their padding is the same zeros, each producer rewrites every pixel):
    ResNet-50's 11 take 3. Returns ({tensor: slot}, [slot bytes])."""
    slot_of: dict[str, int] = {}
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


def _reads(node, is_host: bool) -> list:
    """The tensors a node reads: its inputs, and for a host node the outer-scope names its
    subgraphs (If/Loop/Scan bodies) use."""
    return [i for i in list(node.inputs) + (_outer_scope_names(node) if is_host else []) if i]


def _readers(lowered: list) -> dict:
    """tensor name -> how many times nodes read it."""
    count: dict[str, int] = {}
    for node, _, is_host in lowered:
        for i in _reads(node, is_host):
            count[i] = count.get(i, 0) + 1
    return count


def _take_padded_offers(graph: Graph, lowered: list, ctxs: dict, root: dict, pinned: set, device,
                        memo: Optional[dict] = None) -> dict:
    """Pair a conv that reads its input as a zero-padded image (LowerCtx.offer_padded_in: a
    stride-1 implicit GEMM, which would copy X into that image first, im2col.cl conv_phases)
    with the 1x1 conv producing X (offer_padded_out: its GEMM can store there directly) when X
    has no other reader, is not handed back and shares no buffer. Both are lowered again with the
    layout fixed; X then gets a buffer of its own, zeroed once (only the pixels are ever written).
    Returns {tensor: PaddedLayout}. ResNet's bottlenecks: one launch and one pass over X fewer per
    stride-1 3x3."""
    maker = {o: k for k, (node, _, is_host) in enumerate(lowered) if not is_host for o in node.outputs if o}
    readers = _readers(lowered)
    shared = set(root) | set(root.values())
    padded: dict[str, PaddedLayout] = {}
    for k, (node, _, is_host) in enumerate(lowered):
        ctx = ctxs.get(node.name)
        layout = ctx.offer_padded_in if ctx is not None else None
        x = node.inputs[0] if node.inputs else ""
        if layout is None or not x or x in pinned or x in shared or readers.get(x) != 1 or x not in maker:
            continue
        pk = maker[x]
        producer = lowered[pk][0]
        pctx = ctxs.get(producer.name)
        if pctx is None or not pctx.offer_padded_out or producer.outputs[0] != x:
            continue
        launches, pctx2 = _lower_node(producer, graph, device, out_layout=layout, memo=memo)
        lowered[pk], ctxs[producer.name] = (producer, launches, False), pctx2
        launches, ctx2 = _lower_node(node, graph, device, in_layout=layout, memo=memo)
        lowered[k], ctxs[node.name] = (node, launches, False), ctx2
        padded[x] = layout
        log.debug("%s writes %s as %s's padded input", producer.name, x, node.name)
    return padded


def _take_inplace_offers(graph: Graph, lowered: list, ctxs: dict, root: dict, pinned: set) -> None:
    """Let an output take over an input's buffer where its lowering offered it (LowerCtx.may_update,
    e.g. a FusedConv's residual: the GEMM adds Z and writes Y in place, no separate Y to allocate
    and fill) and it is safe: the input is an activation made on the device (not a constant, a
    graph input or a tensor handed back), of the output's size, read by this node only once, and
    neither it nor any tensor sharing its buffer is read later. Records root[output] = the
    input's buffer owner, as for views."""
    def r(name: str) -> str:
        return root.get(name, name)

    if not any(c.inplace for c in ctxs.values()):
        return
    last_read = {i: idx for idx, (node, _, is_host) in enumerate(lowered) for i in _reads(node, is_host)}
    made_on_device: set = set()
    members: dict[str, set] = {}  # buffer owner -> the tensors sharing its buffer (views, slices)
    for t, owner in root.items():
        members.setdefault(owner, set()).add(t)
    for idx, (node, _, is_host) in enumerate(lowered):
        ctx = ctxs.get(node.name)
        for j, i in (ctx.inplace if ctx is not None else {}).items():
            out, src = node.outputs[j], node.inputs[i]
            if not out or not src or out in root:
                continue
            owner = r(src)
            sharing = [t for t in members.get(owner, set()) | {owner} if t != out]
            if (owner not in made_on_device or owner in pinned or any(t in pinned for t in sharing)
                    or graph.values[src].const is not None
                    or sum(r(x) == owner for x in node.inputs if x) != 1
                    or any(last_read.get(t, -1) > idx for t in sharing)
                    or _nbytes(graph, out) != _nbytes(graph, owner) or _nbytes(graph, out) == 0):
                continue
            root[out] = owner
            members.setdefault(owner, set()).add(out)
            log.debug("%s: %s written in place of %s", node.name, out, src)
        if not is_host:
            made_on_device.update(r(o) for o in node.outputs if o)


@dataclass
class RunRecord:
    """What one run enqueued, for profiling."""

    kernel_events: list = field(default_factory=list)  # (label, kernel name, op type, cl.Event)


def execute(plan: Plan, device, queue: cl.CommandQueue, feeds: dict, wait_for: Sequence[cl.Event] = (),
            record: Optional[RunRecord] = None, device_feeds: Optional[dict] = None,
            dest: Optional[dict] = None, hold: Optional[list] = None) -> tuple[dict, list]:
    """Enqueue one run of `plan`. Returns (host outputs dict, pending events).

    Host outputs are numpy arrays being filled by non-blocking reads: they are valid once every
    returned event has completed. `device_feeds` maps input names to caller cl.Buffers (copied on device);
    `dest` maps output names to caller numpy arrays / cl.Buffers to write into directly. When `hold`
    is given, every event and staging array of the run is appended to it: keep it until the run is done
    (a run that returns before its inputs are ready must not block on dropping them).
    """
    graph = plan.graph
    values: dict[str, np.ndarray] = {}
    events: dict[str, cl.Event] = {}
    keepalive: list = []
    ext_wait = list(wait_for)
    # The queue is in order: each command starts after the one before it has finished, so a
    # kernel names no events of this run, and only the caller's (ext_wait) until one command has
    # waited for them. Building wait lists per kernel cost as much host time as pyopencl's enqueue
    # itself (ResNet-50: 1.7 ms of enqueueing per run, on a core pocl's threads need).
    kernel_wait: Optional[list] = ext_wait or None

    device_feeds = device_feeds or {}
    if plan.orphans:  # host buffers of failed runs, kept until their kernels are done
        done = cl.command_execution_status.COMPLETE
        plan.orphans[:] = [o for o in plan.orphans if o[0].command_execution_status != done]
    zero_copied = False
    for name in plan.device_inputs:
        buf = plan.device_tensors[name]
        zero_copy = name in plan.host_binds
        if name in device_feeds:
            if zero_copy:
                _bind(plan, name, buf, host=False)
            src = device_feeds[name]
            nb = _nbytes(graph, name)
            if nb:
                events[name] = cl_call(f"copying input {name!r}", cl.enqueue_copy, queue, buf, src,
                                       byte_count=nb, wait_for=ext_wait or None)
                kernel_wait = None
            continue
        arr = np.ascontiguousarray(feeds[name])
        if arr.dtype == np.bool_:
            arr = arr.view(np.uint8)
        keepalive.append(arr)
        if zero_copy:  # the kernels read the caller's array where it lies (kept until the run ends)
            host_buf = _host_buffer(device.context, arr) if arr.nbytes else None
            if host_buf is not None:
                _bind(plan, name, host_buf, host=True)
                keepalive.append(host_buf)
                zero_copied = True
                continue
            _bind(plan, name, buf, host=False)
        if arr.nbytes:
            events[name] = cl_call(f"uploading input {name!r}", cl.enqueue_copy, queue, buf, arr,
                                   is_blocking=False, wait_for=ext_wait or None)
            kernel_wait = None
    for name in plan.host_inputs:
        values[name] = feeds[name] if feeds.get(name) is not None else _download_now(plan, queue, name, device_feeds)
    # Outputs the kernels write straight into the arrays this run returns, allocated and bound
    # just before the first kernel that touches them: a run's first kernels are enqueued sooner
    # (ResNet-50 b1: 0.29 ms from run() to the first enqueue when allocated up front; the
    # interpreter's memory is cold after a run has streamed the weights through the caches).
    direct: dict = {}

    def bind_outputs() -> None:
        for name in plan.outputs:
            if name not in plan.host_binds:
                continue
            if (dest or {}).get(name) is None:
                v = graph.values[name]
                dtype = np.dtype(v.dtype)
                arr = _aligned_empty(tuple(int(d) for d in v.shape),
                                     np.dtype(np.uint8) if dtype == np.bool_ else dtype, device.info.base_align)
                host_buf = _host_buffer(device.context, arr, writable=True) if arr.nbytes else None
                if host_buf is not None:
                    _bind(plan, name, host_buf, host=True)
                    keepalive.append(host_buf)
                    direct[name] = arr.view(np.bool_) if dtype == np.bool_ else arr
                    continue
            _bind(plan, name, plan.device_tensors[name], host=False)

    def host_value(name: str) -> np.ndarray:
        if name in values:
            return values[name]
        v = graph.values[name]
        if v.const is not None:
            return v.const
        values[name] = _read(plan, queue, name, events, wait=True)
        return values[name]

    bind_at = plan.bind_outputs_at
    try:
        for step_index, st in enumerate(plan.steps):
            if step_index == bind_at:
                bind_outputs()
            if isinstance(st, KernelStep):
                try:
                    ev = cl.enqueue_nd_range_kernel(queue, st.kernel, st.gsize, st.lsize, wait_for=kernel_wait)
                except cl.Error as e:
                    raise cl_error(f"enqueueing {st.kernel_name} for node {st.label!r}", e) from None
                kernel_wait = None
                for w in st.writes:
                    events[w] = ev
                if record is not None:
                    record.kernel_events.append((st.label, st.kernel_name, st.op_type, ev))
            elif isinstance(st, HostStep):
                if ext_wait:
                    cl.wait_for_events(ext_wait)
                arrays = [host_value(i) if i else None for i in st.impl.input_names]
                outs = st.impl.run(arrays)
                for name, arr in zip(st.impl.output_names, outs):
                    values[name] = arr
            elif isinstance(st, tuple) and st[0] == "upload":
                name = st[1]
                arr = np.ascontiguousarray(values[name])
                if arr.dtype == np.bool_:
                    arr = arr.view(np.uint8)
                keepalive.append(arr)
                if arr.nbytes:
                    events[name] = cl_call(f"uploading {name!r}", cl.enqueue_copy, queue, plan.device_tensors[name],
                                           arr, is_blocking=False, wait_for=ext_wait or None)
                    kernel_wait = None
    except BaseException:
        # Kernels already enqueued may still read the caller's arrays or write ours: their host
        # buffers outlive the exception until those kernels are done (waited for here, or, when
        # the caller's gate has not opened yet, kept with a marker until a later run sees it done).
        if zero_copied or direct:
            try:
                done = cl.command_execution_status.COMPLETE
                if any(e.command_execution_status != done for e in ext_wait):
                    plan.orphans.append((cl.enqueue_marker(queue), keepalive))
                else:
                    queue.finish()
            except cl.Error:
                pass
        raise
    results: dict = {}
    pending: list = []
    for name in plan.outputs:
        if name in feeds and feeds[name] is not None:
            results[name] = feeds[name]
            continue
        if name in values:
            results[name] = values[name]
            continue
        v = graph.values[name]
        if v.const is not None and name not in plan.device_tensors:
            results[name] = np.array(v.const)
            continue
        if name in feeds and name not in plan.device_tensors:
            results[name] = np.array(feeds[name])
            continue
        if name in direct:
            results[name] = direct[name]
            continue
        target = (dest or {}).get(name)
        if isinstance(target, cl.Buffer):
            nb = _nbytes(graph, name)
            if nb:
                rt = plan.root.get(name, name)
                events["__read:" + name] = cl_call(f"copying output {name!r}", cl.enqueue_copy, queue, target,
                                                   plan.device_tensors[name], byte_count=nb,
                                                   wait_for=[events[rt]] if rt in events else None)
            results[name] = target
            continue
        arr = _read(plan, queue, name, events, wait=False, out=target)
        results[name] = arr
    pending += [events[n] for n in events if n.startswith("__read:")]
    if zero_copied or direct:
        # The kernels read and write host arrays: the run is done when the queue's last command
        # is (the reads in `pending` may all have come before it: a host step's blocking read).
        pending.append(cl_call("enqueueing a marker", cl.enqueue_marker, queue))
    if hold is not None:  # pyopencl's events of host copies block when dropped: the caller keeps them
        hold.extend(events.values())
        hold.extend(keepalive)
    return results, pending


def _read(plan: Plan, queue: cl.CommandQueue, name: str, events: dict, wait: bool,
          out: Optional[np.ndarray] = None) -> np.ndarray:
    graph = plan.graph
    v = graph.values[name]
    dtype = np.dtype(v.dtype)
    shape = tuple(int(d) for d in v.shape)
    if out is not None:
        arr = out.view(np.uint8) if out.dtype == np.bool_ else out
    else:
        arr = np.empty(shape, dtype=np.uint8 if dtype == np.bool_ else dtype)
    if arr.nbytes:
        buf = plan.device_tensors[name]
        rt = plan.root.get(name, name)
        ev = cl_call(f"reading {name!r}", cl.enqueue_copy, queue, arr, buf, is_blocking=wait,
                     wait_for=[events[rt]] if rt in events else None)
        events["__read:" + name] = ev
    return arr.view(np.bool_) if dtype == np.bool_ else arr


def _download_now(plan: Plan, queue, name: str, device_feeds: dict) -> np.ndarray:
    """A graph input given as a caller cl.Buffer but read by a host node: copied to the host now."""
    src = device_feeds[name]
    v = plan.graph.values[name]
    arr = np.empty(tuple(v.shape), dtype=np.dtype(v.dtype))
    if arr.nbytes:
        cl_call(f"reading input {name!r}", cl.enqueue_copy, queue, arr, src, is_blocking=True)
    return arr
