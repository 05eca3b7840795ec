"""The "gemv" row of CONV_PATHS (lower/conv.py): a 1x1 conv of a 1x1 map as one matrix-vector
launch of kernels_cl/conv_gemv.cl, its epilogue fused.

Why: squeeze-and-excitation blocks (MobileNetV3, EfficientNet, MnasNet-style nets) run two such
convs per block after a global pool, and a classifier head conv follows the last pool. With one
pixel per image the GEMM's tiles compute a column tile (or, transposed, a row tile) for one
pixel and the transposed path packs X first: two launches per FC where one streams the weights.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from .base import Launch, LowerCtx, f32, i32, round_up
from .common import F16, grid
from .gemm_kernel import act_params, pack_b

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase

GV = 16  # output channels per work-item: one 16-float vector (any OpenCL device has float16)


def gemv_applicable(c: "ConvCase") -> Optional[str]:
    """None for a single-group 1x1 stride-1 unpadded conv of a 1x1 map with constant weights,
    under the CPU family (a work-item streams its own panel; a GPU would want the panels read
    across work-items: measure there first)."""
    g = c.geom
    if not c.target.is_cpu_family:
        return "not the CPU family"
    if not c.const_weights:
        return "weights not constant"
    if getattr(g, "groups", 0) != 1 or not getattr(g, "pointwise", False) or g.h * g.w != 1:
        return "not a single-group 1x1 conv of a 1x1 map"
    return None


def lower_gemv(ctx: LowerCtx, c: "ConvCase") -> list:
    """One conv_gemv launch: the weights packed once into [ceil(M/GV)][K][GV] panels."""
    g, e = c.geom, c.epi
    m, k = g.m, g.kk
    act_code, act_p = act_params(e.act, e.alpha, e.beta)
    defines = {"GV": GV, "HAS_BIAS": int(e.has_bias), "HAS_RES": int(e.has_res)}
    # half storage (the conv's HalfIO): X, and Y with its residual Z
    defines.update({k: 1 for k, i in (("XH", ctx.inputs[0]), ("YH", ctx.outputs[0])) if i.dtype == F16})
    if act_code:
        defines["ACT"] = act_code
    wp = ctx.derived(1, f"convGV{GV}", lambda w: pack_b(np.asarray(w, np.float32).reshape(m, k).T, GV))
    args: list = [ctx.buf(0), wp] + ([ctx.buf(2)] if e.has_bias else []) + ([ctx.buf(3)] if e.has_res else [])
    head = args + [ctx.out(0), i32(k)]
    tail = [f32(p) for p in act_p]
    gsize, ls = grid(ctx.device, (round_up(m, GV) // GV, g.n_img, 1), (1, 1, 1))
    return [Launch("conv_gemv", "conv_gemv", gsize, head + [i32(m)] + tail, ls, defines, ctx.label(),
                   noop_args=head + [i32(0)] + tail)]  # M = 0: returns at once


__all__ = ["GV", "gemv_applicable", "lower_gemv"]
