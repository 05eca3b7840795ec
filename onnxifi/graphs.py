"""ONNXIFI graphs: tensor descriptors, init, set IO, runs, the extensions and release."""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import constants as C
from ._boundary import Fail, boundary, log, set_out
from ._objects import Backend, Event, Graph, IOSpec, Run, release_graph
from ._registry import KIND_EVENT, KIND_GRAPH, REGISTRY, as_int
from .backends import get_backend, get_id, parse_properties
from .events import onnxWaitEventFor, register_event
from .types import MemoryFence, Ref, TensorDescriptor, TraceEventList

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


# --- tensors -------------------------------------------------------------------------------------
def _dims(d: TensorDescriptor) -> tuple:
    n = len(d.shape) if d.dimensions is None and d.shape is not None else int(d.dimensions or 0)
    if n == 0:
        return ()
    if d.shape is None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_POINTER, f"tensor {d.name!r}: shape is NULL with {n} dimensions")
    dims = tuple(int(x) for x in list(d.shape)[:n])
    if len(dims) != n:
        raise Fail(C.ONNXIFI_STATUS_INVALID_SHAPE, f"tensor {d.name!r}: {n} dimensions but {len(dims)} given")
    if any(x == 0 for x in dims):
        raise Fail(C.ONNXIFI_STATUS_INVALID_SHAPE, f"tensor {d.name!r}: a dimension is 0 in {dims}")
    return dims


def _check_descriptor(d: Any, specs: dict, seen: set, what: str) -> tuple[str, np.dtype, tuple]:
    """Tag, name, dtype and shape checks shared by weights and graph IO."""
    if not isinstance(d, TensorDescriptor) or d.tag != C.ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1:
        raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_TAG, f"{what} descriptor has tag {getattr(d, 'tag', None)!r}")
    name = d.name.decode() if isinstance(d.name, bytes) else d.name
    if not name:
        raise Fail(C.ONNXIFI_STATUS_INVALID_NAME, f"{what} descriptor without a name")
    if name not in specs or name in seen:
        raise Fail(C.ONNXIFI_STATUS_INVALID_NAME,
                    f"{what} {name!r} is {'given twice' if name in seen else 'not a ' + what + ' of the graph'}"
                    f" ({what}s: {sorted(specs)})")
    seen.add(name)
    dt = _DATATYPES.get(int(d.dataType))
    if dt is None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_DATATYPE, f"{what} {name!r}: unknown data type {d.dataType}")
    mt = int(d.memoryType)
    if mt not in _KNOWN_MEMORY_TYPES:
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_TYPE, f"{what} {name!r}: unknown memory type {mt}")
    dims = _dims(d)
    spec: IOSpec = specs[name]
    if spec.elem_type and spec.elem_type != int(d.dataType):
        raise Fail(C.ONNXIFI_STATUS_MISMATCHING_DATATYPE,
                    f"{what} {name!r}: data type {d.dataType}, the graph declares {spec.elem_type}")
    if spec.shape is not None:
        ok = len(spec.shape) == len(dims) and all(not isinstance(s, int) or s <= 0 or s == x
                                                  for s, x in zip(spec.shape, dims))
        if not ok:
            raise Fail(C.ONNXIFI_STATUS_MISMATCHING_SHAPE,
                        f"{what} {name!r}: shape {dims}, the graph declares {spec.shape}")
    return name, np.dtype(dt), dims


def _host_array(d: TensorDescriptor, dtype: np.dtype, dims: tuple, what: str) -> np.ndarray:
    """A numpy view of CPU memory (array, buffer object or int address), without copying."""
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    buf = d.buffer
    if buf is None or (isinstance(buf, int) and buf == 0):
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: NULL buffer")
    if isinstance(buf, int):
        raw = (ctypes.c_char * nbytes).from_address(buf) if nbytes else bytearray()
        return np.frombuffer(raw, dtype=dtype).reshape(dims)
    try:
        view = memoryview(buf)
    except TypeError:
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: buffer is not memory") from None
    if view.nbytes < nbytes or not view.c_contiguous:
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
                    f"{what} {d.name!r}: buffer holds {view.nbytes} contiguous bytes, {nbytes} needed")
    return np.frombuffer(view.cast("B"), dtype=dtype, count=int(np.prod(dims, dtype=np.int64))).reshape(dims)


