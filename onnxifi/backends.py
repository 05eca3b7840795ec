"""ONNXIFI backend IDs and backends: enumeration, info, compatibility, init and release."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, Sequence

from . import constants as C
from ._boundary import Fail, boundary, log, set_out
from ._objects import Backend, BackendID, release_graph
from ._registry import KIND_BACKEND, KIND_BACKEND_ID, KIND_EVENT, REGISTRY
from .types import Ref

EXTENSION_FUNCTIONS = ("onnxGetExtensionFunctionAddress", "onnxSetIOAndRunGraph", "onnxWaitEventFor",
                       "onnxReleaseTraceEvents")
#: Space-separated list reported for ONNXIFI_BACKEND_EXTENSIONS.
EXTENSIONS = "onnx_extension_function " + " ".join(EXTENSION_FUNCTIONS[1:])

_LOG_LEVELS = {C.ONNXIFI_LOG_LEVEL_ERROR: logging.ERROR, C.ONNXIFI_LOG_LEVEL_WARNING: logging.WARNING,
               C.ONNXIFI_LOG_LEVEL_INFO: logging.INFO, C.ONNXIFI_LOG_LEVEL_DEBUG: logging.DEBUG}
_OPTIMIZATIONS = (C.ONNXIFI_OPTIMIZATION_HIGH_THROUGHPUT, C.ONNXIFI_OPTIMIZATION_LOW_LATENCY,
                  C.ONNXIFI_OPTIMIZATION_LOW_POWER, C.ONNXIFI_OPTIMIZATION_LOW_DELAY)
_UINT64_MAX = (1 << 64) - 1


# --- backend IDs ---------------------------------------------------------------------------------
_ids_lock = threading.Lock()
_ids_by_device: dict[tuple, BackendID] = {}


def enumerate_devices() -> list:
    """(platform, device) pairs: every OpenCL device, or only the one CLGLOW_DEVICE selects."""
    from clglow import config
    from clglow.runtime import selection

    plats = selection.platforms()  # [] without an ICD; checks pocl's kernel cache before it loads
    try:
        selector = config.device_selector()
        if selector:
            pi, di = selection.resolve(selector, plats)
            return [(plats[pi][0], plats[pi][1][di])]
    except Exception as e:  # a selector that matches nothing: expose every device
        log.warning("CLGLOW_DEVICE ignored for backend IDs: %s", e)
    return [(p, d) for p, devs in plats for d in devs]


def backend_ids() -> list[BackendID]:
    with _ids_lock:
        ids = []
        for p, d in enumerate_devices():
            key = (p.int_ptr, d.int_ptr)
            bid = _ids_by_device.get(key)
            if bid is None:
                bid = _ids_by_device[key] = BackendID(p, d)
                bid.handle = REGISTRY.new_handle(KIND_BACKEND_ID)
            ids.append(bid)
        return ids


def get_id(handle: Any) -> BackendID:
    bid = REGISTRY.get(KIND_BACKEND_ID, handle)
    if bid is None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_ID, f"not a live backend ID: {handle!r}")
    return bid


@boundary
def onnxGetBackendIDs(backendIDs: Optional[list], numBackends: Optional[Ref]) -> int:
    """Store one backend ID per OpenCL device; FALLBACK with the count when the list is None or short."""
    if numBackends is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    ids = backend_ids()
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


@boundary
def onnxReleaseBackendID(backendID: Any) -> int:
    """Release one reference to a backend ID returned by onnxGetBackendIDs."""
    with _ids_lock:
        bid = get_id(backendID)
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


def backend_info_value(bid: BackendID, infoType: int) -> bytes:
    """The raw bytes of one info value (strings NUL-terminated); raises Fail for unknown keys."""
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
        raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, f"unknown info type {infoType}")
    return fn()


@boundary
def onnxGetBackendInfo(backendID: Any, infoType: int, infoValue: Any, infoValueSize: Optional[Ref]) -> int:
    """Write one info value into the writable buffer `infoValue`; FALLBACK + size when it is None or short."""
    bid = get_id(backendID)
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


def target_of(bid: BackendID) -> Optional[Any]:
    """The Target of a backend ID's device (what placement would judge against), queried once;
    None when the device cannot be queried (the probe then judges a generic device)."""
    target = getattr(bid, "target", None)
    if target is None:
        try:
            from clglow.target import query

            target = bid.target = query(bid.device)
        except Exception as e:  # noqa: BLE001 - a probe never fails for want of device details
            log.debug("cannot query the target of %r: %s", bid.device, e)
    return target


@boundary
def onnxGetBackendCompatibility(backendID: Any, onnxModelSize: int, onnxModel: Any) -> int:
    """Judge a serialized ModelProto node by node without importing it (see ``onnxifi.compat``)."""
    from .compat import judge_bytes

    bid = get_id(backendID)
    if onnxModel is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    if not onnxModelSize:
        return C.ONNXIFI_STATUS_INVALID_SIZE
    data = bytes(memoryview(onnxModel).cast("B")[: int(onnxModelSize)])
    verdict = judge_bytes(data, target_of(bid))
    if verdict.status != C.ONNXIFI_STATUS_SUCCESS:
        log.info("compatibility %s: %s", C.status_name(verdict.status), "; ".join(verdict.reasons))
    return verdict.status


# --- backends ------------------------------------------------------------------------------------
def parse_properties(props: Optional[Sequence[int]], allowed: dict[int, Callable[[int], bool]],
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
            raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, f"unknown {what} property {key}")
        if i + 1 >= len(seq):
            raise Fail(C.ONNXIFI_STATUS_INVALID_PROPERTY, f"{what} property {key} has no value")
        value = int(seq[i + 1])
        if not allowed[key](value):
            raise Fail(C.ONNXIFI_STATUS_INVALID_PROPERTY, f"bad value {value} for {what} property {key}")
        out[key] = value
        i += 2
    return out


@boundary
def onnxInitBackend(backendID: Any, auxPropertiesList: Optional[Sequence[int]], backend: Optional[Ref]) -> int:
    """Create a backend on the ID's device; OPENCL_CONTEXT shares the caller's cl_context."""
    import pyopencl as cl

    from clglow.runtime.device import Device

    set_out(backend, None)
    bid = get_id(backendID)
    if backend is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    props = parse_properties(auxPropertiesList, {
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
            raise Fail(C.ONNXIFI_STATUS_INVALID_PROPERTY, "the OpenCL context does not hold the backend's device")
    else:
        ctx = cl.Context([bid.device])
    device = Device.from_context(ctx, bid.device)
    b = Backend(bid, device, log_level, optimization)
    b.handle = REGISTRY.add(KIND_BACKEND, b)
    backend.value = b.handle
    log.info("backend %#x on %s (optimization %d)", b.handle, bid.device.name.strip(), optimization)
    return C.ONNXIFI_STATUS_SUCCESS


def get_backend(handle: Any) -> Backend:
    b = REGISTRY.get(KIND_BACKEND, handle)
    if b is None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_BACKEND, f"not a live backend: {handle!r}")
    return b


@boundary
def onnxReleaseBackend(backend: Any) -> int:
    """Release a backend; graphs and events the caller left behind are released with it."""
    b = REGISTRY.remove(KIND_BACKEND, backend)
    if b is None:
        return C.ONNXIFI_STATUS_INVALID_BACKEND
    for gh in list(b.graphs):
        log.warning("onnxReleaseBackend: releasing graph %#x the caller left behind", gh)
        release_graph(gh)
    for eh in list(b.events):
        REGISTRY.remove(KIND_EVENT, eh)
    b.events.clear()
    return C.ONNXIFI_STATUS_SUCCESS


def backend_context(backend: Any) -> Any:
    """The ``pyopencl.Context`` of a backend handle (for allocating OPENCL_BUFFER tensors), or None."""
    b = REGISTRY.get(KIND_BACKEND, backend)
    return None if b is None else b.context
