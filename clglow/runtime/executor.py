"""Execution plans: a specialised graph turned into enqueued OpenCL work.

Three steps, each in a module of its own:

1. planning (runtime.planning, pure data): `stage` places the nodes on the session's Target
   and splits batched stretches into sub-batch pieces where the target's policy and the
   session's options say so; `plan_buffers` lowers every device node through a `NodeLowerer`
   (defined here: it builds the LowerCtx from the Target and PlanOptions and starts each
   launch's program building with Device.prepare), takes the padded and in-place offers, and
   plans steps, liveness, arena offsets and the zero-copy candidates;
2. binding (runtime.binding): the plan's buffers allocated once, every kernel created and bound
   to them, weights from the session's upload cache -> a `Plan`;
3. running (`execute`, here): a loop of enqueues on the session's in-order queue (the caller's
   `wait_for` events and the run's gate on the first command; each command's event kept for its
   outputs); the gate (a user event) opens once binding.GATE_LAUNCHES launches are enqueued, so
   the device starts with a backlog instead of waking for each launch; the host is touched only
   at host-fallback nodes and at the edges. Graph inputs and outputs that the
   plan may bind to host arrays (zero copy) are re-pointed at the run's arrays each run. A stage
   of a staged run hands its values on as DeviceValues (its own buffers), and the next stage's
   kernels are re-pointed at them (or copy them on the device): only sizes cross to the host.

`build_plan` chains the first two.
Policies come from the Target and the PlanOptions given, never from the environment here.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import pyopencl as cl

from ..config import PlanOptions
from ..errors import DeviceError, InvalidModel
from ..ir import Graph, Node
from ..lower import LowerCtx, TensorInfo, lookup
from ..lower.base import PaddedLayout
from ..target import Target
from .binding import (HostStep, KernelStep, Plan, WeightCache, aligned_arrays, bind, cl_call, cl_error,
                      host_buffer, live_buffers, rebind)
from .lowered import nbytes
from .planning import plan_buffers, stage

log = logging.getLogger(__name__)

__all__ = ["DeviceValue", "Plan", "RunRecord", "WeightCache", "NodeLowerer", "build_plan", "execute", "live_buffers"]


# --- lowering and planning -------------------------------------------------------------------------
def _tensor_info(graph: Graph, name: str) -> Optional[TensorInfo]:
    if not name:
        return None
    v = graph.values[name]
    return TensorInfo(name, np.dtype(v.dtype), tuple(int(d) for d in v.shape))


def _lower_node(node: Node, graph: Graph, device, target: Target, options: PlanOptions,
                in_layout: Optional[PaddedLayout] = None, out_layout: Optional[PaddedLayout] = None,
                memo: Optional[dict] = None) -> tuple:
    """(launches, LowerCtx) of one device node; its programs start building (and warming up)
    while the rest of the model loads. `memo`: the plan's derived constants (LowerCtx.derived)."""
    ctx = LowerCtx(node, graph, [_tensor_info(graph, i) for i in node.inputs],
                   [_tensor_info(graph, o) for o in node.outputs if o], target, options)
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


class NodeLowerer:
    """The planner's lowering callback (planning.Lowerer): one device node lowered for the
    session's Target and options, its programs started on `device`; derived constants (packed
    weights) shared through `memo`, so a node lowered again (padded pairing, sub-batch pieces)
    packs its weights once."""

    def __init__(self, graph: Graph, device, target: Target, options: PlanOptions, memo: dict):
        self.graph, self.device, self.target, self.options, self.memo = graph, device, target, options, memo

    def __call__(self, node: Node, in_layout: Optional[PaddedLayout] = None,
                 out_layout: Optional[PaddedLayout] = None) -> tuple:
        return _lower_node(node, self.graph, self.device, self.target, self.options, in_layout, out_layout,
                           self.memo)


