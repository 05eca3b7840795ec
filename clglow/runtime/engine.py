"""The engine: plans per input signature, staged execution, synchronous and queued runs.

One engine belongs to one session. It lowers for one Target (the session's device under the
session's target family, with that family's tuned GEMM tiles) and one PlanOptions (the
session's plan switches); plans are cached by both and by the concrete (dtype, shape) of every
input. A model whose shapes depend on data is run in stages, each stage planned for the real
shapes of what the previous stage produced; the values stay on the device between stages
(executor.DeviceValue): the host reads the sizes, the small values that decide the next
stage's shapes and the graph's outputs.
"""
from __future__ import annotations

import logging
import threading
from typing import Optional, Sequence

import numpy as np
import pyopencl as cl

from ..config import PlanOptions
from ..errors import CompileError, InvalidModel, UnsupportedOperator
from ..ir import Graph, Value
from ..partition import failed_fusion, refused_fusions, unfuse
from ..target import Target
from ..shapes import SHAPE_INPUT_MAX_ELEMENTS, SHAPE_INPUTS, specialize
from .host import outer_scope_names
from .executor import DeviceValue, Plan, RunRecord, WeightCache, build_plan, execute

log = logging.getLogger(__name__)


def _signature(types: dict) -> tuple:
    return tuple(sorted((k, np.dtype(d).str, tuple(int(x) for x in s)) for k, (d, s) in types.items()))




def shape_inputs(graph: Graph) -> set:
    """Graph inputs that feed a shape-deciding position of some node (see SHAPE_INPUTS)."""
    inputs = set(graph.inputs)
    found = set()
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        for i in SHAPE_INPUTS.get(node.op_type, ()):
            name = node.input(i)
            if name in inputs:
                found.add(name)
    return found


