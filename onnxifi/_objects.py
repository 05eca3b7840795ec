"""The objects behind ONNXIFI handles: backend IDs, backends, runs, events and graphs.

They live in one module that `backends`, `events` and `graphs` all import, so none of
those imports another's classes; `release_graph` is here because releasing a backend
releases the graphs its caller left behind.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Optional

from . import constants as C
from ._boundary import log, status_of
from ._registry import KIND_GRAPH, REGISTRY
from .types import TraceEvent, TraceEventList


# --- objects behind the handles ----------------------------------------------------------------
class BackendID:
    def __init__(self, platform: Any, device: Any) -> None:
        self.platform, self.device = platform, device
        self.refs = 0
        self.handle = 0


class Backend:
    def __init__(self, bid: BackendID, device: Any, log_level: int, optimization: int) -> None:
        self.bid, self.device = bid, device
        self.context = device.context
        self.queue = device.make_queue() if hasattr(device, "make_queue") else device.queue
        self.log_level, self.optimization = log_level, optimization
        self.graphs: set[int] = set()
        self.events: set[int] = set()
        self.lock = threading.RLock()
        self.handle = 0


class Run:
    """One onnxRunGraph in flight: the engine's run handle and its outcome."""

    def __init__(self, graph: "Graph", run: Any, gate: Optional["Event"], done_event: Any = None,
                 keepalive: Optional[list] = None) -> None:
        self.graph, self.run, self.gate = graph, run, gate
        # The event after which every output is in the caller's memory (read-backs included), and
        # the transfers' NannyEvents + staging buffers, which must live until then.
        self.done_event = done_event if done_event is not None else run.event
        self.keepalive = keepalive or []
        self.t_start_us = time.time_ns() // 1000
        self.t_done_us: Optional[int] = None
        self.finished = False
        self.status = C.ONNXIFI_STATUS_SUCCESS
        self.message = ""
        self.trace_sink: Optional[TraceEventList] = None
        self.lock = threading.Lock()

    def is_complete(self) -> bool:
        if self.finished:
            return True
        st = int(self.done_event.command_execution_status)
        if st <= 0:  # CL_COMPLETE (0) or an error (< 0)
            self.finish()
            return True
        return False

    def finish(self) -> None:
        """Wait for the run and record its status and message (once)."""
        with self.lock:
            if self.finished:
                return
            try:
                self.run.wait()
                err = getattr(self.run, "error", None)
                if err is not None:
                    raise err
                if self.done_event is not self.run.event:
                    self.done_event.wait()
            except BaseException as e:  # noqa: BLE001 - recorded for the caller
                self.status = status_of(e)
                self.message = f"{type(e).__name__}: {e}"
                log.warning("run failed: %s", self.message)
            self.keepalive = []
            self.t_done_us = time.time_ns() // 1000
            self.finished = True
            if self.trace_sink is not None:
                try:
                    self.trace_sink.fill(self._trace())
                except Exception:
                    log.exception("filling trace events failed")

    def _trace(self) -> list:
        """Per-kernel 'X' events from OpenCL profiling when the engine exposes them, else one."""
        events: list = []
        kernels = getattr(self.run, "kernel_events", None) or []  # (label, ..., cl.Event) tuples
        try:
            stamps = [(str(k[0]), int(k[-1].profile.start), int(k[-1].profile.end)) for k in kernels]
        except Exception:  # queue without profiling
            stamps = []
        if stamps:
            offset_us = (self.t_done_us or 0) - max(e for _, _, e in stamps) // 1000
            for name, start, end in stamps:
                events.append(TraceEvent(name[:C.ONNXIFI_TRACE_EVENT_NAME_SIZE], "X",
                                         start // 1000 + offset_us, 0, max(0, (end - start) // 1000)))
        else:
            done = self.t_done_us or self.t_start_us
            events.append(TraceEvent("onnxRunGraph", "X", self.t_start_us, 0, done - self.t_start_us))
        return events


class Event:
    def __init__(self, backend: Backend, run: Optional[Run] = None) -> None:
        self.backend, self.run = backend, run
        self.signalled = threading.Event()
        self.cl_event: Any = None
        if run is None:
            import pyopencl as cl

            self.cl_event = cl.UserEvent(backend.context)
        self.handle = 0

    def is_signalled(self) -> bool:
        if self.run is None:
            return self.signalled.is_set()
        return self.run.is_complete()

    def wait(self, timeout_s: Optional[float] = None) -> bool:
        """Block until signalled or `timeout_s` passes; True when signalled."""
        if self.run is None:
            return self.signalled.wait(timeout_s)
        if timeout_s is None:
            self.run.finish()
            return True
        deadline = time.monotonic() + timeout_s
        delay = 0.0002
        while not self.run.is_complete():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.005)
        return True


class IOSpec:
    def __init__(self, name: str, elem_type: int, shape: Optional[tuple]) -> None:
        self.name, self.elem_type, self.shape = name, elem_type, shape


class Graph:
    def __init__(self, backend: Backend, session: Any, inputs: dict, outputs: dict) -> None:
        self.backend, self.session = backend, session
        self.inputs: dict[str, IOSpec] = inputs
        self.outputs: dict[str, IOSpec] = outputs
        self.io: Optional[tuple[dict, dict]] = None
        self.runs: list[Run] = []
        self.lock = threading.RLock()
        self.handle = 0


def release_graph(handle: int) -> bool:
    g = REGISTRY.remove(KIND_GRAPH, handle)
    if g is None:
        return False
    with g.lock:
        runs, g.runs, g.io = list(g.runs), [], None
    for r in runs:
        if not r.finished and r.gate is not None and not r.gate.signalled.is_set():
            log.warning("onnxReleaseGraph: a run waits for an input fence that is not signalled yet")
        r.finish()
    with g.backend.lock:
        g.backend.graphs.discard(handle)
    g.session = None
    return True
