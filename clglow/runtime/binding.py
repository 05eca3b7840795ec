"""Binding: a buffer plan (runtime.planning) made real in OpenCL memory, ready to run.

Why this module exists: the planner decides where tensors live as pure data; this is the one
place that allocates for a plan and ties kernels to memory. `bind` allocates the activation
arena (sub-buffers at the planned offsets) or the shared slots, the sub-batch slices, the
zeroed padded buffers and the constants (through the session's `WeightCache`), creates every
kernel once and sets its arguments, and turns the planner's zero-copy candidates into the
(kernel, argument) pairs a run re-points at host arrays (`rebind`). The result is a `Plan`
that runtime.executor.execute enqueues.

Every device allocation goes through `device_alloc` (errors become OutOfDeviceMemory /
DeviceError naming what was allocated; live buffers are counted by `live_buffers`); a plan
whose binding fails gives back everything it allocated.
"""
from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyopencl as cl

from ..errors import (ONNXIFI_STATUS_NO_DEVICE_MEMORY, OPENCL_STATUS, CompileError, DeviceError, InvalidModel,
                      OutOfDeviceMemory)
from ..ir import Graph
from ..lower.base import Buf, ConstBuf, Scratch
from ..target import Target
from .host import HostKernel
from .planning import BufferPlan, HostNodeStep, KernelLaunchStep, Staged, UploadStep, scratch_name

log = logging.getLogger(__name__)


# --- OpenCL calls and allocations ------------------------------------------------------------------
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
    if OPENCL_STATUS.get(status or "") == ONNXIFI_STATUS_NO_DEVICE_MEMORY:  # the one memory rule (errors.py)
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
    """Release a buffer device_alloc made."""
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
        """The device copy of `array`, uploaded the first time `key` is asked for."""
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


# A run's device work starts once this many launches are enqueued (executor._Run.gate): a backlog
# that keeps the device busy while the host enqueues the rest (~2-4 us a launch on pocl), so its
# threads never idle and wake per launch; a model of fewer launches is enqueued whole first.
GATE_LAUNCHES = 48

# --- the bound plan --------------------------------------------------------------------------------
@dataclass
class KernelStep:
    """A kernel created and bound to its buffers, enqueued as is on every run."""

    kernel: cl.Kernel
    gsize: tuple
    lsize: Optional[tuple]
    writes: list  # the tensors (buffer owners) it writes: their events are kept for readers
    label: str
    kernel_name: str
    op_type: str


@dataclass
class HostStep:
    """A host-fallback node (onnx.reference), with its evaluator built once."""

    impl: HostKernel
    inputs: list
    outputs: list
    label: str
    op_type: str


@dataclass
class Plan:
    """Everything needed to run one specialised (sub)graph."""

    graph: Graph
    placement: list  # [partition.Placement]
    steps: list  # KernelStep | HostStep | planning.UploadStep
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
    # bound to host arrays without a copy (see planning.zero_copy_binds, rebind)
    host_binds: dict = field(default_factory=dict)
    # inputs whose kernels may read a previous stage's buffer in place of theirs (planning's
    # stage_binds), as host_binds
    stage_binds: dict = field(default_factory=dict)
    # inputs/outputs whose kernels now hold a buffer not their own (a host array, a stage's buffer)
    bound_to_host: set = field(default_factory=set)
    bind_outputs_at: int = -1  # the first step touching a bound output's buffer (-1: none)
    gate_opens_at: int = -1  # the step whose launch lets the device start (executor._Run.gate; -1: the end)
    # (name, shape, stored dtype, bool) of each output in host_binds, found once: a run allocates
    # the arrays they are written into (executor._bind_outputs)
    direct_outputs: list = field(default_factory=list)
    target: Target = field(default_factory=Target)  # what it was lowered for (base_align: outputs in place)
    zero_copy: bool = False  # planned with zero copy on (the target's policy and the session's option)
    orphans: list = field(default_factory=list)  # (marker, host buffers) of failed runs still in flight
    sized: Optional[list] = None  # [planning.SizedEnd]: the stage's device ops sized at run time
    next_stages: dict = field(default_factory=dict)
    _buffers: list = field(default_factory=list)
    # sub-buffers only kernel arguments refer to (scratch carved from the arena): a kernel does not
    # retain its buffer arguments (OpenCL spec), so the plan must; Oclgrind frees a released
    # sub-buffer at once and a later launch then retains freed memory ("free(): invalid pointer")
    _views: list = field(default_factory=list)

    def release(self) -> None:
        self._views.clear()
        for b in self._buffers:
            device_free(b)
        self._buffers.clear()
        for st in self.next_stages.values():
            st.release()


