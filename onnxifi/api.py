"""The ONNXIFI 1.0 functions in Python, with the C names, arguments and status codes.

Every function returns an ``onnxStatus`` int and never raises: an exception inside
is logged and turned into a status (a clglow error's ``onnxifi_status``, else
ONNXIFI_STATUS_INTERNAL_ERROR). Out-parameters are `onnxifi.types.Ref` objects, arrays
are sequences, ``None`` plays NULL, and handles are opaque ints (see ``_registry``).

Example::

    from onnxifi import *
    ids, n = [None], Ref(1)
    onnxGetBackendIDs(ids, n)
    backend = Ref()
    onnxInitBackend(ids[0], None, backend)
    graph = Ref()
    onnxInitGraph(backend.value, None, len(model), model, 0, None, graph)
    onnxSetGraphIO(graph.value, 1, [TensorDescriptor("x", ONNXIFI_DATATYPE_FLOAT32,
                   ONNXIFI_MEMORY_TYPE_CPU, x.shape, x)], 1, [TensorDescriptor("y", ...)])
    inp, out = MemoryFence(), MemoryFence()
    ev = Ref(); onnxInitEvent(backend.value, ev); inp.event = ev.value
    onnxRunGraph(graph.value, inp, out)      # returns at once
    onnxSignalEvent(inp.event)               # inputs are ready
    onnxWaitEvent(out.event)                 # outputs are ready
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import constants as C
from ._registry import KIND_BACKEND, KIND_BACKEND_ID, KIND_EVENT, KIND_GRAPH, REGISTRY, as_int
from .types import MemoryFence, Ref, TensorDescriptor, TraceEvent, TraceEventList

log = logging.getLogger(__name__)

EXTENSION_FUNCTIONS = ("onnxGetExtensionFunctionAddress", "onnxSetIOAndRunGraph", "onnxWaitEventFor",
                       "onnxReleaseTraceEvents")
#: Space-separated list reported for ONNXIFI_BACKEND_EXTENSIONS.
EXTENSIONS = "onnx_extension_function " + " ".join(EXTENSION_FUNCTIONS[1:])

_LOG_LEVELS = {C.ONNXIFI_LOG_LEVEL_ERROR: logging.ERROR, C.ONNXIFI_LOG_LEVEL_WARNING: logging.WARNING,
               C.ONNXIFI_LOG_LEVEL_INFO: logging.INFO, C.ONNXIFI_LOG_LEVEL_DEBUG: logging.DEBUG}
_OPTIMIZATIONS = (C.ONNXIFI_OPTIMIZATION_HIGH_THROUGHPUT, C.ONNXIFI_OPTIMIZATION_LOW_LATENCY,
                  C.ONNXIFI_OPTIMIZATION_LOW_POWER, C.ONNXIFI_OPTIMIZATION_LOW_DELAY)
_KNOWN_MEMORY_TYPES = (C.ONNXIFI_MEMORY_TYPE_CPU, C.ONNXIFI_MEMORY_TYPE_CUDA_BUFFER,
                       C.ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER, C.ONNXIFI_MEMORY_TYPE_OPENGLES_TEXTURE_2D,
                       C.ONNXIFI_MEMORY_TYPE_D3D_RESOURCE)
_DATATYPES = {
    C.ONNXIFI_DATATYPE_FLOAT16: np.float16, C.ONNXIFI_DATATYPE_FLOAT32: np.float32,
    C.ONNXIFI_DATATYPE_FLOAT64: np.float64, C.ONNXIFI_DATATYPE_INT8: np.int8,
    C.ONNXIFI_DATATYPE_INT16: np.int16, C.ONNXIFI_DATATYPE_INT32: np.int32,
    C.ONNXIFI_DATATYPE_INT64: np.int64, C.ONNXIFI_DATATYPE_UINT8: np.uint8,
    C.ONNXIFI_DATATYPE_UINT16: np.uint16, C.ONNXIFI_DATATYPE_UINT32: np.uint32,
    C.ONNXIFI_DATATYPE_UINT64: np.uint64, C.ONNXIFI_DATATYPE_COMPLEX64: np.complex64,
    C.ONNXIFI_DATATYPE_COMPLEX128: np.complex128,
    9: np.bool_,  # TensorProto.BOOL: not named by onnxifi.h, but the values follow TensorProto
}
_UINT64_MAX = (1 << 64) - 1


class _Fail(Exception):
    """Internal early return with a status."""

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message)
        self.status = status


def status_of(exc: BaseException) -> int:
    """The ONNXIFI status for an exception (clglow's ``onnxifi_status`` when it is a valid one)."""
    st = getattr(exc, "onnxifi_status", None)
    if isinstance(st, int) and st in C.STATUS_NAMES and st != C.ONNXIFI_STATUS_SUCCESS:
        return st
    if isinstance(exc, MemoryError):
        return C.ONNXIFI_STATUS_NO_SYSTEM_MEMORY
    by_class = {"InvalidProtobuf": C.ONNXIFI_STATUS_INVALID_PROTOBUF,
                "InvalidModel": C.ONNXIFI_STATUS_INVALID_MODEL,
                "UnsupportedOperator": C.ONNXIFI_STATUS_UNSUPPORTED_OPERATOR,
                "InvalidArgument": C.ONNXIFI_STATUS_INVALID_SHAPE,
                "OutOfDeviceMemory": C.ONNXIFI_STATUS_NO_DEVICE_MEMORY,
                "NoDevice": C.ONNXIFI_STATUS_BACKEND_UNAVAILABLE}
    for cls in type(exc).__mro__:
        if cls.__name__ in by_class:
            return by_class[cls.__name__]
    code = getattr(getattr(exc, "code", None), "__int__", None)
    try:
        import pyopencl as cl

        if isinstance(exc, cl.Error):
            c = exc.code
            if c == cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE:
                return C.ONNXIFI_STATUS_NO_DEVICE_MEMORY
            if c in (cl.status_code.OUT_OF_RESOURCES,):
                return C.ONNXIFI_STATUS_NO_DEVICE_RESOURCES
            if c == cl.status_code.OUT_OF_HOST_MEMORY:
                return C.ONNXIFI_STATUS_NO_SYSTEM_MEMORY
    except Exception:  # pragma: no cover - pyopencl missing
        pass
    del code
    return C.ONNXIFI_STATUS_INTERNAL_ERROR


def _boundary(fn: Callable[..., int]) -> Callable[..., int]:
    """Turn every exception into a status; nothing crosses the API boundary."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return int(fn(*args, **kwargs))
        except _Fail as f:
            if f.args and f.args[0]:  # the caller's mistake: its status says it all
                log.info("%s: %s: %s", fn.__name__, C.status_name(f.status), f.args[0])
            return f.status
        except BaseException as e:  # noqa: BLE001 - the C boundary takes everything
            st = status_of(e)
            if st == C.ONNXIFI_STATUS_INTERNAL_ERROR:
                log.exception("%s failed", fn.__name__)
            else:
                log.warning("%s: %s: %s", fn.__name__, C.status_name(st), e)
            return st

    return wrapper


def _set(ref: Optional[Ref], value: Any) -> None:
    if ref is not None:
        ref.value = value


# --- objects behind the handles ----------------------------------------------------------------
class _BackendID:
    def __init__(self, platform: Any, device: Any) -> None:
        self.platform, self.device = platform, device
        self.refs = 0
        self.handle = 0


class _Backend:
    def __init__(self, bid: _BackendID, device: Any, log_level: int, optimization: int) -> None:
        self.bid, self.device = bid, device
        self.context = device.context
        self.queue = device.make_queue() if hasattr(device, "make_queue") else device.queue
        self.log_level, self.optimization = log_level, optimization
        self.graphs: set[int] = set()
        self.events: set[int] = set()
        self.lock = threading.RLock()
        self.handle = 0


class _Run:
    """One onnxRunGraph in flight: the engine's run handle and its outcome."""

    def __init__(self, graph: "_Graph", run: Any, gate: Optional["_Event"], done_event: Any = None,
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


class _Event:
    def __init__(self, backend: _Backend, run: Optional[_Run] = None) -> None:
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


class _IOSpec:
    def __init__(self, name: str, elem_type: int, shape: Optional[tuple]) -> None:
        self.name, self.elem_type, self.shape = name, elem_type, shape


class _Graph:
    def __init__(self, backend: _Backend, session: Any, inputs: dict, outputs: dict) -> None:
        self.backend, self.session = backend, session
        self.inputs: dict[str, _IOSpec] = inputs
        self.outputs: dict[str, _IOSpec] = outputs
        self.io: Optional[tuple[dict, dict]] = None
        self.runs: list[_Run] = []
        self.lock = threading.RLock()
        self.handle = 0


# --- backend IDs ---------------------------------------------------------------------------------
_ids_lock = threading.Lock()
_ids_by_device: dict[tuple, _BackendID] = {}


def _enumerate_devices() -> list:
    """(platform, device) pairs: every OpenCL device, or only the one CLGLOW_DEVICE selects."""
    import pyopencl as cl

    plats = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD / no platform
        return []
    for p in platforms:
        try:
            plats.append((p, list(p.get_devices())))
        except cl.Error:
            plats.append((p, []))
    try:
        from clglow import config
        from clglow.runtime import device as cldev

        selector = config.device_selector()
        if selector:
            pi, di = cldev._resolve(selector, plats)
            return [(plats[pi][0], plats[pi][1][di])]
    except Exception as e:  # a selector that matches nothing: expose every device
        log.warning("CLGLOW_DEVICE ignored for backend IDs: %s", e)
    return [(p, d) for p, devs in plats for d in devs]


def _backend_ids() -> list[_BackendID]:
    with _ids_lock:
        ids = []
        for p, d in _enumerate_devices():
            key = (p.int_ptr, d.int_ptr)
            bid = _ids_by_device.get(key)
            if bid is None:
                bid = _ids_by_device[key] = _BackendID(p, d)
                bid.handle = REGISTRY.new_handle(KIND_BACKEND_ID)
            ids.append(bid)
        return ids


def _get_id(handle: Any) -> _BackendID:
    bid = REGISTRY.get(KIND_BACKEND_ID, handle)
    if bid is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_ID, f"not a live backend ID: {handle!r}")
    return bid


@_boundary
def onnxGetBackendIDs(backendIDs: Optional[list], numBackends: Optional[Ref]) -> int:
    """Store one backend ID per OpenCL device; FALLBACK with the count when the list is None or short."""
    if numBackends is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    ids = _backend_ids()
    capacity = int(numBackends.value or 0)
    numBackends.value = len(ids)
    if backendIDs is None or capacity < len(ids):
        return C.ONNXIFI_STATUS_FALLBACK
    with _ids_lock:
        for i, bid in enumerate(ids):
            bid.refs += 1
            REGISTRY.add(KIND_BACKEND_ID, bid, bid.handle)
            backendIDs[i] = bid.handle
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxReleaseBackendID(backendID: Any) -> int:
    """Release one reference to a backend ID returned by onnxGetBackendIDs."""
    with _ids_lock:
        bid = _get_id(backendID)
        bid.refs -= 1
        if bid.refs <= 0:
            bid.refs = 0
            REGISTRY.remove(KIND_BACKEND_ID, backendID)
    return C.ONNXIFI_STATUS_SUCCESS


def _macs(device: Any, fp16: bool) -> int:
    """A rough peak MAC/s estimate: compute units x clock x SIMD lanes."""
    import pyopencl as cl

    if fp16 and "cl_khr_fp16" not in device.extensions.split():
        return 0
    width = int(device.native_vector_width_half if fp16 else device.native_vector_width_float) or 1
    lanes = width * (32 if int(device.type) & cl.device_type.GPU else 1)
    return int(device.max_compute_units) * int(device.max_clock_frequency) * 1_000_000 * lanes


def backend_info_value(bid: _BackendID, infoType: int) -> bytes:
    """The raw bytes of one info value (strings NUL-terminated); raises _Fail for unknown keys."""
    import pyopencl as cl

    import clglow
    from .compat import MAX_IR_VERSION, MAX_OPSET

    d = bid.device
    u64 = lambda v: int(v).to_bytes(8, "little", signed=False)  # noqa: E731
    s = lambda v: str(v).encode("utf-8") + b"\0"  # noqa: E731
    t = int(d.type)
    dev_type = (C.ONNXIFI_DEVICE_TYPE_GPU if t & cl.device_type.GPU else
                C.ONNXIFI_DEVICE_TYPE_CPU if t & cl.device_type.CPU else C.ONNXIFI_DEVICE_TYPE_NPU)
    values: dict[int, Callable[[], bytes]] = {
        C.ONNXIFI_BACKEND_ONNXIFI_VERSION: lambda: u64(C.ONNXIFI_VERSION_1_0),
        C.ONNXIFI_BACKEND_NAME: lambda: s("clglow"),
        C.ONNXIFI_BACKEND_VENDOR: lambda: s("clglow"),
        C.ONNXIFI_BACKEND_VERSION: lambda: s(getattr(clglow, "__version__", "0")),
        C.ONNXIFI_BACKEND_EXTENSIONS: lambda: s(EXTENSIONS),
        C.ONNXIFI_BACKEND_DEVICE: lambda: s(f"{d.name.strip()} ({bid.platform.name.strip()})"),
        C.ONNXIFI_BACKEND_DEVICE_TYPE: lambda: u64(dev_type),
        C.ONNXIFI_BACKEND_ONNX_IR_VERSION: lambda: s(" ".join(str(v) for v in range(3, MAX_IR_VERSION + 1))),
        C.ONNXIFI_BACKEND_OPSET_VERSION: lambda: s(f"ai.onnx:{MAX_OPSET}"),
        C.ONNXIFI_BACKEND_CAPABILITIES: lambda: u64(C.ONNXIFI_CAPABILITY_THREAD_SAFE
                                                     | C.ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE
                                                     | C.ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS),
        C.ONNXIFI_BACKEND_INIT_PROPERTIES: lambda: u64(0),
        C.ONNXIFI_BACKEND_MEMORY_TYPES: lambda: u64(C.ONNXIFI_MEMORY_TYPE_CPU | C.ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER),
        C.ONNXIFI_BACKEND_GRAPH_INIT_PROPERTIES: lambda: u64(0),
        C.ONNXIFI_BACKEND_SYNCHRONIZATION_TYPES: lambda: u64(C.ONNXIFI_SYNCHRONIZATION_EVENT),
        C.ONNXIFI_BACKEND_MEMORY_SIZE: lambda: u64(d.global_mem_size),
        C.ONNXIFI_BACKEND_MAX_GRAPH_SIZE: lambda: u64(d.global_mem_size),
        C.ONNXIFI_BACKEND_MAX_GRAPH_COUNT: lambda: u64(_UINT64_MAX),
        C.ONNXIFI_BACKEND_MACS_FP32: lambda: u64(_macs(d, False)),
        C.ONNXIFI_BACKEND_MACS_FP16: lambda: u64(_macs(d, True)),
        C.ONNXIFI_BACKEND_OPENCL_PLATFORM_ID: lambda: u64(bid.platform.int_ptr),
        C.ONNXIFI_BACKEND_OPENCL_DEVICE_ID: lambda: u64(d.int_ptr),
    }
    fn = values.get(int(infoType))
    if fn is None:
        raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, f"unknown info type {infoType}")
    return fn()


