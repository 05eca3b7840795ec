"""Lowering: device ops -> OpenCL kernel launches. Importing this package registers every op."""
from . import base  # noqa: F401
from . import conv, elementwise, gemm, movement, norm, pool, softmax  # noqa: F401  (registration)
from . import generate, reduce  # noqa: F401  (registration)
from . import attention, castlut, conv_transpose, einsum, gridsample, indexing, loss, lppool, quant  # noqa: F401  (registration)
from . import fused, resize  # noqa: F401  (registration)
from .base import REGISTRY, DeviceInfo, Launch, LowerCtx, TensorInfo, lookup

__all__ = ["REGISTRY", "DeviceInfo", "Launch", "LowerCtx", "TensorInfo", "lookup"]
