"""Python stand-ins for the C structures and pointers of the ONNXIFI ABI.

The Python ONNXIFI (``onnxifi.api``) keeps the C signatures: an out-parameter ``T*``
is a `Ref` (``None`` plays NULL), an array is a Python sequence (``None`` plays NULL),
``onnxTensorDescriptorV1`` is a `TensorDescriptor` and ``onnxMemoryFenceV1`` a
`MemoryFence`. Handles (backend IDs, backends, graphs, events) are opaque ints.

Example::

    n = Ref(0)
    onnxGetBackendIDs(None, n)          # ONNXIFI_STATUS_FALLBACK, n.value == device count
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Optional, Sequence, TypeVar

from .constants import (
    ONNXIFI_SYNCHRONIZATION_EVENT,
    ONNXIFI_TAG_MEMORY_FENCE_V1,
    ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1,
)

T = TypeVar("T")


class Ref(Generic[T]):
    """A C out-parameter (``T*``): the callee stores its result in ``value``."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Ref({self.value!r})"


@dataclass
class TensorDescriptor:
    """``onnxTensorDescriptorV1``.

    ``buffer`` is, for ``ONNXIFI_MEMORY_TYPE_CPU``, a C-contiguous numpy array, any object
    with the buffer protocol, or an int address; for ``ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER``
    a ``pyopencl.Buffer`` or an int ``cl_mem`` handle. ``dimensions`` defaults to
    ``len(shape)``.
    """

    name: Optional[str]
    dataType: int
    memoryType: int
    shape: Optional[Sequence[int]]
    buffer: Any
    tag: int = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1
    dimensions: Optional[int] = None


@dataclass
class MemoryFence:
    """``onnxMemoryFenceV1``: a synchronization primitive (an event handle for type EVENT)."""

    type: int = ONNXIFI_SYNCHRONIZATION_EVENT
    event: Optional[int] = None
    tag: int = ONNXIFI_TAG_MEMORY_FENCE_V1


@dataclass
class TraceEvent:
    """``onnxTraceEvent`` (Glow/foxi extension): one timeline entry, times in microseconds."""

    eventName: str
    eventType: str  # 'B', 'E', 'I' or 'X'
    timestamp: int
    tid: int = 0
    duration: int = 0


@dataclass
class TraceEventList:
    """``onnxTraceEventList``: filled by the backend when the run it was given to completes."""

    traceEvents: list = field(default_factory=list)

    @property
    def numEvents(self) -> int:
        return len(self.traceEvents)

    def fill(self, events: list) -> None:
        """Store the events of a finished run (the C bridge overrides this to write C memory)."""
        self.traceEvents = list(events)


__all__ = ["Ref", "TensorDescriptor", "MemoryFence", "TraceEvent", "TraceEventList"]