@_boundary
def onnxGetBackendInfo(backendID: Any, infoType: int, infoValue: Any, infoValueSize: Optional[Ref]) -> int:
    """Write one info value into the writable buffer `infoValue`; FALLBACK + size when it is None or short."""
    bid = _get_id(backendID)
    if infoValueSize is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    value = backend_info_value(bid, infoType)
    capacity = int(infoValueSize.value or 0)
    infoValueSize.value = len(value)
    if infoValue is None or capacity < len(value):
        return C.ONNXIFI_STATUS_FALLBACK
    view = memoryview(infoValue).cast("B")
    if view.nbytes < len(value):  # a Python buffer smaller than the size it was declared with
        return C.ONNXIFI_STATUS_FALLBACK
    view[: len(value)] = value
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxGetBackendCompatibility(backendID: Any, onnxModelSize: int, onnxModel: Any) -> int:
    """Judge a serialized ModelProto node by node without importing it (see ``onnxifi.compat``)."""
    from .compat import judge_bytes

    _get_id(backendID)
    if onnxModel is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    if not onnxModelSize:
        return C.ONNXIFI_STATUS_INVALID_SIZE
    data = bytes(memoryview(onnxModel).cast("B")[: int(onnxModelSize)])
    verdict = judge_bytes(data)
    if verdict.status != C.ONNXIFI_STATUS_SUCCESS:
        log.info("compatibility %s: %s", C.status_name(verdict.status), "; ".join(verdict.reasons))
    return verdict.status


