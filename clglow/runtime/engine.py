"""The engine: plans per input signature, staged execution, synchronous and queued runs.

One engine belongs to one session. Plans are cached by the concrete (dtype,
shape) of every input; a model whose shapes depend on data is run in stages,
each stage planned for the real shapes of what the previous stage produced.
"""
from __future__ import annotations

import logging
import threading
from typing import Optional, Sequence

import numpy as np
import pyopencl as cl

from ..errors import ClglowError, DeviceError, InvalidModel
from ..ir import Graph
from ..shapes import specialize
from .executor import Plan, RunRecord, WeightCache, build_plan, execute

log = logging.getLogger(__name__)


def _signature(types: dict) -> tuple:
    return tuple(sorted((k, np.dtype(d).str, tuple(int(x) for x in s)) for k, (d, s) in types.items()))


class Engine:
    def __init__(self, graph: Graph, device, host_fallback: bool = True, profiling: bool = False):
        self.graph = graph
        self.device = device
        self.host_fallback = host_fallback
        self.queue = device.make_queue(profiling=True) if profiling else device.queue
        self.weights = WeightCache(device.context, self.queue)
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.RLock()  # one run at a time per session: plans own their buffers
        self.records: list[RunRecord] = []
        self.profiling = profiling

    # -- planning --------------------------------------------------------------------------------
    def plan(self, input_types: dict) -> Plan:
        key = _signature(input_types)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = self._build(self.graph, input_types, self.graph.outputs)
                self._plans[key] = plan
            return plan

    def _build(self, graph: Graph, input_types: dict, outputs: Sequence[str]) -> Plan:
        spec, stop = specialize(graph, input_types)
        if stop is None:
            return build_plan(spec, None, outputs, self.device, self.weights, self.host_fallback)
        # staged: this stage hands over everything the rest of the graph needs
        produced = set(spec.inputs)
        for n in spec.nodes[:stop]:
            produced.update(o for o in n.outputs if o)
        later_needs = {i for n in spec.nodes[stop:] for i in n.inputs if i}
        crossing = sorted((later_needs | set(outputs)) & produced)
        return build_plan(spec, stop, crossing, self.device, self.weights, self.host_fallback)

    def _next_stage(self, plan: Plan, values: dict) -> Plan:
        spec = plan.graph
        rest_nodes = spec.nodes[plan.stop:]  # type: ignore[index]
        carried = list(values)
        key = _signature({k: (values[k].dtype, values[k].shape) for k in carried})
        st = plan.next_stages.get(key)
        if st is None:
            values_map = dict(spec.values)
            rest = Graph(list(rest_nodes), values_map, carried, list(self.graph.outputs), spec.opsets, spec.name,
                         spec.ir_version)
            types = {k: (values[k].dtype, values[k].shape) for k in carried}
            st = self._build(rest, types, self.graph.outputs)
            plan.next_stages[key] = st
        return st

    # -- running ---------------------------------------------------------------------------------
    def run(self, feeds: dict, wait_for: Sequence[cl.Event] = (), device_feeds: Optional[dict] = None,
            types: Optional[dict] = None) -> dict:
        """Run to completion; returns every graph output as a numpy array."""
        with self._lock:
            if types is None:
                types = {k: (np.asarray(v).dtype, np.asarray(v).shape) for k, v in feeds.items()}
            plan = self.plan(types)
            record = RunRecord() if self.profiling else None
            values = dict(feeds)
            while True:
                outs, pending = execute(plan, self.device, self.queue, values, wait_for, record, device_feeds)
                if pending:
                    cl.wait_for_events(pending)
                if plan.stop is None:
                    break
                values = outs
                wait_for, device_feeds = (), None
                plan = self._next_stage(plan, values)
            if record is not None:
                self.records.append(record)
            return outs

    def release(self) -> None:
        with self._lock:
            for p in self._plans.values():
                p.release()
            self._plans.clear()
            self.weights.release()
