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

# The functions live in modules named after what they own; this module re-exports them so
# that ``onnxifi.api.<name>`` keeps working:
#   _boundary  Fail, status_of, the `boundary` decorator, set_out
#   _objects   the objects behind the handles (BackendID, Backend, Run, Event, IOSpec, Graph)
#   backends   backend IDs, backend info, compatibility, init/release backend
#   events     events and fences' events
#   graphs     tensor descriptors, graphs, set IO, runs, extensions, release graph
from ._boundary import Fail, boundary, log, set_out, status_of  # noqa: F401
from ._objects import Backend, BackendID, Event, Graph, IOSpec, Run, release_graph  # noqa: F401
from .backends import (EXTENSION_FUNCTIONS, EXTENSIONS, backend_context, backend_ids,  # noqa: F401
                       backend_info_value, enumerate_devices, get_backend, get_id, onnxGetBackendCompatibility,
                       onnxGetBackendIDs, onnxGetBackendInfo, onnxInitBackend, onnxReleaseBackend,
                       onnxReleaseBackendID, parse_properties)
from .events import (get_event, onnxGetEventState, onnxInitEvent, onnxReleaseEvent,  # noqa: F401
                     onnxSignalEvent, onnxWaitEvent, onnxWaitEventFor, register_event)
from .graphs import (EXTENSION_TABLE, get_graph, onnxGetExtensionFunctionAddress, onnxInitGraph,  # noqa: F401
                     onnxReleaseGraph, onnxReleaseTraceEvents, onnxRunGraph, onnxSetGraphIO, onnxSetIOAndRunGraph,
                     start_run)

CORE_FUNCTIONS = ("onnxGetBackendIDs", "onnxReleaseBackendID", "onnxGetBackendInfo", "onnxGetBackendCompatibility",
                  "onnxInitBackend", "onnxReleaseBackend", "onnxInitEvent", "onnxSignalEvent",
                  "onnxGetEventState", "onnxWaitEvent", "onnxReleaseEvent", "onnxInitGraph", "onnxSetGraphIO",
                  "onnxRunGraph", "onnxReleaseGraph")

__all__ = list(CORE_FUNCTIONS) + ["onnxGetExtensionFunctionAddress", "onnxSetIOAndRunGraph", "onnxWaitEventFor",
                                  "onnxReleaseTraceEvents", "backend_context", "status_of", "EXTENSIONS"]