# --- backends ------------------------------------------------------------------------------------
def _parse_properties(props: Optional[Sequence[int]], allowed: dict[int, Callable[[int], bool]],
                      what: str) -> dict[int, int]:
    """Key/value pairs up to the terminating 0; unknown key -> UNSUPPORTED_PROPERTY, bad value -> INVALID_PROPERTY."""
    out: dict[int, int] = {}
    if props is None:
        return out
    seq = list(props)
    i = 0
    while i < len(seq) and int(seq[i]) != 0:
        key = int(seq[i])
        if key not in allowed:
            raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, f"unknown {what} property {key}")
        if i + 1 >= len(seq):
            raise _Fail(C.ONNXIFI_STATUS_INVALID_PROPERTY, f"{what} property {key} has no value")
        value = int(seq[i + 1])
        if not allowed[key](value):
            raise _Fail(C.ONNXIFI_STATUS_INVALID_PROPERTY, f"bad value {value} for {what} property {key}")
        out[key] = value
        i += 2
    return out


@_boundary
def onnxInitBackend(backendID: Any, auxPropertiesList: Optional[Sequence[int]], backend: Optional[Ref]) -> int:
    """Create a backend on the ID's device; OPENCL_CONTEXT shares the caller's cl_context."""
    import pyopencl as cl

    from clglow.runtime.device import Device

    _set(backend, None)
    bid = _get_id(backendID)
    if backend is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    props = _parse_properties(auxPropertiesList, {
        C.ONNXIFI_BACKEND_PROPERTY_LOG_LEVEL: lambda v: v in _LOG_LEVELS,
        C.ONNXIFI_BACKEND_PROPERTY_OPTIMIZATION: lambda v: v in _OPTIMIZATIONS,
        C.ONNXIFI_BACKEND_OPENCL_CONTEXT: lambda v: v != 0,
    }, "backend")
    log_level = props.get(C.ONNXIFI_BACKEND_PROPERTY_LOG_LEVEL, C.ONNXIFI_LOG_LEVEL_WARNING)
    optimization = props.get(C.ONNXIFI_BACKEND_PROPERTY_OPTIMIZATION, C.ONNXIFI_OPTIMIZATION_HIGH_THROUGHPUT)
    if C.ONNXIFI_BACKEND_PROPERTY_LOG_LEVEL in props:
        for name in ("onnxifi", "clglow"):
            logging.getLogger(name).setLevel(_LOG_LEVELS[log_level])
    ctx_ptr = props.get(C.ONNXIFI_BACKEND_OPENCL_CONTEXT)
    if ctx_ptr is not None:
        ctx = ctx_ptr if isinstance(ctx_ptr, cl.Context) else cl.Context.from_int_ptr(int(ctx_ptr), retain=True)
        if bid.device.int_ptr not in [d.int_ptr for d in ctx.devices]:
            raise _Fail(C.ONNXIFI_STATUS_INVALID_PROPERTY, "the OpenCL context does not hold the backend's device")
    else:
        ctx = cl.Context([bid.device])
    device = Device.from_context(ctx, bid.device)
    b = _Backend(bid, device, log_level, optimization)
    b.handle = REGISTRY.add(KIND_BACKEND, b)
    backend.value = b.handle
    log.info("backend %#x on %s (optimization %d)", b.handle, bid.device.name.strip(), optimization)
    return C.ONNXIFI_STATUS_SUCCESS


