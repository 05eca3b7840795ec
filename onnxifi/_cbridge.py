"""C ABI <-> Python ONNXIFI: the ``extern "Python"`` side of ``libonnxifi-clglow.so``.

``install(ffi, lib)`` runs inside the library's embedded interpreter. Each C entry
point converts pointers into `onnxifi.types` objects, calls ``onnxifi.api`` and
writes results back through the C pointers. Descriptor arrays are read lazily,
one element at a time and tag first, so the API decides how far to read.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

from . import api
from . import constants as C
from .types import MemoryFence, Ref, TensorDescriptor, TraceEventList

log = logging.getLogger(__name__)
_MAX_DIMS = 64
_MAX_PROPERTIES = 256


def _configure_logging() -> None:
    """In a C host nobody configures Python logging: log to stderr at ONNXIFI_CLGLOW_LOG_LEVEL (WARNING)."""
    root = logging.getLogger("onnxifi")
    if logging.getLogger().handlers or root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(levelname)s %(name)s] %(message)s"))
    level = os.environ.get("ONNXIFI_CLGLOW_LOG_LEVEL", "WARNING").upper()
    for name in ("onnxifi", "clglow"):
        lg = logging.getLogger(name)
        lg.addHandler(handler)
        lg.setLevel(getattr(logging, level, logging.WARNING))


def preload() -> None:
    """Import the modules with native code now (the library's init code imports them with RTLD_DEEPBIND)."""
    import numpy  # noqa: F401
    import onnx  # noqa: F401
    import onnx.checker  # noqa: F401
    import onnx.shape_inference  # noqa: F401
    import pyopencl  # noqa: F401

    import clglow  # noqa: F401
    from . import compat  # noqa: F401


class _Conv:
    """C <-> Python conversions over one ffi: handles, property lists, descriptors, fences."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        self.ffi, self.lib, self.NULL = ffi, lib, ffi.NULL

    def handle(self, p: Any) -> Optional[int]:
        return int(self.ffi.cast("uintptr_t", p)) or None

    def as_ptr(self, h: Any) -> Any:
        return self.ffi.cast("void*", int(h or 0))

    def props(self, p: Any) -> Optional[list]:
        """A 0-terminated key/value list (at most _MAX_PROPERTIES pairs are read)."""
        if p == self.NULL:
            return None
        out: list = []
        for i in range(0, 2 * _MAX_PROPERTIES, 2):
            key = int(p[i])
            if key == 0:
                return out + [0]
            out += [key, int(p[i + 1])]
        return out + [0]

    def descriptor(self, d: Any) -> TensorDescriptor:
        tag = int(d.tag)
        if tag != C.ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1:  # validate the tag before touching anything else
            return TensorDescriptor(None, 0, 0, None, None, tag=tag)
        name = self.ffi.string(d.name).decode("utf-8", "replace") if d.name != self.NULL else None
        n = int(d.dimensions)
        if n > _MAX_DIMS:
            shape: Optional[list] = [0]
            n = 1
        elif n == 0 or d.shape == self.NULL:
            shape = None if n else []
        else:
            shape = [int(d.shape[i]) for i in range(n)]
        return TensorDescriptor(name, int(d.dataType), int(d.memoryType), shape, int(d.buffer), tag=tag,
                                dimensions=n)

    def descriptors(self, p: Any, count: int) -> Optional["_Descriptors"]:
        return None if p == self.NULL else _Descriptors(self, p, int(count))

    def fence(self, p: Any) -> Optional[MemoryFence]:
        if p == self.NULL:
            return None
        tag = int(p.tag)
        if tag != C.ONNXIFI_TAG_MEMORY_FENCE_V1:
            return MemoryFence(0, None, tag=tag)
        return MemoryFence(int(p.type), self.handle(p.event), tag=tag)

    def out_ref(self, p: Any, initial: Any = None) -> Optional[Ref]:
        return None if p == self.NULL else Ref(initial)

    def buffer(self, p: Any, size: int) -> Any:
        return self.ffi.buffer(p, int(size))

    def write_out_event(self, out: Optional[MemoryFence], p: Any, status: int) -> None:
        """Store a run's output event into the caller's fence once the run started."""
        if out is not None and out.tag == C.ONNXIFI_TAG_MEMORY_FENCE_V1 and status == C.ONNXIFI_STATUS_SUCCESS:
            p.event = self.as_ptr(out.event)


class _Descriptors:
    """A lazy view of a C descriptor array: element i is read when the API asks for it."""

    def __init__(self, cv: _Conv, p: Any, count: int) -> None:
        self.cv, self.p, self.count = cv, p, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> TensorDescriptor:
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self.cv.descriptor(self.p[i])


class _CTraceList(TraceEventList):
    """Writes the trace into the caller's onnxTraceEventList when the run completes."""

    def __init__(self, cv: _Conv, p: Any) -> None:
        super().__init__()
        self.cv, self.p = cv, p

    def fill(self, events: list) -> None:
        super().fill(events)
        if not self.cv.lib.clglow_trace_alloc(self.p, len(events)):
            raise MemoryError("trace events")
        for i, e in enumerate(events):
            t = self.p.traceEvents[i]
            name = e.eventName.encode("utf-8", "replace")[: C.ONNXIFI_TRACE_EVENT_NAME_SIZE]
            self.cv.ffi.memmove(t.eventName, name + b"\0", len(name) + 1)
            t.eventType = e.eventType.encode()[:1] or b"X"
            t.timestamp, t.tid, t.duration = int(e.timestamp), int(e.tid), int(e.duration)


def install(ffi: Any, lib: Any) -> None:
    """Register every ``clglow_py_*`` function of the library (declared in csrc/onnxifi_clglow_bridge.h)."""
    _configure_logging()
    cv = _Conv(ffi, lib)

    def guard(fn: Any) -> Any:
        """Register fn for clglow_py_<name>; an exception that escapes becomes INTERNAL_ERROR."""
        return ffi.def_extern(name="clglow_py_" + fn.__name__, error=C.ONNXIFI_STATUS_INTERNAL_ERROR)(fn)

    _install_backends(cv, guard)
    _install_events(cv, guard)
    _install_graphs(cv, guard)
    log.debug("onnxifi C bridge installed")


def _install_backends(cv: _Conv, guard: Any) -> None:
    """Backend IDs, backend info, compatibility, backends; the extension lookup."""
    NULL = cv.NULL

    @guard
    def onnxGetBackendIDs(ids: Any, num: Any) -> int:
        if num == NULL:
            return C.ONNXIFI_STATUS_INVALID_POINTER
        ref = Ref(int(num[0]))
        out = None if ids == NULL else [None] * int(num[0])
        st = api.onnxGetBackendIDs(out, ref)
        if st in (C.ONNXIFI_STATUS_SUCCESS, C.ONNXIFI_STATUS_FALLBACK):
            num[0] = int(ref.value)
        if st == C.ONNXIFI_STATUS_SUCCESS and out is not None:
            for i in range(int(ref.value)):
                ids[i] = cv.as_ptr(out[i])
        return st

    @guard
    def onnxReleaseBackendID(bid: Any) -> int:
        return api.onnxReleaseBackendID(cv.handle(bid))

    @guard
    def onnxGetBackendInfo(bid: Any, info: int, value: Any, size: Any) -> int:
        ref = cv.out_ref(size, None if size == NULL else int(size[0]))
        buf = cv.buffer(value, size[0]) if value != NULL and size != NULL and int(size[0]) > 0 else None
        st = api.onnxGetBackendInfo(cv.handle(bid), int(info), buf, ref)
        if ref is not None and st in (C.ONNXIFI_STATUS_SUCCESS, C.ONNXIFI_STATUS_FALLBACK):
            size[0] = int(ref.value)
        return st

    @guard
    def onnxGetBackendCompatibility(bid: Any, size: int, model: Any) -> int:
        data = None if model == NULL else (cv.buffer(model, size) if size else b"")
        return api.onnxGetBackendCompatibility(cv.handle(bid), int(size), data)

    @guard
    def onnxInitBackend(bid: Any, aux: Any, backend: Any) -> int:
        if backend != NULL:
            backend[0] = NULL
        ref = cv.out_ref(backend)
        st = api.onnxInitBackend(cv.handle(bid), cv.props(aux), ref)
        if ref is not None and ref.value:
            backend[0] = cv.as_ptr(ref.value)
        return st

    @guard
    def onnxReleaseBackend(backend: Any) -> int:
        return api.onnxReleaseBackend(cv.handle(backend))

    @guard
    def onnxGetExtensionFunctionAddress(bid: Any, name: Any, has_function: int) -> int:
        ref = Ref() if has_function else None
        key = None if name == NULL else cv.ffi.string(name).decode("utf-8", "replace")
        return api.onnxGetExtensionFunctionAddress(cv.handle(bid), key, ref)


def _install_events(cv: _Conv, guard: Any) -> None:
    """Events, and the onnxWaitEventFor extension."""
    NULL = cv.NULL

    @guard
    def onnxInitEvent(backend: Any, event: Any) -> int:
        if event != NULL:
            event[0] = NULL
        ref = cv.out_ref(event)
        st = api.onnxInitEvent(cv.handle(backend), ref)
        if ref is not None and ref.value:
            event[0] = cv.as_ptr(ref.value)
        return st

    @guard
    def onnxSignalEvent(event: Any) -> int:
        return api.onnxSignalEvent(cv.handle(event))

    @guard
    def onnxGetEventState(event: Any, state: Any) -> int:
        ref = cv.out_ref(state, C.ONNXIFI_EVENT_STATE_INVALID)
        st = api.onnxGetEventState(cv.handle(event), ref)
        if ref is not None:
            state[0] = int(ref.value)
        return st

    @guard
    def onnxWaitEvent(event: Any) -> int:
        return api.onnxWaitEvent(cv.handle(event))

    @guard
    def onnxReleaseEvent(event: Any) -> int:
        return api.onnxReleaseEvent(cv.handle(event))

    @guard
    def onnxWaitEventFor(event: Any, timeout_ms: int, state: Any, status: Any, message: Any, length: Any) -> int:
        st_ref = cv.out_ref(state, C.ONNXIFI_EVENT_STATE_INVALID)
        status_ref = cv.out_ref(status, C.ONNXIFI_STATUS_SUCCESS)
        len_ref = cv.out_ref(length, None if length == NULL else int(length[0]))
        buf = cv.buffer(message, length[0]) if message != NULL and length != NULL and int(length[0]) else None
        st = api.onnxWaitEventFor(cv.handle(event), int(timeout_ms), st_ref, status_ref, buf, len_ref)
        if st_ref is not None:
            state[0] = int(st_ref.value)
        if status_ref is not None:
            status[0] = int(status_ref.value)
        if len_ref is not None and len_ref.value is not None:
            length[0] = int(len_ref.value)
        return st


def _install_graphs(cv: _Conv, guard: Any) -> None:
    """Graphs, their IO and runs, and the onnxSetIOAndRunGraph extension."""
    NULL = cv.NULL

    @guard
    def onnxInitGraph(backend: Any, aux: Any, size: int, model: Any, count: int, weights: Any, graph: Any) -> int:
        if graph != NULL:
            graph[0] = NULL
        ref = cv.out_ref(graph)
        data = None if model == NULL else (cv.buffer(model, size) if size else b"")
        st = api.onnxInitGraph(cv.handle(backend), cv.props(aux), int(size), data, int(count),
                               cv.descriptors(weights, count), ref)
        if ref is not None and ref.value:
            graph[0] = cv.as_ptr(ref.value)
        return st

    @guard
    def onnxSetGraphIO(graph: Any, n_in: int, inputs: Any, n_out: int, outputs: Any) -> int:
        return api.onnxSetGraphIO(cv.handle(graph), int(n_in), cv.descriptors(inputs, n_in), int(n_out),
                                  cv.descriptors(outputs, n_out))

    @guard
    def onnxRunGraph(graph: Any, in_fence: Any, out_fence: Any) -> int:
        out = cv.fence(out_fence)
        st = api.onnxRunGraph(cv.handle(graph), cv.fence(in_fence), out)
        cv.write_out_event(out, out_fence, st)
        return st

    @guard
    def onnxReleaseGraph(graph: Any) -> int:
        return api.onnxReleaseGraph(cv.handle(graph))

    @guard
    def onnxSetIOAndRunGraph(graph: Any, n_in: int, inputs: Any, n_out: int, outputs: Any, out_fence: Any,
                             traces: Any) -> int:
        out = cv.fence(out_fence)
        sink = None if traces == NULL else _CTraceList(cv, traces)
        st = api.onnxSetIOAndRunGraph(cv.handle(graph), int(n_in), cv.descriptors(inputs, n_in), int(n_out),
                                      cv.descriptors(outputs, n_out), out, sink)
        cv.write_out_event(out, out_fence, st)
        return st
