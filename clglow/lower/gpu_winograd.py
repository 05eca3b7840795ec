"""Winograd F(2x2, 3x3) and F(4x4, 3x3) on the GPU family's local-memory GEMM: the "gpu winograd"
row of lower/conv.py's CONV_PATHS.

Why: a stride-1 3x3 conv as F(2x2, 3x3) needs 2.25x fewer multiplies than the implicit GEMM. The
CPU family's Winograd (lower/winograd.py) gives one work-item a whole channel of an image (a
private ring of rows) and runs its products on gemm.cl's packed panels, both shaped for a CPU
driver; here the transforms (kernels_cl/gpu_winograd.cl) take one work-item per 2x2 output block
and channel (thousands of them, coalesced), and the 16 products per image, M[xi] = U[xi] @ V[xi],
are one batched xgemm.cl launch (its tile from the xgemm family's tuning entry for that GEMM
shape). The filter's transform U = G g G^T is computed once at plan time (winograd_filter).
F(4x4, 3x3) (the conv family's variant "F4" of this row; "" is F(2x2)) does the same with 6x6
patches of 4x4 output blocks: 36 products per image, 4x fewer multiplies than the direct conv, more
transform work per tile; which of the two pays is the tuner's measurement.

Taken, where it applies, after the implicit GEMM in the ranked table: with no GPU measured the
default stays the one-launch implicit GEMM, and the conv family's tuner (runtime/node_bench.py:
each path timed as a one-node model on the device) chooses "gpu winograd" where it is faster.
It applies to the GPU family with dedicated local memory, PlanOptions.winograd, single-group
undilated 3x3 stride-1 convs with constant weights, at least 16 input and output channels, and
V and M of one image within _IMAGE_CAP (pieces of whole images bound the scratch).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from .base import Launch, LowerCtx, f32, i32
from .common import ConvGeometry, grid
from .gemm_kernel import Operand, act_params, gemm_key
from .gpu_gemm import tiled_launch, tuned_xgemm, xgemm_applicable
from .winograd import F2, F4, Variant, winograd_filter

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase

VARIANTS = {"": F2, "F4": F4}  # the conv family's variant names of this row ("": the default, F(2x2))
_KERNELS = {2: ("wino2_in", "wino2_out"), 4: ("wino4_in", "wino4_out")}
_IMAGE_CAP = 64 << 20  # V and M bytes of one image: larger convs keep the implicit GEMM
_PIECE_CAP = 128 << 20  # V and M bytes of one piece of images


def _variant(c: "ConvCase") -> Optional[Variant]:
    """The case's variant of this row: F(2x2) unless the conv family's entry asked for another
    (ConvCase.variants); None when it names one this row does not have."""
    names = c.variants if c.variants else ("",)
    return next((VARIANTS[n] for n in names if n in VARIANTS), None)


def _tiles(g: ConvGeometry, v: Variant) -> tuple:
    """(tile rows, tile columns, tiles) of m x m output blocks."""
    th, tw = -(-g.oh // v.m), -(-g.ow // v.m)
    return th, tw, th * tw


def _image_bytes(g: ConvGeometry, v: Variant) -> int:
    return 4 * v.alpha ** 2 * (g.cin + g.m) * _tiles(g, v)[2]


def winograd_applicable(c: "ConvCase") -> Optional[str]:
    """None when the conv runs as F(2x2, 3x3) on xgemm.cl (see the module docstring), else why not."""
    why = xgemm_applicable(c.target)
    if why:
        return why
    g = c.geom
    if not c.options.winograd:
        return "Winograd turned off (PlanOptions.winograd, CLGLOW_WINOGRAD=0)"
    if not c.const_weights:
        return "weights not constant (the filter is transformed at plan time)"
    if not isinstance(g, ConvGeometry) or (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) != (3, 3, 1, 1, 1, 1):
        return "not an undilated 3x3 stride-1 conv"
    if g.groups != 1 or g.cin < 16 or g.m < 16:
        return "grouped, or fewer than 16 input or output channels"
    v = _variant(c)
    if v is None:
        return f"no GPU Winograd variant among {c.variants} (this row has {', '.join(map(repr, VARIANTS))})"
    return None if _image_bytes(g, v) <= _IMAGE_CAP else f"one image's transforms exceed {_IMAGE_CAP >> 20} MiB"


def lower_gpu_winograd(ctx: LowerCtx, c: "ConvCase") -> list:
    """Per piece of images: the input transform, the alpha^2 (16 or 36) batched GEMMs, the output
    transform."""
    g, e, label = c.geom, c.epi, ctx.label()
    v = _variant(c) or F2
    xi, (k_in, k_out) = v.alpha ** 2, _KERNELS[v.m]
    th, tw, nt = _tiles(g, v)
    cfg = tuned_xgemm(c.target, gemm_key(g.m, nt, g.cin, "inplace"), c.label)
    u = ctx.derived(1, f"gpuwinoU{v.m}", lambda wt: np.ascontiguousarray(winograd_filter(wt, v)))
    ni = max(1, min(g.n_img, _PIECE_CAP // _image_bytes(g, v)))
    per_v, per_m = xi * g.cin * nt, xi * g.m * nt
    vs, ms = ctx.scratch(4 * per_v * ni), ctx.scratch(4 * per_m * ni)
    act_code, act_p = act_params(e.act, e.alpha, e.beta)
    flags = (1 if e.has_bias else 0) | (2 if e.has_res else 0)
    bias = ctx.buf(2) if e.has_bias else ctx.out(0)  # absent: the flags say so, never read
    z = ctx.buf(3) if e.has_res else ctx.out(0)
    x_s, y_s = g.cin * g.hw, g.cout * g.npix
    # half storage (conv.py's HALF_PATHS): X read as half, Y written and Z read as stored (Z as Y)
    in_defs = {"XH": 1} if ctx.inputs[0].dtype == np.float16 else {}
    out_defs = {"YH": 1} if ctx.outputs[0].dtype == np.float16 else {}
    if act_code:
        out_defs["ACT"] = act_code
    launches: list = []
    for i0 in range(0, g.n_img, ni):
        k = min(ni, g.n_img - i0)
        head = [ctx.buf(0), i32(i0 * x_s), i32(x_s), vs, i32(per_v)]
        tail = [i32(g.h), i32(g.w), i32(g.ph), i32(g.pw), i32(tw)]
        gsize, ls = grid(ctx.device, (nt, g.cin, k), (64, 1, 1))
        launches.append(Launch("gpu_winograd", k_in, gsize, head + [i32(g.cin)] + tail + [i32(nt)], ls, in_defs,
                               label, noop_args=head + [i32(0)] + tail + [i32(0)]))  # C = NT = 0: no-op
        launches.append(tiled_launch(cfg, m=g.m, n=nt, k=g.cin, batch=k * xi, d2=xi,
                                     a=Operand(u, ld=g.cin, ld2=1, s2=g.m * g.cin),
                                     b=Operand(vs, ld=nt, s1=per_v, s2=g.cin * nt),
                                     c=Operand(ms, ld=nt, s1=per_m, s2=g.m * nt), label=label))
        head = [ms, i32(per_m), ctx.out(0), i32(i0 * y_s), i32(y_s), bias, z]
        tail = [i32(g.oh), i32(g.ow), i32(tw)]
        rest = [i32(flags)] + [f32(p) for p in act_p]
        gsize, ls = grid(ctx.device, (nt, g.m, k), (64, 1, 1))
        launches.append(Launch("gpu_winograd", k_out, gsize, head + [i32(g.m)] + tail + [i32(nt)] + rest, ls,
                               out_defs, label,
                               noop_args=head + [i32(0)] + tail + [i32(0)] + rest))  # Cout = NT = 0: no-op
    return launches


__all__ = ["VARIANTS", "winograd_applicable", "lower_gpu_winograd"]