def build_plan(graph: Graph, stop: Optional[int], outputs: Sequence[str], device, weights: WeightCache,
               target: Target, options: PlanOptions, memo: Optional[dict] = None) -> Plan:
    """Lower a specialised graph (nodes[:stop] when staged) for `target` into a ready-to-run Plan:
    planned (runtime.planning), then bound (runtime.binding). Zero copy where both the target's
    policy and `options` allow it. `memo`: derived constants computed earlier for it."""
    staged = stage(graph, stop, outputs, target, options)
    lower = NodeLowerer(staged.graph, device, target, options, {} if memo is None else memo)
    sized = staged.sized
    # the counts live to the end, as outputs do; read back before them
    outputs = list(outputs) + [s.count for s in sized]
    bp = plan_buffers(staged, outputs, lower, target, zero_copy=target.zero_copy and options.zero_copy)
    if stop is not None and bp.zero_copy:
        # a stage's outputs stay in its device buffers for the next stage (runtime.engine), never
        # written into host arrays (those sized at run time could not be: read back in part)
        for name in outputs:
            if name not in bp.device_inputs:
                bp.zero_copy.pop(name, None)
        bp.bind_outputs_at = min((s for o in outputs if o in bp.zero_copy for s, _ in bp.zero_copy[o]), default=-1)
    plan = bind(bp, staged, stop, device, weights, target)
    plan.sized = sized or None
    return plan


# --- running ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceValue:
    """A value one stage hands to the next on the device: its elements first in `buffer` (a
    sized output's are a prefix of its bound-size buffer), in `shape`. The buffer belongs to the
    stage's plan, which the engine keeps (and its arena untouched) until the run's last stage."""

    buffer: cl.Buffer
    shape: tuple
    dtype: np.dtype


@dataclass
class RunRecord:
    """What one run enqueued, for profiling."""

    kernel_events: list = field(default_factory=list)  # (label, kernel name, op type, cl.Event)


@dataclass
class _Run:
    """One run's state: host values, each tensor's last event, what must outlive the run."""

    plan: Plan
    context: cl.Context
    queue: cl.CommandQueue
    feeds: dict
    device_feeds: dict
    dest: dict
    ext_wait: list
    # The queue is in order: each command starts after the one before it has finished, so a
    # kernel names no events of this run, and only the caller's (ext_wait) until one command has
    # waited for them. Building wait lists per kernel cost as much host time as pyopencl's enqueue
    # itself (ResNet-50: 1.7 ms of enqueueing per run, on a core pocl's threads need).
    kernel_wait: Optional[list] = None
    values: dict = field(default_factory=dict)
    events: dict = field(default_factory=dict)
    keepalive: list = field(default_factory=list)
    zero_copied: bool = False  # some input is the caller's array itself
    direct: dict = field(default_factory=dict)  # outputs written straight into the returned arrays
    handed: dict = field(default_factory=dict)  # inputs a previous stage left on the device: name -> DeviceValue
    keep_on_device: bool = False  # a stage: device tensors handed back as DeviceValues, not read
    # The first command of the run waits for this user event, set once the first GATE_LAUNCHES
    # kernels are enqueued (or at the first point the host must wait, or at the end). Without it
    # each launch finds the device idle and wakes its threads (pocl: ~30 us per enqueue instead of
    # ~3, on the cores the kernels need): a GPT-2 decode step, 40 launches, ran 2.5-3.0 ms back to
    # back; gated 1.2-1.5 ms (0:0, under load). With a backlog the host stays ahead of the device.
    gate: Optional[cl.UserEvent] = None
    # the event of the plan's last step when that step is a launch: the queue's last command of the
    # run unless outputs are read back after it (then the reads' events are waited for)
    last_kernel: Optional[cl.Event] = None

    def open_gate(self) -> None:
        """Let the device start on what this run has enqueued so far (idempotent)."""
        if self.gate is not None:
            self.gate.set_status(cl.command_execution_status.COMPLETE)
            self.gate = None

    def host_value(self, name: str) -> np.ndarray:
        """`name` on the host: fed, made by a host step, a constant, or read back now."""
        if name in self.values:
            return self.values[name]
        v = self.plan.graph.values[name]
        if v.const is not None:
            return v.const
        self.values[name] = _read(self.plan, self.queue, name, self.events, wait=True)
        return self.values[name]


