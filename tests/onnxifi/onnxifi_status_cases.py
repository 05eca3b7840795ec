"""Errors every facade must map to the same ONNXIFI status, with the status clglow's table gives them.

Shared by test_status_table.py and the child process it runs (status_probe.py), which raises
each error inside the library loaded with ctypes.
"""
from __future__ import annotations

from typing import List, Tuple

import pyopencl as cl

from clglow import errors as E


def opencl_error(name: str) -> cl.Error:
    """A pyopencl error as a failing OpenCL call raises it."""
    code = getattr(cl.status_code, name)
    return cl.Error(cl._cl._ErrorRecord(msg=f"clEnqueueNDRangeKernel failed: {name}", code=code,
                                        routine="clEnqueueNDRangeKernel"))


#: The OpenCL statuses that mean an allocation for the device failed (one rule: NO_DEVICE_MEMORY).
MEMORY_EXHAUSTION = ("OUT_OF_RESOURCES", "MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_HOST_MEMORY",
                     "INVALID_BUFFER_SIZE")


def cases() -> List[Tuple[str, BaseException, int]]:
    """(label, error, the status expected) for every kind of error a facade can meet."""
    out: List[Tuple[str, BaseException, int]] = [
        ("InvalidModel", E.InvalidModel("no graph", node="n0"), E.ONNXIFI_STATUS_INVALID_MODEL),
        ("InvalidProtobuf", E.InvalidProtobuf("not a ModelProto"), E.ONNXIFI_STATUS_INVALID_PROTOBUF),
        ("UnsupportedOperator", E.UnsupportedOperator("Foo at node 'x'"), E.ONNXIFI_STATUS_UNSUPPORTED_OPERATOR),
        ("InvalidArgument", E.InvalidArgument("rank 3, expected 4", tensor="x"), E.ONNXIFI_STATUS_INVALID_SHAPE),
        ("InvalidArgument(status=MISMATCHING_SHAPE)",
         E.InvalidArgument("shape", tensor="x", status=E.ONNXIFI_STATUS_MISMATCHING_SHAPE),
         E.ONNXIFI_STATUS_MISMATCHING_SHAPE),
        ("CompileError", E.CompileError("gemm", "pocl", ["-DTM=4"], "error: x"), E.ONNXIFI_STATUS_INTERNAL_ERROR),
        ("DeviceError", E.DeviceError("enqueue failed", "INVALID_KERNEL_ARGS"), E.ONNXIFI_STATUS_INTERNAL_ERROR),
        ("OutOfDeviceMemory", E.OutOfDeviceMemory("tensor 'x' needs 1 TB"), E.ONNXIFI_STATUS_NO_DEVICE_MEMORY),
        ("NoDevice", E.NoDevice("no OpenCL platform"), E.ONNXIFI_STATUS_BACKEND_UNAVAILABLE),
        ("MemoryError", MemoryError("host"), E.ONNXIFI_STATUS_NO_SYSTEM_MEMORY),
        ("RuntimeError", RuntimeError("a bug"), E.ONNXIFI_STATUS_INTERNAL_ERROR),
    ]
    for name in MEMORY_EXHAUSTION:
        out.append((f"cl.Error({name})", opencl_error(name), E.ONNXIFI_STATUS_NO_DEVICE_MEMORY))
        out.append((f"DeviceError({name})", E.DeviceError("enqueue failed", name), E.ONNXIFI_STATUS_NO_DEVICE_MEMORY))
        out.append((f"OutOfDeviceMemory({name})", E.OutOfDeviceMemory("allocating", name),
                    E.ONNXIFI_STATUS_NO_DEVICE_MEMORY))
    out.append(("cl.Error(INVALID_KERNEL_ARGS)", opencl_error("INVALID_KERNEL_ARGS"), E.ONNXIFI_STATUS_INTERNAL_ERROR))
    return out
