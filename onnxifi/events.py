"""ONNXIFI events: init, signal, state, wait (with the onnxWaitEventFor extension) and release."""
from __future__ import annotations

from typing import Any, Optional

from . import constants as C
from ._boundary import Fail, boundary, log, set_out
from ._objects import Event
from ._registry import KIND_EVENT, REGISTRY
from .backends import get_backend
from .types import Ref


def get_event(handle: Any) -> Event:
    ev = REGISTRY.get(KIND_EVENT, handle)
    if ev is None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_EVENT, f"not a live event: {handle!r}")
    return ev


def register_event(ev: Event) -> int:
    ev.handle = REGISTRY.add(KIND_EVENT, ev)
    with ev.backend.lock:
        ev.backend.events.add(ev.handle)
    return ev.handle


@boundary
def onnxInitEvent(backend: Any, event: Optional[Ref]) -> int:
    """Create a non-signalled event backed by an OpenCL user event of the backend's context."""
    set_out(event, None)
    b = get_backend(backend)
    if event is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    event.value = register_event(Event(b))
    return C.ONNXIFI_STATUS_SUCCESS


@boundary
def onnxSignalEvent(event: Any) -> int:
    """Signal an event made by onnxInitEvent (completes its OpenCL user event)."""
    import pyopencl as cl

    ev = get_event(event)
    if ev.run is not None:
        raise Fail(C.ONNXIFI_STATUS_INVALID_STATE, "an output event is signalled by its run, not the caller")
    with ev.backend.lock:
        if ev.signalled.is_set():
            return C.ONNXIFI_STATUS_INVALID_STATE
        ev.cl_event.set_status(cl.command_execution_status.COMPLETE)
        ev.signalled.set()
    return C.ONNXIFI_STATUS_SUCCESS


@boundary
def onnxGetEventState(event: Any, state: Optional[Ref]) -> int:
    """Store SIGNALLED or NONSIGNALLED without blocking."""
    set_out(state, C.ONNXIFI_EVENT_STATE_INVALID)
    ev = get_event(event)
    if state is None:
        return C.ONNXIFI_STATUS_INVALID_POINTER
    state.value = (C.ONNXIFI_EVENT_STATE_SIGNALLED if ev.is_signalled()
                   else C.ONNXIFI_EVENT_STATE_NONSIGNALLED)
    return C.ONNXIFI_STATUS_SUCCESS


@boundary
def onnxWaitEvent(event: Any) -> int:
    """Block until the event is signalled; for a failed run, return the run's status."""
    ev = get_event(event)
    ev.wait()
    if ev.run is not None and ev.run.status != C.ONNXIFI_STATUS_SUCCESS:
        raise Fail(ev.run.status, ev.run.message)
    return C.ONNXIFI_STATUS_SUCCESS


@boundary
def onnxWaitEventFor(event: Any, timeoutMs: int, eventState: Optional[Ref], eventStatus: Optional[Ref],
                     message: Any = None, messageLength: Optional[Ref] = None) -> int:
    """Extension: wait up to `timeoutMs` (0 = forever); report state, the run's status and message.

    `message` is a writable buffer of ``messageLength.value`` bytes; the message is stored
    NUL-terminated (truncated to fit) and ``messageLength.value`` becomes its full size
    including the NUL.
    """
    set_out(eventState, C.ONNXIFI_EVENT_STATE_INVALID)
    ev = get_event(event)
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


@boundary
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