def _get_backend(handle: Any) -> _Backend:
    b = REGISTRY.get(KIND_BACKEND, handle)
    if b is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_BACKEND, f"not a live backend: {handle!r}")
    return b


@_boundary
def onnxReleaseBackend(backend: Any) -> int:
    """Release a backend; graphs and events the caller left behind are released with it."""
    b = REGISTRY.remove(KIND_BACKEND, backend)
    if b is None:
        return C.ONNXIFI_STATUS_INVALID_BACKEND
    for gh in list(b.graphs):
        log.warning("onnxReleaseBackend: releasing graph %#x the caller left behind", gh)
        _release_graph(gh)
    for eh in list(b.events):
        REGISTRY.remove(KIND_EVENT, eh)
    b.events.clear()
    return C.ONNXIFI_STATUS_SUCCESS


# --- events --------------------------------------------------------------------------------------
def _get_event(handle: Any) -> _Event:
    ev = REGISTRY.get(KIND_EVENT, handle)
    if ev is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_EVENT, f"not a live event: {handle!r}")
    return ev


def _register_event(ev: _Event) -> int:
    ev.handle = REGISTRY.add(KIND_EVENT, ev)
    with ev.backend.lock:
        ev.backend.events.add(ev.handle)
    return ev.handle


@_boundary
def onnxInitEvent(backend: Any, event: Optional[Ref]) -> int:
    """Create a non-signalled event backed by an OpenCL user event of the backend's context."""
    _set(event, None)
    b = _get_backend(backend)
    if event is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    event.value = _register_event(_Event(b))
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxSignalEvent(event: Any) -> int:
    """Signal an event made by onnxInitEvent (completes its OpenCL user event)."""
    import pyopencl as cl

    ev = _get_event(event)
    if ev.run is not None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_STATE, "an output event is signalled by its run, not the caller")
    with ev.backend.lock:
        if ev.signalled.is_set():
            return C.ONNXIFI_STATUS_INVALID_STATE
        ev.cl_event.set_status(cl.command_execution_status.COMPLETE)
        ev.signalled.set()
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxGetEventState(event: Any, state: Optional[Ref]) -> int:
    """Store SIGNALLED or NONSIGNALLED without blocking."""
    _set(state, C.ONNXIFI_EVENT_STATE_INVALID)
    ev = _get_event(event)
    if state is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    state.value = (C.ONNXIFI_EVENT_STATE_SIGNALLED if ev.is_signalled()
                   else C.ONNXIFI_EVENT_STATE_NONSIGNALLED)
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxWaitEvent(event: Any) -> int:
    """Block until the event is signalled; for a failed run, return the run's status."""
    ev = _get_event(event)
    ev.wait()
    if ev.run is not None and ev.run.status != C.ONNXIFI_STATUS_SUCCESS:
        raise _Fail(ev.run.status, ev.run.message)
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxWaitEventFor(event: Any, timeoutMs: int, eventState: Optional[Ref], eventStatus: Optional[Ref],
                     message: Any = None, messageLength: Optional[Ref] = None) -> int:
    """Extension: wait up to `timeoutMs` (0 = forever); report state, the run's status and message.

    `message` is a writable buffer of ``messageLength.value`` bytes; the message is stored
    NUL-terminated (truncated to fit) and ``messageLength.value`` becomes its full size
    including the NUL.
    """
    _set(eventState, C.ONNXIFI_EVENT_STATE_INVALID)
    ev = _get_event(event)
    if eventState is None or eventStatus is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    done = ev.wait(None if not timeoutMs else int(timeoutMs) / 1000.0)
    eventState.value = C.ONNXIFI_EVENT_STATE_SIGNALLED if done else C.ONNXIFI_EVENT_STATE_NONSIGNALLED
    status, text = C.ONNXIFI_STATUS_SUCCESS, ""
    if done and ev.run is not None:
        status, text = ev.run.status, ev.run.message
    eventStatus.value = status
    if messageLength is not None:
        raw = text.encode("utf-8", "replace") + b"\0"
        capacity = int(messageLength.value or 0)
        if message is not None and capacity > 0:
            n = min(capacity - 1, len(raw) - 1)
            view = memoryview(message).cast("B")
            view[:n] = raw[:n]
            view[n] = 0
        messageLength.value = len(raw)
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxReleaseEvent(event: Any) -> int:
    """Release an event made by onnxInitEvent or onnxRunGraph."""
    ev = REGISTRY.remove(KIND_EVENT, event)
    if ev is None:
        return C.ONNXIFI_STATUS_INVALID_EVENT
    with ev.backend.lock:
        ev.backend.events.discard(ev.handle)
    if ev.run is None and not ev.signalled.is_set():
        log.warning("onnxReleaseEvent: event %#x released unsignalled; runs gated on it never start",
                    ev.handle)
    return C.ONNXIFI_STATUS_SUCCESS


