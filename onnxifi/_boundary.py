"""The API boundary: statuses from exceptions, and the decorator no exception crosses.

Every ONNXIFI function is wrapped in `_boundary`; `_Fail` is the internal early return
with a status, `status_of` maps any exception to an ``onnxStatus`` and `_set` stores an
optional out-parameter.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional

from . import constants as C
from .types import Ref

log = logging.getLogger("onnxifi.api")  # the logger name the API has always used


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