def _cl_buffer(d: TensorDescriptor, b: Backend, dtype: np.dtype, dims: tuple, what: str) -> Any:
    """A pyopencl Buffer for a cl_mem of the backend's context, used in place."""
    import pyopencl as cl

    buf = d.buffer
    if buf is None or (isinstance(buf, int) and buf == 0):
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: NULL cl_mem")
    if isinstance(buf, int):
        buf = cl.Buffer.from_int_ptr(buf, retain=True)
    if not isinstance(buf, cl.MemoryObjectHolder):
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, f"{what} {d.name!r}: not a cl_mem")
    ctx = buf.get_info(cl.mem_info.CONTEXT)
    if ctx.int_ptr != b.context.int_ptr:
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
                    f"{what} {d.name!r}: cl_mem belongs to another context (share it with OPENCL_CONTEXT)")
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if int(buf.size) < nbytes:
        raise Fail(C.ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
                    f"{what} {d.name!r}: cl_mem holds {buf.size} bytes, {nbytes} needed")
    return buf


# --- graphs --------------------------------------------------------------------------------------
def get_graph(handle: Any) -> Graph:
    g = REGISTRY.get(KIND_GRAPH, handle)
    if g is None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_GRAPH, f"not a live graph: {handle!r}")
    return g


def _value_spec(vi: Any) -> IOSpec:
    tt = vi.type.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return IOSpec(vi.name, int(tt.elem_type), shape)


@boundary
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

    set_out(graph, None)
    b = get_backend(backend)
    if graph is None or onnxModel is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    if weightsCount and weightDescriptors is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    if not onnxModelSize:
        return C.ONNXIFI_STATUS_INVALID_SIZE
    parse_properties(auxPropertiesList, {C.ONNXIFI_GRAPH_PROPERTY_AUTO_INSTRUMENT_NODES: lambda v: v in (0, 1)},
                      "graph")
    data = bytes(memoryview(onnxModel).cast("B")[: int(onnxModelSize)])
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:
        raise Fail(C.ONNXIFI_STATUS_INVALID_PROTOBUF, f"not a ModelProto: {e}") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise Fail(C.ONNXIFI_STATUS_INVALID_MODEL, "model without ir_version or graph")
    if model.ir_version > MAX_IR_VERSION or any(
            (o.domain or "") in ("", "ai.onnx") and o.version > MAX_OPSET for o in model.opset_import):
        raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_VERSION, f"IR {model.ir_version} / opsets {model.opset_import}")
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise Fail(C.ONNXIFI_STATUS_INVALID_MODEL, str(e).splitlines()[0] if str(e) else repr(e)) from None
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
                raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, f"weight {name!r}: weights must be CPU memory")
            weights[name] = np.array(_host_array(d, dtype, dims, "weight"), copy=True)
    inputs = {n: s for n, s in declared.items() if n not in initializers and n not in weights}
    outputs = {vi.name: _value_spec(vi) for vi in model.graph.output}
    session = clglow.InferenceSession(data, device=b.device, weights=weights or None)
    g = Graph(b, session, inputs, outputs)
    g.handle = REGISTRY.add(KIND_GRAPH, g)
    with b.lock:
        b.graphs.add(g.handle)
    graph.value = g.handle
    fallback = [p for p in getattr(session, "placement", None) or [] if getattr(p, "where", "") == "host"]
    if fallback:
        log.info("graph %#x: %d node(s) on the host fallback", g.handle, len(fallback))
        return C.ONNXIFI_STATUS_FALLBACK
    return C.ONNXIFI_STATUS_SUCCESS


def _bind(g: Graph, count: int, descs: Optional[Sequence[TensorDescriptor]], specs: dict,
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
            raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, f"{what} {name!r}: memory type {mt}")
    missing = [n for n in specs if n not in bound]
    if missing:
        raise Fail(C.ONNXIFI_STATUS_UNIDENTIFIED_NAME, f"no descriptor for graph {what}(s) {missing}")
    return bound


def _engine_inputs(bound: dict) -> dict:
    """Host arrays as they are; a cl_mem as (pyopencl.Buffer, dtype, shape), as InferenceSession.enqueue takes it."""
    return dict(bound)


def _engine_outputs(bound: dict) -> dict:
    """Host arrays as they are; a cl_mem as the pyopencl.Buffer to write into."""
    return {k: (v[0] if isinstance(v, tuple) else v) for k, v in bound.items()}


@boundary
def onnxSetGraphIO(graph: Any, inputsCount: int, inputDescriptors: Optional[Sequence[TensorDescriptor]],
                   outputsCount: int, outputDescriptors: Optional[Sequence[TensorDescriptor]]) -> int:
    """Bind every graph input and output to CPU memory or a cl_mem; on failure the binding is cleared."""
    g = get_graph(graph)
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
        raise Fail(C.ONNXIFI_STATUS_INVALID_POINTER, f"{what} fence is NULL")
    if not isinstance(f, MemoryFence) or f.tag != C.ONNXIFI_TAG_MEMORY_FENCE_V1:
        raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_TAG, f"{what} fence has tag {getattr(f, 'tag', None)!r}")
    if int(f.type) == C.ONNXIFI_SYNCHRONIZATION_IMPLICIT:
        raise Fail(C.ONNXIFI_STATUS_UNSUPPORTED_FENCE_TYPE, f"{what} fence: IMPLICIT is not supported")
    if int(f.type) != C.ONNXIFI_SYNCHRONIZATION_EVENT:
        raise Fail(C.ONNXIFI_STATUS_INVALID_FENCE_TYPE, f"{what} fence type {f.type}")


