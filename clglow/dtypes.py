"""ONNX TensorProto <-> numpy <-> OpenCL C type mapping."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

# numpy dtype -> OpenCL C scalar type name (bool is stored as uchar).
_CL_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float16): "half",
    np.dtype(np.float64): "double",
    np.dtype(np.int8): "char",
    np.dtype(np.uint8): "uchar",
    np.dtype(np.int16): "short",
    np.dtype(np.uint16): "ushort",
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "uint",
    np.dtype(np.int64): "long",
    np.dtype(np.uint64): "ulong",
    np.dtype(np.bool_): "uchar",
}


def onnx_to_numpy(elem_type: int) -> np.dtype:
    """numpy dtype for an ONNX TensorProto element type (raises KeyError if none)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def numpy_to_onnx(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def onnx_type_string(dtype: np.dtype) -> str:
    """onnxruntime-style type string, e.g. 'tensor(float)'."""
    name = TensorProto.DataType.Name(numpy_to_onnx(dtype)).lower()
    return f"tensor({ {'float': 'float', 'double': 'double'}.get(name, name) })"


def cl_type(dtype: np.dtype) -> str:
    """OpenCL C type name used to store elements of `dtype`."""
    return _CL_TYPES[np.dtype(dtype)]


def has_cl_type(dtype: np.dtype) -> bool:
    return np.dtype(dtype) in _CL_TYPES
