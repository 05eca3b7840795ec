"""clglow: an ONNX executor on OpenCL.

    import clglow
    sess = clglow.InferenceSession("resnet50.onnx")        # CLGLOW_DEVICE selects the device
    (logits,) = sess.run(None, {sess.get_inputs()[0].name: x})
"""
from ._version import __version__

from .errors import (  # noqa: E402
    ClglowError, CompileError, DeviceError, InvalidArgument, InvalidModel, InvalidProtobuf, NoDevice,
    OutOfDeviceMemory, UnsupportedOperator,
)
from .session import InferenceSession, NodeArg, SessionOptions  # noqa: E402


def list_devices():
    """Every OpenCL device with the CLGLOW_DEVICE value that selects it."""
    from .runtime.device import list_devices as _list

    return _list()


__all__ = [
    "__version__", "InferenceSession", "SessionOptions", "NodeArg", "list_devices", "ClglowError",
    "CompileError", "DeviceError", "InvalidArgument", "InvalidModel", "InvalidProtobuf", "NoDevice",
    "OutOfDeviceMemory", "UnsupportedOperator",
]
