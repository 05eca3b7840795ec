"""One exception hierarchy for clglow, and the ONNXIFI status table.

Every error names the node, tensor or device involved and maps to exactly one
ONNXIFI status code (``onnxifi_status``), so the ONNXIFI facade can turn any
exception into a status without guessing. The status numbers and the mapping
(`EXCEPTION_STATUS`, `OPENCL_STATUS`, `onnxifi_status_of`) are written here once.
"""
from __future__ import annotations

import sys
from typing import Iterable, Optional, Sequence

# --- The ONNXIFI status table ----------------------------------------------------------------------
# The one place clglow writes ONNXIFI status numbers and decides which error gets which. Every facade
# reads it: the exceptions' ``onnxifi_status``, `onnxifi_status_of` (the Python ONNXIFI API and the C
# library through it), onnxifi/constants.py. tests/onnxifi/test_constants.py checks the numbers
# against onnx/onnxifi.h and tests/onnxifi/test_status_table.py that the facades agree.

# onnxStatus values, named and numbered as in onnx/onnxifi.h (ONNXIFI 1.0).
ONNXIFI_STATUS_SUCCESS = 0x0000
ONNXIFI_STATUS_FALLBACK = 0x0001
ONNXIFI_STATUS_INVALID_ID = 0x0101
ONNXIFI_STATUS_INVALID_SIZE = 0x0102
ONNXIFI_STATUS_INVALID_POINTER = 0x0103
ONNXIFI_STATUS_INVALID_PROTOBUF = 0x0104
ONNXIFI_STATUS_INVALID_MODEL = 0x0105
ONNXIFI_STATUS_INVALID_BACKEND = 0x0106
ONNXIFI_STATUS_INVALID_GRAPH = 0x0107
ONNXIFI_STATUS_INVALID_EVENT = 0x0108
ONNXIFI_STATUS_INVALID_STATE = 0x0109
ONNXIFI_STATUS_INVALID_NAME = 0x010A
ONNXIFI_STATUS_INVALID_SHAPE = 0x010B
ONNXIFI_STATUS_INVALID_DATATYPE = 0x010C
ONNXIFI_STATUS_INVALID_MEMORY_TYPE = 0x010D
ONNXIFI_STATUS_INVALID_MEMORY_LOCATION = 0x010E
ONNXIFI_STATUS_INVALID_FENCE_TYPE = 0x010F
ONNXIFI_STATUS_INVALID_PROPERTY = 0x0110
ONNXIFI_STATUS_UNSUPPORTED_TAG = 0x0201
ONNXIFI_STATUS_UNSUPPORTED_VERSION = 0x0202
ONNXIFI_STATUS_UNSUPPORTED_OPERATOR = 0x0203
ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE = 0x0204
ONNXIFI_STATUS_UNSUPPORTED_SHAPE = 0x0205
ONNXIFI_STATUS_UNSUPPORTED_DATATYPE = 0x0206
ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE = 0x0207
ONNXIFI_STATUS_UNSUPPORTED_FENCE_TYPE = 0x0208
ONNXIFI_STATUS_UNSUPPORTED_PROPERTY = 0x0209
ONNXIFI_STATUS_UNIDENTIFIED_NAME = 0x0301
ONNXIFI_STATUS_MISMATCHING_SHAPE = 0x0302
ONNXIFI_STATUS_MISMATCHING_DATATYPE = 0x0303
ONNXIFI_STATUS_NO_SYSTEM_MEMORY = 0x0401
ONNXIFI_STATUS_NO_DEVICE_MEMORY = 0x0402
ONNXIFI_STATUS_NO_SYSTEM_RESOURCES = 0x0403
ONNXIFI_STATUS_NO_DEVICE_RESOURCES = 0x0404
ONNXIFI_STATUS_BACKEND_UNAVAILABLE = 0x0405
ONNXIFI_STATUS_INTERNAL_ERROR = 0x0406

#: Value -> header name of every status above.
ONNXIFI_STATUS_NAMES: dict[int, str] = {
    v: k for k, v in dict(globals()).items() if k.startswith("ONNXIFI_STATUS_") and isinstance(v, int)
}