def execute(plan: Plan, device, queue: cl.CommandQueue, feeds: dict, wait_for: Sequence[cl.Event] = (),
            record: Optional[RunRecord] = None, device_feeds: Optional[dict] = None,
            dest: Optional[dict] = None, hold: Optional[list] = None, handed: Optional[dict] = None,
            keep_on_device: bool = False) -> tuple[dict, list]:
    """Enqueue one run of `plan`. Returns (host outputs dict, pending events).

    Host outputs are numpy arrays being filled by non-blocking reads: they are valid once every
    returned event has completed. `device_feeds` maps input names to caller cl.Buffers (copied on device);
    `dest` maps output names to caller numpy arrays / cl.Buffers to write into directly. When `hold`
    is given, every event and staging array of the run is appended to it: keep it until the run is done
    (a run that returns before its inputs are ready must not block on dropping them).
    Between stages (runtime.engine): `handed` maps inputs to the previous stage's DeviceValues, which
    the kernels read where they lie (bound directly where the plan lets an input be re-pointed,
    else copied on the device); `keep_on_device` hands device tensors back as DeviceValues, unread.
    """
    gate = cl.UserEvent(device.context) if plan.n_launches > 1 else None
    ext_wait = list(wait_for) + ([gate] if gate is not None else [])
    handed = handed or {}
    device_feeds = {**(device_feeds or {}), **{k: v.buffer for k, v in handed.items()}}
    run = _Run(plan, device.context, queue, feeds, device_feeds, dest or {}, ext_wait,
               kernel_wait=ext_wait or None, gate=gate, handed=handed, keep_on_device=keep_on_device)
    if gate is not None:
        run.keepalive.append(gate)
    if plan.orphans:  # host buffers of failed runs, kept until their kernels are done
        done = cl.command_execution_status.COMPLETE
        plan.orphans[:] = [o for o in plan.orphans if o[0].command_execution_status != done]
    try:
        _upload_inputs(run)
        if any(feeds.get(name) is None for name in plan.host_inputs):
            run.open_gate()  # a caller's buffer read back now (blocking) comes after the gated uploads
        for name in plan.host_inputs:
            run.values[name] = feeds[name] if feeds.get(name) is not None else _download_now(plan, queue, name,
                                                                                              run.device_feeds)
        _run_steps(run, record)
        run.open_gate()
    except BaseException:
        run.open_gate()
        _keep_until_done(run)
        raise
    results, pending = _collect_outputs(run)
    if hold is not None:  # pyopencl's events of host copies block when dropped: the caller keeps them
        hold.extend(run.events.values())
        hold.extend(run.keepalive)
    return results, pending


def _upload_inputs(run: _Run) -> None:
    """Graph inputs into their device buffers: copied from a caller's cl.Buffer or array, or (zero
    copy) the kernels pointed at the caller's array itself, kept until the run ends."""
    plan, queue, graph = run.plan, run.queue, run.plan.graph
    for name in plan.device_inputs:
        buf = plan.device_tensors[name]
        zero_copy = name in plan.host_binds
        if name in run.handed and name in plan.stage_binds:  # the previous stage's buffer itself: no copy
            rebind(plan, name, run.handed[name].buffer, host=True)
            continue
        if not zero_copy:
            rebind(plan, name, buf, host=False)  # its own buffer again (bound to a stage's before)
        if name in run.device_feeds:
            if zero_copy:
                rebind(plan, name, buf, host=False)
            nb = nbytes(graph, name)
            if nb:
                run.events[name] = cl_call(f"copying input {name!r}", cl.enqueue_copy, queue, buf,
                                           run.device_feeds[name], byte_count=nb, wait_for=run.ext_wait or None)
                run.kernel_wait = None
            continue
        arr = np.ascontiguousarray(run.feeds[name])
        if arr.dtype == np.bool_:
            arr = arr.view(np.uint8)
        run.keepalive.append(arr)
        if zero_copy:  # the kernels read the caller's array where it lies (kept until the run ends)
            host_buf = host_buffer(run.context, arr) if arr.nbytes else None
            if host_buf is not None:
                rebind(plan, name, host_buf, host=True)
                run.keepalive.append(host_buf)
                run.zero_copied = True
                continue
            rebind(plan, name, buf, host=False)
        if arr.nbytes:
            run.events[name] = cl_call(f"uploading input {name!r}", cl.enqueue_copy, queue, buf, arr,
                                       is_blocking=False, wait_for=run.ext_wait or None)
            run.kernel_wait = None


