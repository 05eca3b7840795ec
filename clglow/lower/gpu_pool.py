"""Global average/max pooling for the GPU family: a work-group per (n, c) plane (gpu_reduce.cl).

Why a module of its own: pool.py's global_pool gives each (n, c) plane to one work-item (the CPU
family's layout: channels are many, planes short); on a GPU a 56x56 plane is 3136 dependent
steps for one work-item. Here a plane is a contiguous run of gpu_reduce.cl's `rows` mapping: a
segment of work-items per plane, several planes per group when planes are short (7x7), combined
in local memory. pool.py selects it for the GPU family where gpu_reduce applies, through
`lower_global_pool_wg` (one call; this module imports no other lowering module but gpu_reduce).
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidModel
from .base import Launch, LowerCtx
from .common import check_int32_sizes
from .gpu_reduce import applicable, choose_ls, linear_layout, reduce_launch


def lower_global_pool_wg(ctx: LowerCtx) -> list[Launch]:
    """GlobalAveragePool / GlobalMaxPool of float32 [N, C, spatial...] (or its half storage) as one
    launch of wg_reduce (a mean or a max over each plane; NaN propagates, as numpy's max does)."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    nc = int(np.prod(x.shape[:2], dtype=np.int64))
    length = int(np.prod(x.shape[2:], dtype=np.int64))
    if length == 0:
        raise InvalidModel(f"global pooling of an empty plane ({x.shape})", node=ctx.label())
    check_int32_sizes(ctx)
    lay = linear_layout("rows", nc, length, 1)
    ls = choose_ls(ctx.device, lay, 4, ctx.label())
    is_max = ctx.node.op_type == "GlobalMaxPool"
    defines = {"T": _storage(x.dtype), "TO": _storage(out.dtype), "ACC": "float", "ACC_FLOAT": None,
               "OP_MAX" if is_max else "OP_MEAN": None}  # half: storage only (gpu_reduce.storage_defines)
    if is_max:
        defines["EMPTY"] = "(-INFINITY)"
    return [reduce_launch(ctx.device, lay, ctx.buf(0), ctx.out(0), defines, ls, ctx.const_buffer(lay.meta),
                          ctx.label())]


def _storage(dtype) -> str:
    """The element type of a float32 tensor or of its half storage."""
    return "half" if np.dtype(dtype) == np.float16 else "float"


__all__ = ["applicable", "lower_global_pool_wg"]