# --- tensors -------------------------------------------------------------------------------------
def _dims(d: TensorDescriptor) -> tuple:
    n = len(d.shape) if d.dimensions is None and d.shape is not None else int(d.dimensions or 0)
    if n == 0:
        return ()
    if d.shape is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_POINTER, f"tensor {d.name!r}: shape is NULL with {n} dimensions")
    dims = tuple(int(x) for x in list(d.shape)[:n])
    if len(dims) != n:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_SHAPE, f"tensor {d.name!r}: {n} dimensions but {len(dims)} given")
    if any(x == 0 for x in dims):
        raise _Fail(C.ONNXIFI_STATUS_INVALID_SHAPE, f"tensor {d.name!r}: a dimension is 0 in {dims}")
    return dims


def _check_descriptor(d: Any, specs: dict, seen: set, what: str) -> tuple[str, np.dtype, tuple]:
    """Tag, name, dtype and shape checks shared by weights and graph IO."""
    if not isinstance(d, TensorDescriptor) or d.tag != C.ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1:
        raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_TAG, f"{what} descriptor has tag {getattr(d, 'tag', None)!r}")
    name = d.name.decode() if isinstance(d.name, bytes) else d.name
    if not name:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_NAME, f"{what} descriptor without a name")
    if name not in specs or name in seen:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_NAME,
                    f"{what} {name!r} is {'given twice' if name in seen else 'not a ' + what + ' of the graph'}"
                    f" ({what}s: {sorted(specs)})")
    seen.add(name)
    dt = _DATATYPES.get(int(d.dataType))
    if dt is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_DATATYPE, f"{what} {name!r}: unknown data type {d.dataType}")
    mt = int(d.memoryType)
    if mt not in _KNOWN_MEMORY_TYPES:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_TYPE, f"{what} {name!r}: unknown memory type {mt}")
    dims = _dims(d)
    spec: _IOSpec = specs[name]
    if spec.elem_type and spec.elem_type != int(d.dataType):
        raise _Fail(C.ONNXIFI_STATUS_MISMATCHING_DATATYPE,
                    f"{what} {name!r}: data type {d.dataType}, the graph declares {spec.elem_type}")
    if spec.shape is not None:
        ok = len(spec.shape) == len(dims) and all(not isinstance(s, int) or s <= 0 or s == x
                                                  for s, x in zip(spec.shape, dims))
        if not ok:
            raise _Fail(C.ONNXIFI_STATUS_MISMATCHING_SHAPE,
                        f"{what} {name!r}: shape {dims}, the graph declares {spec.shape}")
    return name, np.dtype(dt), dims