#: Exception class name -> status, looked up along the exception's MRO. clglow's classes below take
#: their ``onnxifi_status`` from here; a class without a row has its parent's. Python's own
#: exceptions have rows too, for the errors that reach a facade unwrapped.
EXCEPTION_STATUS: dict[str, int] = {
    "ClglowError": ONNXIFI_STATUS_INTERNAL_ERROR,
    "InvalidModel": ONNXIFI_STATUS_INVALID_MODEL,
    "InvalidProtobuf": ONNXIFI_STATUS_INVALID_PROTOBUF,
    "UnsupportedOperator": ONNXIFI_STATUS_UNSUPPORTED_OPERATOR,
    "InvalidArgument": ONNXIFI_STATUS_INVALID_SHAPE,  # the default: a raise may name another (status=)
    "CompileError": ONNXIFI_STATUS_INTERNAL_ERROR,
    "DeviceError": ONNXIFI_STATUS_INTERNAL_ERROR,  # unless its OpenCL status has a row in OPENCL_STATUS
    "OutOfDeviceMemory": ONNXIFI_STATUS_NO_DEVICE_MEMORY,
    "NoDevice": ONNXIFI_STATUS_BACKEND_UNAVAILABLE,
    "MemoryError": ONNXIFI_STATUS_NO_SYSTEM_MEMORY,  # Python's: the host process ran out
}

#: OpenCL status name (pyopencl.status_code, CL_ dropped) -> status, for a DeviceError's
#: ``status_name`` and for a pyopencl error that reaches a facade unwrapped. One rule for memory:
#: each of the four below says an allocation for the device failed, which OutOfDeviceMemory means
#: (clglow.runtime.executor.cl_error raises it for them), so each is NO_DEVICE_MEMORY, whichever
#: way it arrives. OUT_OF_HOST_MEMORY included: it is the OpenCL runtime's memory for the device's
#: objects, not memory the caller can free (Python's MemoryError is NO_SYSTEM_MEMORY).
OPENCL_STATUS: dict[str, int] = {
    "MEM_OBJECT_ALLOCATION_FAILURE": ONNXIFI_STATUS_NO_DEVICE_MEMORY,
    "OUT_OF_RESOURCES": ONNXIFI_STATUS_NO_DEVICE_MEMORY,
    "OUT_OF_HOST_MEMORY": ONNXIFI_STATUS_NO_DEVICE_MEMORY,
    "INVALID_BUFFER_SIZE": ONNXIFI_STATUS_NO_DEVICE_MEMORY,
    "DEVICE_NOT_FOUND": ONNXIFI_STATUS_BACKEND_UNAVAILABLE,
    "DEVICE_NOT_AVAILABLE": ONNXIFI_STATUS_BACKEND_UNAVAILABLE,
}


def _class_status(cls: type) -> Optional[int]:
    """The row of the first class of `cls`'s MRO in EXCEPTION_STATUS."""
    return next((EXCEPTION_STATUS[c.__name__] for c in cls.__mro__ if c.__name__ in EXCEPTION_STATUS), None)


def opencl_status_name(exc: BaseException) -> Optional[str]:
    """The OpenCL status name an error carries: a DeviceError's ``status_name``, a pyopencl error's code."""
    if isinstance(exc, DeviceError):
        return exc.status_name
    cl = sys.modules.get("pyopencl")  # an error of pyopencl's implies pyopencl is imported
    if cl is None or not isinstance(exc, cl.Error):
        return None
    code = getattr(exc, "code", None)
    return next((k for k, v in vars(cl.status_code).items() if k.isupper() and v == code), None)


def onnxifi_status_of(exc: BaseException) -> int:
    """The ONNXIFI status of any exception, as every facade reports it (never SUCCESS).

    A clglow error's ``onnxifi_status`` (a DeviceError's applies `OPENCL_STATUS` to its OpenCL
    status); else the row of the OpenCL status a pyopencl error carries; else, for any other
    exception with an ``onnxifi_status`` that is a status, that; else the first class of its MRO
    in `EXCEPTION_STATUS` (MemoryError); else INTERNAL_ERROR.

    >>> onnxifi_status_of(DeviceError("enqueue", "OUT_OF_RESOURCES")) == ONNXIFI_STATUS_NO_DEVICE_MEMORY
    True
    """
    st = getattr(exc, "onnxifi_status", None)
    if isinstance(st, int) and st in ONNXIFI_STATUS_NAMES and st != ONNXIFI_STATUS_SUCCESS:
        return st
    name = opencl_status_name(exc)
    if name in OPENCL_STATUS:
        return OPENCL_STATUS[name]
    found = _class_status(type(exc))
    return ONNXIFI_STATUS_INTERNAL_ERROR if found is None else found


