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


def install(ffi: Any, lib: Any) -> None:
    """Register every ``clglow_py_*`` function of the library."""
    _configure_logging()
    NULL = ffi.NULL

    def handle(p: Any) -> Optional[int]:
        return int(ffi.cast("uintptr_t", p)) or None

    def as_ptr(h: Any) -> Any:
        return ffi.cast("void*", int(h or 0))

    def props(p: Any) -> Optional[list]:
        if p == NULL:
            return None
        out: list = []
        for i in range(0, 2 * _MAX_PROPERTIES, 2):
            key = int(p[i])
            if key == 0:
                return out + [0]
            out += [key, int(p[i + 1])]
        return out + [0]

    def descriptor(d: Any) -> TensorDescriptor:
        tag = int(d.tag)
        if tag != C.ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1:  # validate the tag before touching anything else
            return TensorDescriptor(None, 0, 0, None, None, tag=tag)
        name = ffi.string(d.name).decode("utf-8", "replace") if d.name != NULL else None
        n = int(d.dimensions)
        if n > _MAX_DIMS:
            shape: Optional[list] = [0]
            n = 1
        elif n == 0 or d.shape == NULL:
            shape = None if n else []
        else:
            shape = [int(d.shape[i]) for i in range(n)]
        return TensorDescriptor(name, int(d.dataType), int(d.memoryType), shape, int(d.buffer), tag=tag,
                                dimensions=n)

    class Descriptors:
        """A lazy view of a C descriptor array: element i is read when the API asks for it."""

        def __init__(self, p: Any, count: int) -> None:
            self.p, self.count = p, count

        def __len__(self) -> int:
            return self.count

        def __getitem__(self, i: int) -> TensorDescriptor:
            if not 0 <= i < self.count:
                raise IndexError(i)
            return descriptor(self.p[i])

    def descriptors(p: Any, count: int) -> Optional[Descriptors]:
        return None if p == NULL else Descriptors(p, int(count))

    def fence(p: Any) -> Optional[MemoryFence]:
        if p == NULL:
            return None
        tag = int(p.tag)
        if tag != C.ONNXIFI_TAG_MEMORY_FENCE_V1:
            return MemoryFence(0, None, tag=tag)
        return MemoryFence(int(p.type), handle(p.event), tag=tag)

    class CTraceList(TraceEventList):
        """Writes the trace into the caller's onnxTraceEventList when the run completes."""

        def __init__(self, p: Any) -> None:
            super().__init__()
            self.p = p

        def fill(self, events: list) -> None:
            super().fill(events)
            if not lib.clglow_trace_alloc(self.p, len(events)):
                raise MemoryError("trace events")
            for i, e in enumerate(events):
                t = self.p.traceEvents[i]
                name = e.eventName.encode("utf-8", "replace")[: C.ONNXIFI_TRACE_EVENT_NAME_SIZE]
                ffi.memmove(t.eventName, name + b"\0", len(name) + 1)
                t.eventType = e.eventType.encode()[:1] or b"X"
                t.timestamp, t.tid, t.duration = int(e.timestamp), int(e.tid), int(e.duration)

    def out_ref(p: Any, initial: Any = None) -> Optional[Ref]:
        return None if p == NULL else Ref(initial)

    def guard(fn: Any) -> Any:
        """Register fn for clglow_py_<name>; an exception becomes INTERNAL_ERROR."""
        return ffi.def_extern(name="clglow_py_" + fn.__name__, error=C.ONNXIFI_STATUS_INTERNAL_ERROR)(fn)

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
                ids[i] = as_ptr(out[i])
        return st

    @guard
    def onnxReleaseBackendID(bid: Any) -> int:
        return api.onnxReleaseBackendID(handle(bid))

    @guard
    def onnxGetBackendInfo(bid: Any, info: int, value: Any, size: Any) -> int:
        ref = out_ref(size, None if size == NULL else int(size[0]))
        buf = ffi.buffer(value, int(size[0])) if value != NULL and size != NULL and int(size[0]) > 0 else None
        st = api.onnxGetBackendInfo(handle(bid), int(info), buf, ref)
        if ref is not None and st in (C.ONNXIFI_STATUS_SUCCESS, C.ONNXIFI_STATUS_FALLBACK):
            size[0] = int(ref.value)
        return st

    @guard
    def onnxGetBackendCompatibility(bid: Any, size: int, model: Any) -> int:
        data = None if model == NULL else (ffi.buffer(model, int(size)) if size else b"")
        return api.onnxGetBackendCompatibility(handle(bid), int(size), data)

    @guard
    def onnxInitBackend(bid: Any, aux: Any, backend: Any) -> int:
        if backend != NULL:
            backend[0] = NULL
        ref = out_ref(backend)
        st = api.onnxInitBackend(handle(bid), props(aux), ref)
        if ref is not None and ref.value:
            backend[0] = as_ptr(ref.value)
        return st

    @guard
    def onnxReleaseBackend(backend: Any) -> int:
        return api.onnxReleaseBackend(handle(backend))

    @guard
    def onnxInitEvent(backend: Any, event: Any) -> int:
        if event != NULL:
            event[0] = NULL
        ref = out_ref(event)
        st = api.onnxInitEvent(handle(backend), ref)
        if ref is not None and ref.value:
            event[0] = as_ptr(ref.value)
        return st

    @guard
    def onnxSignalEvent(event: Any) -> int:
        return api.onnxSignalEvent(handle(event))

    @guard
    def onnxGetEventState(event: Any, state: Any) -> int:
        ref = out_ref(state, C.ONNXIFI_EVENT_STATE_INVALID)
        st = api.onnxGetEventState(handle(event), ref)
        if ref is not None:
            state[0] = int(ref.value)
        return st

    @guard
    def onnxWaitEvent(event: Any) -> int:
        return api.onnxWaitEvent(handle(event))

    @guard
    def onnxReleaseEvent(event: Any) -> int:
        return api.onnxReleaseEvent(handle(event))

    @guard
    def onnxInitGraph(backend: Any, aux: Any, size: int, model: Any, count: int, weights: Any, graph: Any) -> int:
        if graph != NULL:
            graph[0] = NULL
        ref = out_ref(graph)
        data = None if model == NULL else (ffi.buffer(model, int(size)) if size else b"")
        st = api.onnxInitGraph(handle(backend), props(aux), int(size), data, int(count),
                               descriptors(weights, count), ref)
        if ref is not None and ref.value:
            graph[0] = as_ptr(ref.value)
        return st

    @guard
    def onnxSetGraphIO(graph: Any, n_in: int, inputs: Any, n_out: int, outputs: Any) -> int:
        return api.onnxSetGraphIO(handle(graph), int(n_in), descriptors(inputs, n_in), int(n_out),
                                  descriptors(outputs, n_out))

    @guard
    def onnxRunGraph(graph: Any, in_fence: Any, out_fence: Any) -> int:
        out = fence(out_fence)
        st = api.onnxRunGraph(handle(graph), fence(in_fence), out)
        if out is not None and out.tag == C.ONNXIFI_TAG_MEMORY_FENCE_V1 and st == C.ONNXIFI_STATUS_SUCCESS:
            out_fence.event = as_ptr(out.event)
        return st

    @guard
    def onnxReleaseGraph(graph: Any) -> int:
        return api.onnxReleaseGraph(handle(graph))

    @guard
    def onnxSetIOAndRunGraph(graph: Any, n_in: int, inputs: Any, n_out: int, outputs: Any, out_fence: Any,
                             traces: Any) -> int:
        out = fence(out_fence)
        sink = None if traces == NULL else CTraceList(traces)
        st = api.onnxSetIOAndRunGraph(handle(graph), int(n_in), descriptors(inputs, n_in), int(n_out),
                                      descriptors(outputs, n_out), out, sink)
        if out is not None and out.tag == C.ONNXIFI_TAG_MEMORY_FENCE_V1 and st == C.ONNXIFI_STATUS_SUCCESS:
            out_fence.event = as_ptr(out.event)
        return st

    @guard
    def onnxWaitEventFor(event: Any, timeout_ms: int, state: Any, status: Any, message: Any, length: Any) -> int:
        st_ref = out_ref(state, C.ONNXIFI_EVENT_STATE_INVALID)
        status_ref = out_ref(status, C.ONNXIFI_STATUS_SUCCESS)
        len_ref = out_ref(length, None if length == NULL else int(length[0]))
        buf = ffi.buffer(message, int(length[0])) if message != NULL and length != NULL and int(length[0]) else None
        st = api.onnxWaitEventFor(handle(event), int(timeout_ms), st_ref, status_ref, buf, len_ref)
        if st_ref is not None:
            state[0] = int(st_ref.value)
        if status_ref is not None:
            status[0] = int(status_ref.value)
        if len_ref is not None and len_ref.value is not None:
            length[0] = int(len_ref.value)
        return st

    @guard
    def onnxGetExtensionFunctionAddress(bid: Any, name: Any, has_function: int) -> int:
        ref = Ref() if has_function else None
        key = None if name == NULL else ffi.string(name).decode("utf-8", "replace")
        return api.onnxGetExtensionFunctionAddress(handle(bid), key, ref)

    log.debug("onnxifi C bridge installed")
