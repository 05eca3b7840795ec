"""One-row products with constant weights (a decode step's projections and vocabulary head)
as kernels_cl/gemv.cl launches.

Why a path of its own: with M = 1 each weight is used once per run, so the product is bound by
how fast the weights stream from memory. gemm.cl's register tiles compute MR rows of which one
is real and walk each column tile with MR broadcasts per k; gemv.cl reads the weights packed
in VW-column panels (gemm_kernel.pack_b, once at plan time) front to back, one contiguous
stream per work-item. Measured on pocl (16-float vectors), A/B in one process under load:
see the commit introducing it. Taken under the CPU family (the GPU family keeps xgemm, whose
work-groups read the weights coalesced).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..target import Target
from .base import Arg, Launch, LowerCtx, f32, i32, unaligned
from .gemm_kernel import Bias, act_params, pack_b


def gemv_width(target: Target) -> int:
    """The panel width: the device's preferred float vector width (4, 8 or 16 floats)."""
    w = int(target.preferred_vector_width_float or 4)
    return 16 if w >= 16 else 8 if w >= 8 else 4


def gemv_applicable(target: Target, *, m: int, nbatch_b: int, b_const: bool) -> bool:
    """A single row (after folding A's batch into M), one constant B matrix, the CPU family."""
    return target.is_cpu_family and m == 1 and nbatch_b == 1 and b_const


def gemv_launch(ctx: LowerCtx, *, k: int, n: int, bias: Optional[Bias], res: Optional[Arg], alpha: float,
                act: tuple, ln: Optional[tuple] = None, epilogue: str = "") -> Launch:
    """y[0, :] = act(alpha * x @ W + bias + res) with W (input 1, constant [.., K, N]) packed in
    panels of gemv_width columns; `ln` (scale, bias, epsilon): x layer-normalised first;
    `epilogue`: an elementwise expression of X0 (the result) applied before the store."""
    vw = gemv_width(ctx.device)
    w = ctx.derived(1, f"gemv{vw}", lambda b: pack_b(np.asarray(b, np.float32).reshape(k, n), vw))
    act_code, act_p = act_params(act[0], act[1], act[2])
    y = ctx.out(0)
    flags = (1 if bias is not None else 0) | (2 if res is not None else 0)
    args = [unaligned(ctx.buf(0)), i32(0), w, y, i32(0),
            unaligned(bias.arg) if bias is not None else y, i32(bias.off if bias is not None else 0),
            i32(bias.sn if bias is not None else 0), f32(bias.beta if bias is not None else 0.0),
            unaligned(res) if res is not None else y, i32(0)]
    tail = [f32(alpha), i32(flags)] + [f32(p) for p in act_p]
    defines = {"VW": vw}
    if act_code:
        defines["ACT"] = act_code
    if epilogue:  # a FusedElementwise expression of X0, checked by lower/fused.check_expr
        defines["EPI_EXPR"] = epilogue
    if ln is not None:  # (scale, bias, epsilon): x's LayerNormalization first
        defines["LN_PRO"] = None
        tail += [ln[0], ln[1], f32(ln[2])]
    panels = -(-n // vw)
    return Launch("gemv", "gemv", (panels,), args + [i32(n), i32(k)] + tail, (1,), defines, ctx.label(),
                  noop_args=args + [i32(0), i32(k)] + tail)