class ClglowError(Exception):
    """Base class of every error clglow raises on purpose."""

    onnxifi_status: int = EXCEPTION_STATUS["ClglowError"]


class InvalidModel(ClglowError):
    """The model cannot be parsed, fails validation, or is structurally wrong."""

    onnxifi_status: int = EXCEPTION_STATUS["InvalidModel"]

    def __init__(self, message: str, node: str | None = None, tensor: str | None = None):
        where = []
        if node:
            where.append(f"node {node!r}")
        if tensor:
            where.append(f"tensor {tensor!r}")
        prefix = f"[{', '.join(where)}] " if where else ""
        super().__init__(prefix + message)
        self.node = node
        self.tensor = tensor


class InvalidProtobuf(InvalidModel):
    """The bytes given are not a parseable ModelProto."""

    onnxifi_status: int = EXCEPTION_STATUS["InvalidProtobuf"]


class UnsupportedNode:
    """One node clglow cannot run, with the reason."""

    def __init__(self, name: str, op_type: str, domain: str, opset: int, reason: str):
        self.name, self.op_type, self.domain, self.opset, self.reason = name, op_type, domain, opset, reason

    def __str__(self) -> str:
        dom = self.domain or "ai.onnx"
        return f"{self.op_type} ({dom}, opset {self.opset}) at node {self.name!r}: {self.reason}"


class UnsupportedOperator(ClglowError):
    """One or more nodes have no implementation; lists all of them at once."""

    onnxifi_status: int = EXCEPTION_STATUS["UnsupportedOperator"]

    def __init__(self, nodes: Sequence[UnsupportedNode] | str):
        if isinstance(nodes, str):
            self.nodes: list[UnsupportedNode] = []
            super().__init__(nodes)
            return
        self.nodes = list(nodes)
        lines = "\n  ".join(str(n) for n in self.nodes)
        super().__init__(f"{len(self.nodes)} unsupported node(s):\n  {lines}")


class InvalidArgument(ClglowError):
    """A run-time argument (input name, rank, shape, dtype, option) is wrong."""

    onnxifi_status: int = EXCEPTION_STATUS["InvalidArgument"]

    def __init__(self, message: str, tensor: str | None = None, status: int | None = None):
        super().__init__(f"[tensor {tensor!r}] {message}" if tensor else message)
        self.tensor = tensor
        if status is not None:
            self.onnxifi_status = status


class CompileError(ClglowError):
    """An OpenCL program failed to build; carries the build log, options and device."""

    onnxifi_status: int = EXCEPTION_STATUS["CompileError"]

    node: Optional[str] = None  # the node whose kernel it was, where binding knows it

    def __init__(self, program: str, device: str, options: Iterable[str], log: str):
        self.program, self.device, self.options, self.log = program, device, list(options), log
        super().__init__(
            f"OpenCL build of {program!r} failed on {device!r} with options "
            f"{' '.join(self.options)!r}:\n{log.strip()}"
        )

    def __str__(self) -> str:
        text = super().__str__()
        return f"[node {self.node!r}] {text}" if self.node else text


class DeviceError(ClglowError):
    """An OpenCL call failed; carries the OpenCL status name."""

    def __init__(self, message: str, status_name: str | None = None, device: str | None = None):
        parts = [message]
        if status_name:
            parts.append(f"(OpenCL status {status_name})")
        if device:
            parts.append(f"on device {device!r}")
        super().__init__(" ".join(parts))
        self.status_name, self.device = status_name, device

    @property
    def onnxifi_status(self) -> int:  # type: ignore[override]
        """The OpenCL status's row in OPENCL_STATUS when it has one, else the class's in EXCEPTION_STATUS."""
        found = OPENCL_STATUS.get(self.status_name or "", _class_status(type(self)))
        return ONNXIFI_STATUS_INTERNAL_ERROR if found is None else found


class OutOfDeviceMemory(DeviceError):
    """A device allocation failed or would exceed the device's limits."""


class NoDevice(ClglowError):
    """No OpenCL platform/device is available, or the selector matches none."""

    onnxifi_status: int = EXCEPTION_STATUS["NoDevice"]


__all__ = [
    "ClglowError", "InvalidModel", "InvalidProtobuf", "UnsupportedNode", "UnsupportedOperator",
    "InvalidArgument", "CompileError", "DeviceError", "OutOfDeviceMemory", "NoDevice",
]