def _host_array(d: TensorDescriptor, dtype: np.dtype, dims: tuple, what: str) -> np.ndarray:
    """A numpy view of CPU memory (array, buffer object or int address), without copying."""
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    buf = d.buffer
    if buf is None or (isinstance(buf, int) and buf == 0):
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: NULL buffer")
    if isinstance(buf, int):
        raw = (ctypes.c_char * nbytes).from_address(buf) if nbytes else bytearray()
        return np.frombuffer(raw, dtype=dtype).reshape(dims)
    try:
        view = memoryview(buf)
    except TypeError:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: buffer is not memory") from None
    if view.nbytes < nbytes or not view.c_contiguous:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
                    f"{what} {d.name!r}: buffer holds {view.nbytes} contiguous bytes, {nbytes} needed")
    return np.frombuffer(view.cast("B"), dtype=dtype, count=int(np.prod(dims, dtype=np.int64))).reshape(dims)


def _cl_buffer(d: TensorDescriptor, b: _Backend, dtype: np.dtype, dims: tuple, what: str) -> Any:
    """A pyopencl Buffer for a cl_mem of the backend's context, used in place."""
    import pyopencl as cl

    buf = d.buffer
    if buf is None or (isinstance(buf, int) and buf == 0):
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: NULL cl_mem")
    if isinstance(buf, int):
        buf = cl.Buffer.from_int_ptr(buf, retain=True)
    if not isinstance(buf, cl.MemoryObjectHolder):
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: not a cl_mem")
    ctx = buf.get_info(cl.mem_info.CONTEXT)
    if ctx.int_ptr != b.context.int_ptr:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
                    f"{what} {d.name!r}: cl_mem belongs to another context (share it with OPENCL_CONTEXT)")
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if int(buf.size) < nbytes:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
                    f"{what} {d.name!r}: cl_mem holds {buf.size} bytes, {nbytes} needed")
    return buf


# --- graphs --------------------------------------------------------------------------------------
def _get_graph(handle: Any) -> _Graph:
    g = REGISTRY.get(KIND_GRAPH, handle)
    if g is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_GRAPH, f"not a live graph: {handle!r}")
    return g


def _value_spec(vi: Any) -> _IOSpec:
    tt = vi.type.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return _IOSpec(vi.name, int(tt.elem_type), shape)


@_boundary
def onnxInitGraph(backend: Any, auxPropertiesList: Optional[Sequence[int]], onnxModelSize: int, onnxModel: Any,
                  weightsCount: int, weightDescriptors: Optional[Sequence[TensorDescriptor]],
                  graph: Optional[Ref]) -> int:
    """Import and compile a model; bytes and weights are copied before returning.

    Weights come from ``graph.initializer`` or from the CPU weight descriptors, not both
    (onnxifi.h): when the model carries initializers the descriptors are not read, because
    some hosts (ONNX's own test driver) pass a count larger than the array they hand over.
    """
    import onnx

    import clglow
    from .compat import MAX_IR_VERSION, MAX_OPSET

    _set(graph, None)
    b = _get_backend(backend)
    if graph is None or onnxModel is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    if weightsCount and weightDescriptors is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    if not onnxModelSize:
        return C.ONNXIFI_STATUS_INVALID_SIZE
    _parse_properties(auxPropertiesList, {C.ONNXIFI_GRAPH_PROPERTY_AUTO_INSTRUMENT_NODES: lambda v: v in (0, 1)},
                      "graph")
    data = bytes(memoryview(onnxModel).cast("B")[: int(onnxModelSize)])
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_PROTOBUF, f"not a ModelProto: {e}") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MODEL, "model without ir_version or graph")
    if model.ir_version > MAX_IR_VERSION or any(
            (o.domain or "") in ("", "ai.onnx") and o.version > MAX_OPSET for o in model.opset_import):
        raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_VERSION, f"IR {model.ir_version} / opsets {model.opset_import}")
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_MODEL, str(e).splitlines()[0] if str(e) else repr(e)) from None
    initializers = {t.name for t in model.graph.initializer}
    declared = {vi.name: _value_spec(vi) for vi in model.graph.input}
    weights: dict[str, np.ndarray] = {}
    if weightsCount and initializers:
        log.info("onnxInitGraph: the model carries %d initializers; the %d weight descriptors are not read",
                 len(initializers), weightsCount)
    elif weightsCount:
        seen: set = set()
        for i in range(int(weightsCount)):
            d = weightDescriptors[i]  # type: ignore[index]
            name, dtype, dims = _check_descriptor(d, declared, seen, "weight")
            if int(d.memoryType) != C.ONNXIFI_MEMORY_TYPE_CPU:
                raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, f"weight {name!r}: weights must be CPU memory")
            weights[name] = np.array(_host_array(d, dtype, dims, "weight"), copy=True)
    inputs = {n: s for n, s in declared.items() if n not in initializers and n not in weights}
    outputs = {vi.name: _value_spec(vi) for vi in model.graph.output}
    session = clglow.InferenceSession(data, device=b.device, weights=weights or None)
    g = _Graph(b, session, inputs, outputs)
    g.handle = REGISTRY.add(KIND_GRAPH, g)
    with b.lock:
        b.graphs.add(g.handle)
    graph.value = g.handle
    fallback = [p for p in getattr(session, "placement", None) or [] if getattr(p, "where", "") == "host"]
    if fallback:
        log.info("graph %#x: %d node(s) on the host fallback", g.handle, len(fallback))
        return C.ONNXIFI_STATUS_FALLBACK
    return C.ONNXIFI_STATUS_SUCCESS


