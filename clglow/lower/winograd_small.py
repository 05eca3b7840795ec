"""Winograd for few tiles (variants F2T / F4T): the per-point GEMM transposed.

On a small map the plain form's GEMM M[xi] = U[xi] @ V[xi] has N = tiles (ResNet's 14x14 layers:
16 tiles of F(4x4), 49 of F(2x2); 7x7: 4 or 16), narrower than a few register tiles' columns,
so lower/winograd.py declines it there. Transposed, M^T[xi] = V^T[xi] @ U^T[xi] takes the tiles
as the MR rows and the output channels (256-512) as the wide NR columns; the weights U^T are
packed once into NR-column panels, the input transform (winograd.cl wt2_in / wt4_in) writes V^T
straight into gemm.cl's packed A panels, and the GEMM stores M transposed (C_TRANS) in the layout
the plain form's output transforms (wino_out / wino4_out) read. Three launches per piece of
images, all alpha^2 points and images in one GEMM launch (its batch).
"""
from __future__ import annotations

import numpy as np

from .base import Launch, LowerCtx, f32, i32, round_up, unaligned
from .common import F16, ConvGeometry, Epilogue, grid
from .gemm_kernel import GemmConfig, Operand, act_params, gemm_launch, pack_b
from .winograd import Variant, winograd_filter

# V and M bytes of one piece per image of the batch, as the plain forms' cap (lower/winograd.py):
# ResNet-50's 14x14 layers as F(4x4) have 1.2 MB per image, its 7x7 ones as F(2x2) 0.8 MB.
_PIECE_CAP = 4 << 20


def _weights(wt: np.ndarray, v: Variant, nr: int) -> np.ndarray:
    """U^T [alpha^2, Cin, Cout] packed into NR-column panels (gemm.cl's packed B)."""
    return pack_b(winograd_filter(wt, v).swapaxes(-1, -2), nr)


def lower_winograd_t(ctx: LowerCtx, v: Variant, cfg: GemmConfig, geom: ConvGeometry, epi: Epilogue) -> list:
    """The launches of a conv as transposed Winograd variant `v` on tiles `cfg`
    (winograd.transposed_tiles): per piece of images, input transform, GEMM, output transform."""
    n_img, cin, m = geom.n_img, geom.cin, geom.m
    h, w, oh, ow, ph, pw = geom.h, geom.w, geom.oh, geom.ow, geom.ph, geom.pw
    th, tw = v.tiles(oh, ow)
    nt, nx, mr = th * tw, v.alpha ** 2, cfg.mr
    ntp = round_up(nt, mr)
    label = ctx.label()
    mp = max(round_up(m, cfg.nr), cfg.nr)
    b = Operand(ctx.derived(1, f"winoUT{v.m}x{cfg.nr}", lambda wt: _weights(wt, v, cfg.nr)),
                packed=True, s2=mp * cin)
    per_v, per_m = nx * ntp * cin, nx * m * nt  # floats per image
    ni = max(1, min(n_img, _PIECE_CAP * n_img // (4 * (per_v + per_m))))
    vs = ctx.scratch(4 * per_v * ni)
    ms = ctx.scratch(4 * (per_m * ni + 8))  # + slack: the output transform's last 8-tile loads
    act_code, act_p = act_params(epi.act, epi.alpha, epi.beta)
    defines = {"ACT": act_code} if act_code else {}
    in_defs = {"XH": 1} if ctx.inputs[0].dtype == F16 else {}
    if ctx.outputs[0].dtype == F16:
        defines["YH"] = 1
    x_s1, y_s1 = cin * h * w, m * oh * ow
    flags = (1 if epi.has_bias else 0) | (2 if epi.has_res else 0)
    bias_arg = ctx.buf(2) if epi.has_bias else ctx.out(0)  # absent: the flags say so, never read
    z_arg = ctx.buf(3) if epi.has_res else ctx.out(0)
    k_in, k_out = v.kernels
    launches: list = []
    for i0 in range(0, n_img, ni):
        k = min(ni, n_img - i0)
        head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1)]
        tail = [i32(h), i32(w), i32(ph), i32(pw), i32(tw), i32(th), i32(mr), vs, i32(per_v), i32(ntp * cin)]
        gsize, ls = grid(ctx.device, (k * cin,), (1,))
        launches.append(Launch("winograd", k_in, gsize, head + [i32(cin)] + tail,
                               ls, in_defs, label, noop_args=head + [i32(0)] + tail))  # Cin = 0: no-op
        launches.append(gemm_launch(cfg, m=nt, n=m, k=cin, batch=k * nx, d2=nx,
                                    a=Operand(vs, packed=True, s1=per_v, s2=ntp * cin), b=b,
                                    c=Operand(ms, ld=nt, s1=per_m, s2=m * nt), c_trans=True, label=label))
        head = [ms, i32(per_m)]
        tail = [i32(tw), i32(0), i32(th), i32(oh), i32(ow), unaligned(ctx.out(0)), i32(i0 * y_s1), i32(y_s1),
                bias_arg, unaligned(z_arg), i32(flags)] + [f32(p) for p in act_p]
        gsize, ls = grid(ctx.device, (th, k * m), (1, 1))
        launches.append(Launch("winograd", k_out, gsize, head + [i32(m)] + tail,
                               ls, defines, label, noop_args=head + [i32(0)] + tail))  # Cout = 0
    return launches