class Engine:
    def __init__(self, graph: Graph, device, options: Optional[PlanOptions] = None, profiling: bool = False):
        self.device = device
        self.options = options if options is not None else PlanOptions.from_env()
        # fused nodes no kernel covers on this Target run as their original nodes (and so do those
        # whose lowering failed at some input signature: `fallbacks`, tried once per engine)
        # (keyed by their originals' tuple, which copies of a graph share: a fold_transposes view
        # and the FusedMatMul inside it have one name, and only the one that failed falls back)
        self.fallbacks: dict = {}
        self.graph = self._unfused(graph, refused=True)
        self.queue = device.make_queue(profiling=True) if profiling else device.queue
        self.weights = WeightCache(device.context, self.queue)
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.RLock()  # one run at a time per session: plans own their buffers
        self.records: list[RunRecord] = []
        self.profiling = profiling
        self.shape_inputs = shape_inputs(graph)
        self._rest: dict = {}  # id(staged plan) -> the specialised graph whose nodes[stop:] follow it
        self.last_plan: Optional[Plan] = None
        # (target, the inputs' (name, dtype, shape)s, plan) of the last plan asked for without
        # shape-deciding values: a run at the same shapes skips building the plan key
        self._last: Optional[tuple] = None

    @property
    def target(self) -> Target:
        """What this engine lowers for: the device under the session's family, with that
        family's GEMM tiles as the tuner left them (read per plan: the tuner may finish after
        the engine was made)."""
        return self.device.target(self.options.target)

    def _unfused(self, graph: Graph, refused: bool = False) -> Graph:
        """`graph` with the fused nodes named in `fallbacks` (and, with `refused`, those that no
        kernel covers on the Target) replaced by their original nodes, nested fusions included."""
        while True:
            names = {n.name for n in graph.nodes if n.unfused and id(n.unfused) in self.fallbacks}
            if refused:
                names |= refused_fusions(graph, graph.nodes, self.target)
            if not names:
                return graph
            graph = self._fall_back(graph, names)

    def _fall_back(self, graph: Graph, names: set) -> Graph:
        """`graph` with the fused nodes `names` replaced by their originals, remembered for later
        plans."""
        for n in graph.nodes:
            if n.name in names and n.unfused:
                self.fallbacks[id(n.unfused)] = n.unfused
        return unfuse(graph, names)

    # -- planning --------------------------------------------------------------------------------
    def _shape_values(self, feeds: Optional[dict]) -> dict:
        """Values of the small shape-deciding inputs present in `feeds` (host arrays only)."""
        out = {}
        if not feeds or not self.shape_inputs:
            return out
        for name in self.shape_inputs:
            x = feeds.get(name)
            if x is None or isinstance(x, cl.MemoryObjectHolder):
                continue
            arr = np.asarray(x)
            if arr.size <= SHAPE_INPUT_MAX_ELEMENTS and arr.dtype.kind in "biuf":
                out[name] = arr
        return out

    def plan(self, input_types: dict, feeds: Optional[dict] = None) -> Plan:
        """The plan for these input (dtype, shape)s; `feeds` supplies the values of shape-deciding
        inputs (see SHAPE_INPUTS), which then become constants of the plan."""
        values = self._shape_values(feeds)
        # the options and the tiles are part of the key: a plan is only valid for what it was lowered for
        target = self.target
        quick = None if values else tuple((k, d, s) for k, (d, s) in input_types.items())
        if quick is not None:  # the last run's inputs again: no key built (gpt2_decode: 44 -> ~10 us a run)
            with self._lock:
                last = self._last
                if last is not None and last[0] is target and last[1] == quick:
                    self.last_plan = last[2]
                    return last[2]
        key = (self.options, target.gemm_tiles, target.xgemm_tiles, target.tuned) + _signature(input_types) + \
            tuple(sorted((k, v.dtype.str, v.shape, v.tobytes()) for k, v in values.items()))
        built = False
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                graph = self.graph
                if values:
                    graph = graph.copy()
                    for k, v in values.items():
                        graph.values[k] = Value(k, v.dtype, tuple(v.shape), v)
                plan = self._build(graph, input_types, self.graph.outputs)
                self._plans[key] = plan
                built = True
            self.last_plan = plan
            self._last = (target, quick, plan) if quick is not None else None
        if built:
            # The code of the plan's kernels is being generated in the background (Device.prepare,
            # compile helpers): a launch before that is done makes pocl generate it again here,
            # one kernel at a time (ResNet-50 from empty caches: 5.16-5.21 s to the first result
            # without this wait, 5.01-5.06 s with it)
            self.device.wait_prepared()
        return plan

    def _build(self, graph: Graph, input_types: dict, outputs: Sequence[str]) -> Plan:
        """The plan of `graph` at these input types. A fused node that no kernel covers at these
        shapes, or whose lowering or OpenCL build fails, is replaced by its original nodes (partition.unfuse) and
        the graph planned again: a fusion never refuses a model that its parts would run."""
        graph = self._unfused(graph)
        while True:  # each round replaces at least one fused node: it ends
            try:
                spec, stop = specialize(graph, input_types)
                refused = refused_fusions(spec, spec.nodes[:stop], self.target)
                if not refused:
                    return self._build_specialized(spec, stop, outputs)
                log.info("no kernel covers the fused nodes %s on %s: their original nodes run instead",
                         sorted(refused), self.target.family)
            except (InvalidModel, UnsupportedOperator, CompileError) as e:
                name = failed_fusion(graph, e)
                if name is None:
                    raise
                refused = {name}
                log.info("fused node %r cannot run on %s (%s): its original nodes run instead", name,
                         self.target.family, e)
            if not any(n.name in refused and n.unfused for n in graph.nodes):
                raise InvalidModel(f"fused nodes {sorted(refused)} cannot run and have no original nodes")
            graph = self._fall_back(graph, refused)

    def _build_specialized(self, spec: Graph, stop: Optional[int], outputs: Sequence[str]) -> Plan:
        if stop is None:
            return build_plan(spec, None, outputs, self.device, self.weights, self.target, self.options)
        # staged: this stage hands over everything the rest of the graph needs
        produced = set(spec.inputs)
        for n in spec.nodes[:stop]:
            produced.update(o for o in n.outputs if o)
        later_needs = {i for n in spec.nodes[stop:] for i in n.inputs if i}
        later_needs.update(i for n in spec.nodes[stop:] for i in outer_scope_names(n))
        crossing = sorted((later_needs | set(outputs)) & produced)
        plan = build_plan(spec, stop, crossing, self.device, self.weights, self.target, self.options)
        # the plan's graph is its stage's (nodes[:stop]); the rest is planned from this one, and
        # the rest's shape-deciding inputs among what crosses are fixed by its nodes: found once
        rest = Graph(list(spec.nodes[stop:]), spec.values, crossing, [], spec.opsets)
        self._rest[id(plan)] = (spec, sorted(shape_inputs(rest)))
        return plan

    def _next_stage(self, plan: Plan, values: dict) -> Plan:
        """The plan of what follows a stage, for the real shapes of the `values` it handed over
        (the outputs of the node whose output shapes depend on data among them). Small values
        that decide shapes in the rest (a TopK's k, a Reshape's target computed from a count)
        become its constants, as graph inputs do in `plan`. The rest's shape-deciding names are
        found once per stage (ssdlite320: 180 stages a run, a walk of the rest's nodes each cost
        0.6 ms a stage)."""
        spec, shape_names = self._rest[id(plan)]
        consts = {}
        for k in shape_names:
            v = np.asarray(values[k])
            if v.size <= SHAPE_INPUT_MAX_ELEMENTS and v.dtype.kind in "biuf":
                consts[k] = v
        key = tuple((k, v.dtype.str, v.shape) for k, v in values.items()) + \
            tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in consts.items())
        st = plan.next_stages.get(key)
        if st is None:
            carried = list(values)
            rest = Graph(list(spec.nodes[plan.stop:]), dict(spec.values), carried, list(self.graph.outputs),
                         spec.opsets, spec.name, spec.ir_version, spec.max_tensor_bytes)
            for k, v in consts.items():
                rest.values[k] = Value(k, v.dtype, tuple(v.shape), v)
            types = {k: (values[k].dtype, values[k].shape) for k in carried}
            st = self._build(rest, types, self.graph.outputs)
            plan.next_stages[key] = st
        return st

    # -- running ---------------------------------------------------------------------------------
    def run(self, feeds: dict, wait_for: Sequence[cl.Event] = (), device_feeds: Optional[dict] = None,
            types: Optional[dict] = None) -> dict:
        """Run to completion; returns every graph output as a numpy array. A staged run's values
        stay on the device between stages (each stage's kernels read the buffers of the one
        before): only the counts, the small values that decide the next stage's shapes, what a
        host node reads, and the graph's outputs come to the host."""
        with self._lock:
            if types is None:
                types = {k: (np.asarray(v).dtype, np.asarray(v).shape) for k, v in feeds.items()}
            plan = self.plan(types, feeds)
            record = RunRecord() if self.profiling else None
            values, handed = dict(feeds), None
            while True:
                hold: list = []  # the run's events and the arrays it reads (zero copy): kept until it is done
                outs, pending = execute(plan, self.device, self.queue, values, wait_for, record, device_feeds,
                                        hold=hold, handed=handed, keep_on_device=plan.stop is not None)
                if pending:
                    cl.wait_for_events(pending)
                del hold
                if plan.stop is None:
                    break
                values, handed = self._hand_over(plan, outs)
                wait_for, device_feeds = (), None
                plan = self._next_stage(plan, {k: handed[k] if v is None else v for k, v in values.items()})
            if record is not None:
                self.records.append(record)
            return outs

    def _hand_over(self, plan: Plan, outs: dict) -> tuple[dict, dict]:
        """(host values, DeviceValues) a stage hands to the next: device values stay where they
        are, except the graph's outputs and the small values that decide the next stage's
        shapes (read back now: the host needs them)."""
        _, shape_names = self._rest[id(plan)]
        on_host = set(shape_names) | set(self.graph.outputs)
        values, handed = {}, {}
        for name, v in outs.items():
            if not isinstance(v, DeviceValue):
                values[name] = v
                continue
            handed[name] = v
            values[name] = self._read_value(v) if name in on_host else None
        return values, handed

    def _read_value(self, v: DeviceValue) -> np.ndarray:
        """A handed-over value read back (blocking, after everything enqueued before it)."""
        arr = np.empty(v.shape, dtype=np.uint8 if v.dtype == np.bool_ else v.dtype)
        if arr.nbytes:
            cl.enqueue_copy(self.queue, arr, v.buffer, is_blocking=True)
        return arr.view(np.bool_) if v.dtype == np.bool_ else arr

    def release(self) -> None:
        with self._lock:
            for p in self._plans.values():
                p.release()
            self._plans.clear()
            self._last = None
            self._rest.clear()
            self.weights.release()