def _bind_outputs(run: _Run) -> None:
    """Outputs the kernels write straight into the arrays this run returns, allocated (all in one
    block) and bound just before the first kernel that touches them: a run's first kernels are
    enqueued sooner (ResNet-50 b1: 0.29 ms from run() to the first enqueue when allocated up
    front; the interpreter's memory is cold after a run has streamed the weights through the
    caches)."""
    plan, dest = run.plan, run.dest
    specs = [sp for sp in plan.direct_outputs if dest.get(sp[0]) is None]
    arrays = aligned_arrays([(shape, dtype) for _, shape, dtype, _ in specs], plan.target.base_align)
    for (name, _, _, is_bool), arr in zip(specs, arrays):
        host_buf = host_buffer(run.context, arr, writable=True) if arr.nbytes else None
        if host_buf is not None:
            rebind(plan, name, host_buf, host=True)
            run.keepalive.append(host_buf)
            run.direct[name] = arr.view(np.bool_) if is_bool else arr
        else:
            rebind(plan, name, plan.device_tensors[name], host=False)
    for name, *_ in plan.direct_outputs:
        if dest.get(name) is not None:
            rebind(plan, name, plan.device_tensors[name], host=False)


def _run_steps(run: _Run, record: Optional[RunRecord]) -> None:
    """Every step enqueued in order; host steps wait for the caller's events and read back what
    they need."""
    plan, queue, events, ext_wait = run.plan, run.queue, run.events, run.ext_wait
    kernel_wait = run.kernel_wait
    bind_at, open_at = plan.bind_outputs_at, plan.gate_opens_at
    for step_index, st in enumerate(plan.steps):
        if step_index == bind_at:
            _bind_outputs(run)
        if isinstance(st, KernelStep):
            try:
                ev = cl.enqueue_nd_range_kernel(queue, st.kernel, st.gsize, st.lsize, wait_for=kernel_wait)
            except cl.Error as e:
                raise cl_error(f"enqueueing {st.kernel_name} for node {st.label!r}", e) from None
            kernel_wait = None
            if step_index == len(plan.steps) - 1:
                run.last_kernel = ev
            if step_index == open_at:
                run.open_gate()
            for w in st.writes:
                events[w] = ev
            if record is not None:
                record.kernel_events.append((st.label, st.kernel_name, st.op_type, ev))
        elif isinstance(st, HostStep):
            run.open_gate()
            if ext_wait:
                cl.wait_for_events(ext_wait)
            arrays = [run.host_value(i) if i else None for i in st.impl.input_names]
            outs = st.impl.run(arrays)
            for name, arr in zip(st.impl.output_names, outs):
                run.values[name] = arr
        else:  # an UploadStep: a host step's output that device steps read
            name = st.name
            arr = np.ascontiguousarray(run.values[name])
            if arr.dtype == np.bool_:
                arr = arr.view(np.uint8)
            run.keepalive.append(arr)
            if arr.nbytes:
                events[name] = cl_call(f"uploading {name!r}", cl.enqueue_copy, queue, plan.device_tensors[name],
                                       arr, is_blocking=False, wait_for=ext_wait or None)
                kernel_wait = None


def _keep_until_done(run: _Run) -> None:
    """After a failed run: kernels already enqueued may still read the caller's arrays or write
    ours, so their host buffers outlive the exception until those kernels are done (waited for
    here, or, when the caller's gate has not opened yet, kept with a marker until a later run
    sees it done)."""
    if not (run.zero_copied or run.direct):
        return
    try:
        done = cl.command_execution_status.COMPLETE
        if any(e.command_execution_status != done for e in run.ext_wait):
            run.plan.orphans.append((cl.enqueue_marker(run.queue), run.keepalive))
        else:
            run.queue.finish()
    except cl.Error:
        pass


