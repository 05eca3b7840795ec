"""One exception hierarchy for clglow.

Every error names the node, tensor or device involved and maps to exactly one
ONNXIFI status code (``onnxifi_status``), so the ONNXIFI facade can turn any
exception into a status without guessing.
"""
from __future__ import annotations

from typing import Iterable, Sequence

# Numeric ONNXIFI status values (mirrored from onnxifi.h; onnxifi/constants.py
# holds the full set and its test checks both against the header).
_ONNXIFI_STATUS_INTERNAL_ERROR = 0x0406
_ONNXIFI_STATUS_INVALID_PROTOBUF = 0x0104
_ONNXIFI_STATUS_INVALID_MODEL = 0x0105
_ONNXIFI_STATUS_INVALID_SHAPE = 0x010B
_ONNXIFI_STATUS_INVALID_DATATYPE = 0x010C
_ONNXIFI_STATUS_INVALID_NAME = 0x010A
_ONNXIFI_STATUS_UNSUPPORTED_OPERATOR = 0x0203
_ONNXIFI_STATUS_NO_DEVICE_MEMORY = 0x0402
_ONNXIFI_STATUS_NO_DEVICE_RESOURCES = 0x0404
_ONNXIFI_STATUS_BACKEND_UNAVAILABLE = 0x0405
_ONNXIFI_STATUS_INVALID_POINTER = 0x0103
ONNXIFI_STATUS_UNIDENTIFIED_NAME = 0x0301
ONNXIFI_STATUS_MISMATCHING_SHAPE = 0x0302
ONNXIFI_STATUS_MISMATCHING_DATATYPE = 0x0303


class ClglowError(Exception):
    """Base class of every error clglow raises on purpose."""

    onnxifi_status: int = _ONNXIFI_STATUS_INTERNAL_ERROR


class InvalidModel(ClglowError):
    """The model cannot be parsed, fails validation, or is structurally wrong."""

    onnxifi_status = _ONNXIFI_STATUS_INVALID_MODEL

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

    onnxifi_status = _ONNXIFI_STATUS_INVALID_PROTOBUF


class UnsupportedNode:
    """One node clglow cannot run, with the reason."""

    def __init__(self, name: str, op_type: str, domain: str, opset: int, reason: str):
        self.name, self.op_type, self.domain, self.opset, self.reason = name, op_type, domain, opset, reason

    def __str__(self) -> str:
        dom = self.domain or "ai.onnx"
        return f"{self.op_type} ({dom}, opset {self.opset}) at node {self.name!r}: {self.reason}"


class UnsupportedOperator(ClglowError):
    """One or more nodes have no implementation; lists all of them at once."""

    onnxifi_status = _ONNXIFI_STATUS_UNSUPPORTED_OPERATOR

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

    onnxifi_status = _ONNXIFI_STATUS_INVALID_SHAPE

    def __init__(self, message: str, tensor: str | None = None, status: int | None = None):
        super().__init__(f"[tensor {tensor!r}] {message}" if tensor else message)
        self.tensor = tensor
        if status is not None:
            self.onnxifi_status = status


class CompileError(ClglowError):
    """An OpenCL program failed to build; carries the build log, options and device."""

    onnxifi_status = _ONNXIFI_STATUS_INTERNAL_ERROR

    def __init__(self, program: str, device: str, options: Iterable[str], log: str):
        self.program, self.device, self.options, self.log = program, device, list(options), log
        super().__init__(
            f"OpenCL build of {program!r} failed on {device!r} with options "
            f"{' '.join(self.options)!r}:\n{log.strip()}"
        )


class DeviceError(ClglowError):
    """An OpenCL call failed; carries the OpenCL status name."""

    onnxifi_status = _ONNXIFI_STATUS_INTERNAL_ERROR

    def __init__(self, message: str, status_name: str | None = None, device: str | None = None):
        parts = [message]
        if status_name:
            parts.append(f"(OpenCL status {status_name})")
        if device:
            parts.append(f"on device {device!r}")
        super().__init__(" ".join(parts))
        self.status_name, self.device = status_name, device


class OutOfDeviceMemory(DeviceError):
    """A device allocation failed or would exceed the device's limits."""

    onnxifi_status = _ONNXIFI_STATUS_NO_DEVICE_MEMORY


class NoDevice(ClglowError):
    """No OpenCL platform/device is available, or the selector matches none."""

    onnxifi_status = _ONNXIFI_STATUS_BACKEND_UNAVAILABLE


__all__ = [
    "ClglowError", "InvalidModel", "InvalidProtobuf", "UnsupportedNode", "UnsupportedOperator",
    "InvalidArgument", "CompileError", "DeviceError", "OutOfDeviceMemory", "NoDevice",
]