def start_run(g: Graph, gate: Optional[Event], outputFence: MemoryFence,
               trace: Optional[TraceEventList]) -> int:
    if g.io is None:
        raise Fail(C.ONNXIFI_STATUS_UNIDENTIFIED_NAME, "graph inputs/outputs are not set (onnxSetGraphIO)")
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
    run = Run(g, handle, gate, done, keep)
    run.trace_sink = trace
    g.runs = [r for r in g.runs if not r.finished] + [run]
    outputFence.event = register_event(Event(g.backend, run))
    return C.ONNXIFI_STATUS_SUCCESS


@boundary
def onnxRunGraph(graph: Any, inputFence: Optional[MemoryFence], outputFence: Optional[MemoryFence]) -> int:
    """Enqueue a run gated on the input fence's event; store the output event; return at once."""
    g = get_graph(graph)
    _check_fence(inputFence, "input")
    _check_fence(outputFence, "output")
    gate = REGISTRY.get(KIND_EVENT, inputFence.event)  # type: ignore[union-attr]
    if gate is None or gate.run is not None:
        # The gate must be an onnxInitEvent event (an OpenCL user event).
        raise Fail(C.ONNXIFI_STATUS_INVALID_EVENT, f"input fence event {inputFence.event!r}")  # type: ignore
    if gate.backend is not g.backend:
        raise Fail(C.ONNXIFI_STATUS_INVALID_EVENT, "input fence event belongs to another backend")
    with g.lock:
        return start_run(g, gate, outputFence, None)  # type: ignore[arg-type]


@boundary
def onnxSetIOAndRunGraph(graph: Any, inputsCount: int, inputDescriptors: Optional[Sequence[TensorDescriptor]],
                         outputsCount: int, outputDescriptors: Optional[Sequence[TensorDescriptor]],
                         outputFence: Optional[MemoryFence], traceEvents: Optional[TraceEventList] = None) -> int:
    """Extension: onnxSetGraphIO then a run with inputs ready now; `traceEvents` is filled when it completes."""
    g = get_graph(graph)
    _check_fence(outputFence, "output")
    with g.lock:
        st = onnxSetGraphIO(graph, inputsCount, inputDescriptors, outputsCount, outputDescriptors)
        if st != C.ONNXIFI_STATUS_SUCCESS:
            return st
        if traceEvents is not None:
            traceEvents.fill([])
        return start_run(g, None, outputFence, traceEvents)  # type: ignore[arg-type]


@boundary
def onnxReleaseTraceEvents(traceEvents: Optional[TraceEventList]) -> int:
    """Extension: release the events a run stored in `traceEvents`."""
    if traceEvents is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    traceEvents.traceEvents = []
    return C.ONNXIFI_STATUS_SUCCESS


@boundary
def onnxReleaseGraph(graph: Any) -> int:
    """Wait for the graph's runs in flight, then release it."""
    h = as_int(graph)
    if h is None or REGISTRY.get(KIND_GRAPH, h) is None:
        return C.ONNXIFI_STATUS_INVALID_GRAPH
    return C.ONNXIFI_STATUS_SUCCESS if release_graph(h) else C.ONNXIFI_STATUS_INVALID_GRAPH


#: The functions onnxGetExtensionFunctionAddress hands out, by name.
EXTENSION_TABLE: dict[str, Callable[..., int]] = {}


@boundary
def onnxGetExtensionFunctionAddress(backendID: Any, name: Optional[str], function: Optional[Ref]) -> int:
    """Look up an extension function by name (``onnxWaitEventFor`` or Glow's ``onnxWaitEventForFunction``)."""
    set_out(function, None)
    get_id(backendID)
    if name is None or function is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    key = name.decode() if isinstance(name, bytes) else str(name)
    key = key[: -len("Function")] if key.endswith("Function") and key != "onnxGetExtensionFunctionAddress" else key
    fn = EXTENSION_TABLE.get(key)
    if fn is None:
        return C.ONNXIFI_STATUS_UNIDENTIFIED_NAME
    function.value = fn
    return C.ONNXIFI_STATUS_SUCCESS


EXTENSION_TABLE.update({"onnxGetExtensionFunctionAddress": onnxGetExtensionFunctionAddress,
                    "onnxSetIOAndRunGraph": onnxSetIOAndRunGraph, "onnxWaitEventFor": onnxWaitEventFor,
                    "onnxReleaseTraceEvents": onnxReleaseTraceEvents})