def _collect_outputs(run: _Run) -> tuple[dict, list]:
    """(outputs, pending events): host values as they are, device tensors read back without
    blocking (or copied into a caller's cl.Buffer), outputs written in place as they are."""
    plan, queue, graph, feeds, events = run.plan, run.queue, run.plan.graph, run.feeds, run.events
    results: dict = {}
    real = _sized_shapes(run) if plan.sized is not None else {}
    for name in plan.outputs:
        if name in run.handed and not (name in feeds and feeds[name] is not None):
            results[name] = run.handed[name]  # passed through this stage on the device
        elif run.keep_on_device and name in plan.device_inputs and name not in plan.bound_to_host:
            results[name] = _device_value(plan, name, tuple(int(d) for d in graph.values[name].shape))
        elif run.keep_on_device and name in real:
            if real[name] is not None:
                results[name] = _device_value(plan, name, real[name])
        elif name in real:
            if real[name] is not None:
                v = graph.values[name]
                out = np.empty(real[name], dtype=np.uint8 if np.dtype(v.dtype) == np.bool_ else v.dtype)
                results[name] = _read(plan, queue, name, events, wait=False, out=out)
        elif name in feeds and feeds[name] is not None:
            results[name] = feeds[name]
        elif name in run.values:
            results[name] = run.values[name]
        elif graph.values[name].const is not None and name not in plan.device_tensors:
            results[name] = np.array(graph.values[name].const)
        elif name in feeds and name not in plan.device_tensors:
            results[name] = np.array(feeds[name])
        elif name in run.direct:
            results[name] = run.direct[name]
        elif isinstance(run.dest.get(name), cl.Buffer):
            target = run.dest[name]
            nb = nbytes(graph, name)
            if nb:
                rt = plan.root.get(name, name)
                events["__read:" + name] = cl_call(f"copying output {name!r}", cl.enqueue_copy, queue, target,
                                                   plan.device_tensors[name], byte_count=nb,
                                                   wait_for=[events[rt]] if rt in events else None)
            results[name] = target
        elif run.keep_on_device and name in plan.device_tensors:
            results[name] = _device_value(plan, name, tuple(int(d) for d in graph.values[name].shape))
        else:
            results[name] = _read(plan, queue, name, events, wait=False, out=run.dest.get(name))
    pending = [events[n] for n in events if n.startswith("__read:")]
    if (run.zero_copied or run.direct) and not pending and plan.sized is None and run.last_kernel is not None:
        # The kernels read and write host arrays and the last launch is the queue's last command
        # (in order: every command before it is done when it is): no marker (~7 us a run on pocl)
        pending.append(run.last_kernel)
    elif run.zero_copied or run.direct:
        # The kernels read and write host arrays: the run is done when the queue's last command
        # is (the reads in `pending` may all have come before it: a host step's blocking read).
        pending.append(cl_call("enqueueing a marker", cl.enqueue_marker, queue))
    return results, pending


def _device_value(plan: Plan, name: str, shape: tuple) -> DeviceValue:
    """`name` left in its device buffer for the next stage."""
    return DeviceValue(plan.device_tensors[name], tuple(shape), np.dtype(plan.graph.values[name].dtype))


def _sized_shapes(run: _Run) -> dict:
    """The real shapes of a stage's outputs sized at run time (their counts None: not handed
    over), from the counts, read back now with one wait: the sync point of such ops
    (lower/select.py). Their writers put each output's elements first in its buffer, so the read
    of the real shape reads them alone."""
    plan = run.plan
    counts = np.zeros(len(plan.sized), dtype=np.int64)
    reads = []
    for k, sized in enumerate(plan.sized):
        rt = plan.root.get(sized.count, sized.count)
        reads.append(cl_call(f"reading the count of {sized.node!r}", cl.enqueue_copy, run.queue, counts[k:k + 1],
                             plan.device_tensors[sized.count], is_blocking=False,
                             wait_for=[run.events[rt]] if rt in run.events else None))
    cl.wait_for_events(reads)
    shapes: dict = {}
    for sized, count in zip(plan.sized, counts.tolist()):
        shapes[sized.count] = None
        for name, so in sized.outputs.items():
            if so.axis is not None and not 0 <= count <= so.bound[so.axis]:
                raise DeviceError(f"node {sized.node!r} counted {count} elements, outside [0, {so.bound[so.axis]}]")
            shapes[name] = so.real(count)
    return shapes


def _read(plan: Plan, queue: cl.CommandQueue, name: str, events: dict, wait: bool,
          out: Optional[np.ndarray] = None) -> np.ndarray:
    """Tensor `name` read back from its device buffer (into `out` when given), after its writer."""
    graph = plan.graph
    v = graph.values[name]
    if not v.is_static:  # staging sizes every value before it is read (runtime.engine): never a ValueError
        raise InvalidModel(f"the size of {name!r} ({list(v.shape or ())}) is not known when it is read back",
                           tensor=name)
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