def _bind(g: _Graph, count: int, descs: Optional[Sequence[TensorDescriptor]], specs: dict,
          what: str) -> dict:
    bound: dict[str, Any] = {}
    seen: set = set()
    for i in range(int(count)):
        d = descs[i]  # type: ignore[index]
        name, dtype, dims = _check_descriptor(d, specs, seen, what)
        mt = int(d.memoryType)
        if mt == C.ONNXIFI_MEMORY_TYPE_CPU:
            bound[name] = _host_array(d, dtype, dims, what)
        elif mt == C.ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER:
            bound[name] = (_cl_buffer(d, g.backend, dtype, dims, what), dtype, dims)
        else:
            raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, f"{what} {name!r}: memory type {mt}")
    missing = [n for n in specs if n not in bound]
    if missing:
        raise _Fail(C.ONNXIFI_STATUS_UNIDENTIFIED_NAME, f"no descriptor for graph {what}(s) {missing}")
    return bound


def _engine_inputs(bound: dict) -> dict:
    """Host arrays as they are; a cl_mem as (pyopencl.Buffer, dtype, shape), as InferenceSession.enqueue takes it."""
    return dict(bound)


def _engine_outputs(bound: dict) -> dict:
    """Host arrays as they are; a cl_mem as the pyopencl.Buffer to write into."""
    return {k: (v[0] if isinstance(v, tuple) else v) for k, v in bound.items()}


@_boundary
def onnxSetGraphIO(graph: Any, inputsCount: int, inputDescriptors: Optional[Sequence[TensorDescriptor]],
                   outputsCount: int, outputDescriptors: Optional[Sequence[TensorDescriptor]]) -> int:
    """Bind every graph input and output to CPU memory or a cl_mem; on failure the binding is cleared."""
    g = _get_graph(graph)
    with g.lock:
        g.io = None
        if outputDescriptors is None or (inputsCount and inputDescriptors is None):
            return C.ONNXIFI_STATUS_INVALID_POINTER
        inputs = _bind(g, inputsCount, inputDescriptors, g.inputs, "input")
        outputs = _bind(g, outputsCount, outputDescriptors, g.outputs, "output")
        g.io = (inputs, outputs)
    return C.ONNXIFI_STATUS_SUCCESS


def _check_fence(f: Any, what: str) -> None:
    if f is None:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_POINTER, f"{what} fence is NULL")
    if not isinstance(f, MemoryFence) or f.tag != C.ONNXIFI_TAG_MEMORY_FENCE_V1:
        raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_TAG, f"{what} fence has tag {getattr(f, 'tag', None)!r}")
    if int(f.type) == C.ONNXIFI_SYNCHRONIZATION_IMPLICIT:
        raise _Fail(C.ONNXIFI_STATUS_UNSUPPORTED_FENCE_TYPE, f"{what} fence: IMPLICIT is not supported")
    if int(f.type) != C.ONNXIFI_SYNCHRONIZATION_EVENT:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_FENCE_TYPE, f"{what} fence type {f.type}")


def _start_run(g: _Graph, gate: Optional[_Event], outputFence: MemoryFence,
               trace: Optional[TraceEventList]) -> int:
    if g.io is None:
        raise _Fail(C.ONNXIFI_STATUS_UNIDENTIFIED_NAME, "graph inputs/outputs are not set (onnxSetGraphIO)")
    inputs, outputs = g.io
    wait_for = [gate.cl_event] if gate is not None else []
    # CPU memory is used in place: the session's enqueue keeps its transfers' events and arrays
    # on the handle until the run completes; OpenCL buffers arrive as (cl_mem, dtype, shape).
    eng_in = dict(inputs)
    eng_out = {name: (v[0] if isinstance(v, tuple) else v) for name, v in outputs.items()}
    handle = g.session.enqueue(eng_in, eng_out, wait_for=wait_for)
    done = handle.event
    g.backend.queue.flush()
    keep: list = [inputs, outputs]
    run = _Run(g, handle, gate, done, keep)
    run.trace_sink = trace
    g.runs = [r for r in g.runs if not r.finished] + [run]
    outputFence.event = _register_event(_Event(g.backend, run))
    return C.ONNXIFI_STATUS_SUCCESS


