"""Lowering: device ops -> OpenCL kernel launches. Importing this package registers every op.

The seams (lower/base.py has the contract):
- Every op registers `supports(node, graph, target)` and `lower(ctx)`. `supports` judges dtypes
  and attributes on the session's Target (clglow.target: fp64 and the other capabilities;
  a generic Target where no device is known); `lower` reads `ctx.device` (the Target: family,
  limits, tuned GEMM tiles) and `ctx.options` (config.PlanOptions: e.g. winograd), never the
  environment or a device type.
- Algorithm choice is a ranked table per performance-critical op, each row with its own
  applicability test: Conv in conv.py (CONV_PATHS: depthwise, Winograd, transposed small-N,
  1x1 in place, implicit GEMM, im2col), the GEMM operands in gemm.py (a_path / b_path). The CPU
  family's rows (register-blocked tiles, Winograd, implicit and transposed GEMMs) and the GPU
  family's (local-size tiles, im2col) sit side by side; a new family is a new row or gate.
- Shared helpers live in the modules that own them and import no other lowering module:
  common.py (work sizes fitted to the Target, the dtype check, the int32 size check, auto_pad,
  ConvGeometry, storage types), index_space.py (broadcast and strided index spaces),
  conv_gemm.py (a convolution's GEMM operands), gemm_kernel.py (the gemm.cl family: tiles,
  packing, the launch builder).
"""
from . import base  # noqa: F401
from . import conv, elementwise, gemm, matmul, movement, norm, pool, softmax  # noqa: F401  (registration)
from . import control, generate, reduce, topk  # noqa: F401  (registration)
from . import attention, castlut, conv_transpose, einsum, gridsample  # noqa: F401  (registration)
from . import indexing, loss, lppool, quant  # noqa: F401  (registration)
from . import fused, resize  # noqa: F401  (registration)
from . import recurrent  # noqa: F401  (registration)
from . import channel_shuffle, squeeze_excite  # noqa: F401  (registration: clglow.ChannelShuffle, SqueezeExcite)
from . import rotate_half  # noqa: F401  (registration: clglow.RotateHalf)
from . import causal_conv, linear_attention  # noqa: F401  (registration: opset 27's recurrent-model ops)
from . import qconv, qgemm  # noqa: F401  (registration: integer matmuls and convs, lower/qgemm_kernel.py)
from . import qlinear  # noqa: F401  (registration: com.microsoft QLinear* ops)
from . import select  # noqa: F401  (registration: NonZero, Compress, NonMaxSuppression sized at run time)
from . import linalg, spectral, swiglu, tensor_scatter, windows  # noqa: F401  (registration: issue 21 part 5 ops)
from . import col2im, deform_conv, roialign, spatial  # noqa: F401  (registration: issue 21 part 3 ops)
from .base import REGISTRY, DeviceInfo, Launch, LowerCtx, TensorInfo, has_kernel, lookup

__all__ = ["REGISTRY", "DeviceInfo", "Launch", "LowerCtx", "TensorInfo", "has_kernel", "lookup"]