def bind(bp: BufferPlan, staged: Staged, stop: Optional[int], device, weights: WeightCache,
         target: Target) -> Plan:
    """Allocate `bp`'s buffers and bind its kernels (Device.program builds or loads each
    program); a failure gives back what was allocated, so the session stays usable."""
    buffers: list = []
    try:
        device_tensors, scratch = _allocate(bp, device.context, weights, buffers)
        steps, kernels, index = _bind_steps(bp, device, weights, device_tensors, scratch)
        host_binds = {name: [(kernels[k], pos) for k, pos in uses] for name, uses in bp.zero_copy.items()}
        stage_binds = {name: [(kernels[k], pos) for k, pos in uses] for name, uses in bp.stage_binds.items()}
        bind_at = index[bp.bind_outputs_at] if bp.bind_outputs_at >= 0 else -1
        launches = [i for i, st in enumerate(steps) if isinstance(st, KernelStep)]
        gate_at = launches[GATE_LAUNCHES - 1] if len(launches) > GATE_LAUNCHES else -1
        direct = [_direct_output(bp.graph, name) for name in bp.outputs if name in host_binds]
        return Plan(bp.graph, staged.placement, steps, device_tensors, bp.host_inputs, bp.device_inputs,
                    list(bp.outputs), stop, bp.planned_bytes, bp.scratch_bytes, len(kernels), root=bp.root,
                    host_binds=host_binds, stage_binds=stage_binds, bind_outputs_at=bind_at, gate_opens_at=gate_at,
                    direct_outputs=direct, target=target, zero_copy=bp.zero_copy_enabled, _buffers=buffers, _views=list(scratch.values()))
    except BaseException:
        for b in buffers:
            device_free(b)
        raise


def _direct_output(graph: Graph, name: str) -> tuple:
    """(name, shape, dtype as stored, is bool) of an output written into the run's array."""
    v = graph.values[name]
    dtype = np.dtype(v.dtype)
    is_bool = dtype == np.bool_
    return name, tuple(int(d) for d in v.shape), np.dtype(np.uint8) if is_bool else dtype, is_bool


def _allocate(bp: BufferPlan, context: cl.Context, weights: WeightCache, buffers: list) -> tuple:
    """(tensor -> cl.Buffer, scratch name -> cl.Buffer): the arena's sub-buffers (or the shared
    slots), the sub-batch slices, the constants and the zeroed padded buffers, by storage key.
    Every allocation is appended to `buffers` as it is made."""
    region: dict = {}  # arena / slot entry -> its cl.Buffer
    place_of: dict = {}  # buffer owner -> (base buffer, offset)
    if bp.use_arena:
        arena = device_alloc(context, bp.arena_size, "the activation arena")
        buffers.append(arena)
        for name, (off, size) in bp.offsets.items():
            region[name] = cl_call(f"carving {name!r} from the arena", arena.get_sub_region, off, size)
            place_of[name] = (arena, off)
    else:
        slots = []
        for size in bp.slot_sizes:
            b = device_alloc(context, size, "an activation buffer")
            buffers.append(b)
            slots.append(b)
        for name, s in bp.slot_of.items():
            region[name] = slots[s]
            place_of[name] = (slots[s], 0)
    by_key: dict = {}
    for name, sl in bp.slices.items():  # images [i0, i0 + n) of the whole tensor, in place
        owner = bp.resolve(name)
        if owner not in place_of:
            raise InvalidModel(f"sub-batch piece {name!r} of {owner!r} has no device buffer")
        base, off = place_of[owner]
        by_key[("slice", name)] = cl_call(f"carving {name!r} from {owner!r}", base.get_sub_region,
                                          off + sl.offset, sl.nbytes)
    for name, b in region.items():
        by_key[("arena", name) if bp.use_arena else ("slot", bp.slot_of[name])] = b
    graph = bp.graph
    for name in bp.consts:
        by_key[("const", name)] = weights.get_const(name, graph.values[name].const)
    for k, size in enumerate(bp.pad_sizes):
        b = device_alloc(context, size, "a padded activation")
        buffers.append(b)
        cl_call("zeroing a padded activation", cl.enqueue_fill_buffer, weights.queue, b, np.float32(0), 0,
                size).wait()
        by_key[("pad", k)] = b
    device_tensors: dict = {}
    for name, key in bp.storage.items():
        if key not in by_key:  # a constant only a view reads
            by_key[key] = weights.get_const(key[1], graph.values[key[1]].const)
        device_tensors[name] = by_key[key]
    scratch = {iv.name: region[iv.name] for iv in bp.scratch}
    return device_tensors, scratch