@_boundary
def onnxRunGraph(graph: Any, inputFence: Optional[MemoryFence], outputFence: Optional[MemoryFence]) -> int:
    """Enqueue a run gated on the input fence's event; store the output event; return at once."""
    g = _get_graph(graph)
    _check_fence(inputFence, "input")
    _check_fence(outputFence, "output")
    gate = REGISTRY.get(KIND_EVENT, inputFence.event)  # type: ignore[union-attr]
    if gate is None or gate.run is not None:
        # The gate must be an onnxInitEvent event (an OpenCL user event).
        raise _Fail(C.ONNXIFI_STATUS_INVALID_EVENT, f"input fence event {inputFence.event!r}")  # type: ignore
    if gate.backend is not g.backend:
        raise _Fail(C.ONNXIFI_STATUS_INVALID_EVENT, "input fence event belongs to another backend")
    with g.lock:
        return _start_run(g, gate, outputFence, None)  # type: ignore[arg-type]


@_boundary
def onnxSetIOAndRunGraph(graph: Any, inputsCount: int, inputDescriptors: Optional[Sequence[TensorDescriptor]],
                         outputsCount: int, outputDescriptors: Optional[Sequence[TensorDescriptor]],
                         outputFence: Optional[MemoryFence], traceEvents: Optional[TraceEventList] = None) -> int:
    """Extension: onnxSetGraphIO then a run with inputs ready now; `traceEvents` is filled when it completes."""
    g = _get_graph(graph)
    _check_fence(outputFence, "output")
    with g.lock:
        st = onnxSetGraphIO(graph, inputsCount, inputDescriptors, outputsCount, outputDescriptors)
        if st != C.ONNXIFI_STATUS_SUCCESS:
            return st
        if traceEvents is not None:
            traceEvents.fill([])
        return _start_run(g, None, outputFence, traceEvents)  # type: ignore[arg-type]


@_boundary
def onnxReleaseTraceEvents(traceEvents: Optional[TraceEventList]) -> int:
    """Extension: release the events a run stored in `traceEvents`."""
    if traceEvents is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    traceEvents.traceEvents = []
    return C.ONNXIFI_STATUS_SUCCESS


def _release_graph(handle: int) -> bool:
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


@_boundary
def onnxReleaseGraph(graph: Any) -> int:
    """Wait for the graph's runs in flight, then release it."""
    h = as_int(graph)
    if h is None or REGISTRY.get(KIND_GRAPH, h) is None:
        return C.ONNXIFI_STATUS_INVALID_GRAPH
    return C.ONNXIFI_STATUS_SUCCESS if _release_graph(h) else C.ONNXIFI_STATUS_INVALID_GRAPH


_EXTENSIONS: dict[str, Callable[..., int]] = {}


@_boundary
def onnxGetExtensionFunctionAddress(backendID: Any, name: Optional[str], function: Optional[Ref]) -> int:
    """Look up an extension function by name (``onnxWaitEventFor`` or Glow's ``onnxWaitEventForFunction``)."""
    _set(function, None)
    _get_id(backendID)
    if name is None or function is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    key = name.decode() if isinstance(name, bytes) else str(name)
    key = key[: -len("Function")] if key.endswith("Function") and key != "onnxGetExtensionFunctionAddress" else key
    fn = _EXTENSIONS.get(key)
    if fn is None:
        return C.ONNXIFI_STATUS_UNIDENTIFIED_NAME
    function.value = fn
    return C.ONNXIFI_STATUS_SUCCESS


_EXTENSIONS.update({"onnxGetExtensionFunctionAddress": onnxGetExtensionFunctionAddress,
                    "onnxSetIOAndRunGraph": onnxSetIOAndRunGraph, "onnxWaitEventFor": onnxWaitEventFor,
                    "onnxReleaseTraceEvents": onnxReleaseTraceEvents})


def backend_context(backend: Any) -> Any:
    """The ``pyopencl.Context`` of a backend handle (for allocating OPENCL_BUFFER tensors), or None."""
    b = REGISTRY.get(KIND_BACKEND, backend)
    return None if b is None else b.context


CORE_FUNCTIONS = ("onnxGetBackendIDs", "onnxReleaseBackendID", "onnxGetBackendInfo", "onnxGetBackendCompatibility",
                  "onnxInitBackend", "onnxReleaseBackend", "onnxInitEvent", "onnxSignalEvent",
                  "onnxGetEventState", "onnxWaitEvent", "onnxReleaseEvent", "onnxInitGraph", "onnxSetGraphIO",
                  "onnxRunGraph", "onnxReleaseGraph")

__all__ = list(CORE_FUNCTIONS) + ["onnxGetExtensionFunctionAddress", "onnxSetIOAndRunGraph", "onnxWaitEventFor",
                                  "onnxReleaseTraceEvents", "backend_context", "status_of", "EXTENSIONS"]
