"""The API boundary: statuses from exceptions, and the decorator no exception crosses.

Every ONNXIFI function is wrapped in `boundary`; `Fail` is the internal early return
with a status, `status_of` maps any exception to an ``onnxStatus`` and `set_out` stores an
optional out-parameter.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional

from clglow.errors import onnxifi_status_of

from . import constants as C
from .types import Ref

log = logging.getLogger("onnxifi.api")  # the logger name the API has always used


class Fail(Exception):
    """Internal early return with a status."""

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message)
        self.status = status


def status_of(exc: BaseException) -> int:
    """The ONNXIFI status for an exception: clglow's one rule (`clglow.errors.onnxifi_status_of`)."""
    return onnxifi_status_of(exc)


def boundary(fn: Callable[..., int]) -> Callable[..., int]:
    """Turn every exception into a status; nothing crosses the API boundary."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return int(fn(*args, **kwargs))
        except Fail as f:
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


def set_out(ref: Optional[Ref], value: Any) -> None:
    if ref is not None:
        ref.value = value