def _bind_steps(bp: BufferPlan, device, weights: WeightCache, device_tensors: dict, scratch: dict) -> tuple:
    """(run-time steps, {plan step index: cl.Kernel}, plan step index -> run-time step index):
    each launch's kernel created once and its arguments set; NoopSteps dropped."""
    steps: list = []
    kernels: dict = {}
    index: dict = {}
    for k, st in enumerate(bp.steps):
        index[k] = len(steps)
        if isinstance(st, HostNodeStep):
            node = st.node
            steps.append(HostStep(HostKernel(node, bp.graph), list(node.inputs), list(node.outputs), node.name,
                                  node.op_type))
        elif isinstance(st, UploadStep):
            steps.append(st)
        elif isinstance(st, KernelLaunchStep):
            step = _kernel_step(bp, st, device, weights, device_tensors, scratch)
            kernels[k] = step.kernel
            steps.append(step)
    return steps, kernels, index


def _kernel_step(bp: BufferPlan, st: KernelLaunchStep, device, weights: WeightCache, device_tensors: dict,
                 scratch: dict) -> KernelStep:
    node, launch = st.node, st.launch
    try:
        prg = device.program(launch.program, launch.build_options())
    except CompileError as e:  # name the node whose kernel failed (a fused one falls back on it)
        e.node = e.node or node.name
        raise
    try:
        knl = cl.Kernel(prg, launch.kernel)
    except cl.Error as e:
        raise InvalidModel(f"kernel {launch.kernel!r} not found in {launch.program}.cl: {e}",
                           node=node.name) from None
    args: list = []
    writes: list = []
    for a in launch.args:
        if isinstance(a, Buf):
            if a.name not in device_tensors:
                raise InvalidModel(f"tensor {a.name!r} has no device buffer", node=node.name)
            args.append(device_tensors[a.name])
            if a.name in node.outputs:
                writes.append(bp.resolve(a.name))
        elif isinstance(a, Scratch):
            args.append(scratch[scratch_name(node.name, a.slot)])
        elif isinstance(a, ConstBuf):
            args.append(weights.get("const:" + a.key, a.array))
        else:
            args.append(a)
    try:
        knl.set_args(*args)
    except (cl.Error, TypeError, ValueError) as e:
        raise InvalidModel(f"binding arguments of kernel {launch.kernel!r} failed: {e}", node=node.name) from None
    return KernelStep(knl, tuple(int(x) for x in launch.gsize),
                      None if launch.lsize is None else tuple(int(x) for x in launch.lsize),
                      writes, node.name, launch.kernel, node.op_type)


# --- zero copy, per run ----------------------------------------------------------------------------
def host_buffer(context: cl.Context, arr: np.ndarray, writable: bool = False) -> Optional[cl.Buffer]:
    """A buffer that is `arr`'s memory itself (CL_MEM_USE_HOST_PTR), or None when the array
    cannot be one (not float-aligned, read-only memory pyopencl will not wrap)."""
    if arr.ctypes.data % 4:
        return None
    flags = (cl.mem_flags.READ_WRITE if writable else cl.mem_flags.READ_ONLY) | cl.mem_flags.USE_HOST_PTR
    try:
        return cl.Buffer(context, flags, hostbuf=arr)
    except (cl.Error, TypeError, ValueError, BufferError):
        return None


def aligned_empty(shape: tuple, dtype: np.dtype, align: int) -> np.ndarray:
    """An uninitialised array whose data starts on an `align`-byte boundary (a device buffer's
    base alignment: kernels may store aligned vectors into it)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_arrays(specs: Sequence[tuple], align: int) -> list:
    """Uninitialised arrays of these (shape, dtype)s, each starting on an `align`-byte boundary,
    carved from one allocation (a run's outputs: 6 us for GPT-2 decode's nine, where one
    aligned_empty each took 41; an array handed back keeps the block alive)."""
    offsets, total = [], 0
    for shape, dtype in specs:
        offsets.append(total)
        total += -(-math.prod(shape) * dtype.itemsize // align) * align
    raw = np.empty(total + align, np.uint8)
    start = -raw.ctypes.data % align
    return [np.ndarray(shape, dtype, raw, start + off) for (shape, dtype), off in zip(specs, offsets)]


def rebind(plan: Plan, name: str, buf: cl.Buffer, host: bool) -> None:
    """Point the kernels that hold `name`'s buffer at `buf`: a host array's or a previous
    stage's (`host`: not the tensor's own) or the tensor's own device buffer again. execute()
    binds every name of plan.host_binds and plan.stage_binds each run before the first step
    touching it, so no kernel is enqueued still holding an earlier run's host buffer (released,
    its memory the caller's again); nothing else enqueues plan steps."""
    if not host and name not in plan.bound_to_host:
        return  # already bound to its device buffer
    uses = plan.host_binds[name] if name in plan.host_binds else plan.stage_binds[name]
    for knl, pos in uses:
        knl.set_arg(pos, buf)
    if host:
        plan.bound_to_host.add(name)
    else:
        plan.bound_to_host.discard(name)


__all__ = ["HostStep", "KernelStep", "Plan", "WeightCache", "aligned_arrays", "aligned_empty", "bind", "cl_call", "cl_error",
           "device_alloc", "device_free", "host_buffer", "live_buffers", "rebind"]
