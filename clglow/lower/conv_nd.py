"""3-D convolutions (Conv / clglow FusedConv on X [N, C, D, H, W]) on OpenCL, as GEMMs on gemm.cl.

Why a module of its own: the 2-D paths of lower/conv.py are built on ConvGeometry's two spatial
dims (phase images, im2col tables, Winograd); a 3-D conv has its own geometry (NdGeometry) and
two rows of conv.py's CONV_PATHS, tried first (the 2-D rows decline it):
  implicit nd  CPU family, one group, stride 1 along H and W (any depth stride, pads,
               dilations): pad_nd (kernels_cl/im2col_nd.cl) copies X once into zero-padded
               volumes, then one implicit gemm.cl launch per piece of images over (image, output
               depth) batches (flag 4, as the 2-D implicit path): no K x N matrix written.
  im2col nd    everything else, any family: im2col_nd writes the GEMM's B panels (the layout
               im2col.cl writes for 2-D, gemm.cl B_PACKED=1) piece by piece into scratch
               (conv_gemm.pieces, at most SCRATCH_CAP bytes each), each piece followed by one
               gemm.cl launch.
The weights are A, packed once per plan into MR-row panels (ctx.derived) when constant, read in
place otherwise; bias, residual and activation run in the GEMM's epilogue as on the 2-D paths.
Measured on pocl (16-float vectors), an r3d-style net (stem 3x7x7/1x2x2, two 3x3x3 64-channel convs with
a residual, 8x56x56 clip): host fallback 303 ms, im2col nd 25.8 ms, with implicit nd 13.8 ms
(onnxruntime 17.2 ms, allow_spinning=0).

This module imports base.py, common.py, conv_gemm.py and gemm_kernel.py only (conv.py imports
it, never the reverse).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import numpy as np

from .base import Launch, LowerCtx, i32, round_up, unaligned
from .common import ConvShape, Epilogue, grid, resolve_conv
from .conv_gemm import IMPLICIT_WASTE, SCRATCH_CAP, pieces
from .gemm_kernel import Bias, GemmConfig, Implicit, Operand, fit_rows, gemm_config, gemm_launch, pack_a

# Spatial ranks this module lowers (im2col_nd.cl walks three output coordinates).
ND_RANKS = (3,)


class NdGeometry(ConvShape):
    """One N-D convolution's shapes (common.ConvShape: spatial input `in_sp`, output `out_sp`,
    kernel `k_sp`, strides, begin and end pads, dilations; `n_img` images of `cin` channels into
    `cout` in `groups` groups), with what the GEMM sees: M = cout / groups, K = cin / groups
    * prod(k_sp), N = prod(out_sp) per image and group."""

    @property
    def pads(self) -> tuple:
        """Begin pads, one per spatial dim."""
        return self.begins

    @property
    def pads_end(self) -> tuple:
        """End pads, one per spatial dim."""
        return self.ends

    @property
    def cin_g(self) -> int:
        """Input channels per group."""
        return self.cin // self.groups

    @property
    def m(self) -> int:
        """Output channels per group (the GEMM's M)."""
        return self.cout // self.groups

    @property
    def kk(self) -> int:
        """The GEMM's K: input channels per group times taps."""
        return self.cin_g * int(np.prod(self.k_sp))

    @property
    def npix(self) -> int:
        """Output pixels per image (the GEMM's N)."""
        return int(np.prod(self.out_sp))

    @property
    def in_vol(self) -> int:
        """Input pixels per channel."""
        return int(np.prod(self.in_sp))


def nd_geometry(ctx: LowerCtx) -> NdGeometry:
    """The node's NdGeometry at its concrete shapes, after auto_pad; InvalidModel (naming the
    node) when X, W, the attributes and the output shape disagree."""
    c = resolve_conv(ctx, ND_RANKS, f"the N-D path takes {ND_RANKS}-D convs")
    return NdGeometry(**vars(c))


def nd_applicable(case: Any) -> Optional[str]:
    """CONV_PATHS' gate for this path: None for a conv with an N-D geometry, else why not."""
    return None if isinstance(case.geom, NdGeometry) else "not a 3-D conv"


def _padded_dims(g: NdGeometry) -> tuple:
    """(Dp, Hp, WP): the zero-padded input volume of the implicit path, depth and rows padded on
    both ends, the row pitch W + max(left, right pad) (pad_nd: left padding shared with the
    previous row's right padding)."""
    return (g.in_sp[0] + g.pads[0] + g.pads_end[0], g.in_sp[1] + g.pads[1] + g.pads_end[1],
            g.in_sp[2] + max(g.pads[2], g.pads_end[2]))


def _implicit_tiles(case: Any) -> Optional[GemmConfig]:
    """The tiles of the implicit path when it runs the case, else None: under the CPU family
    (GPUs keep im2col until measured there, as for 2-D: conv_gemm.implicit_ok), one group,
    stride 1 along H and W (the padded-linear pixels of a depth slice are then runs of the
    padded volume), at least one column tile, and at most IMPLICIT_WASTE more columns than
    im2col's (the Wp - OW padding columns of each output row)."""
    g = case.geom
    if not isinstance(g, NdGeometry) or not case.target.is_cpu_family or g.groups != 1 or g.strides[1:] != (1, 1):
        return None
    oh, ow = g.out_sp[1:]
    wp = _padded_dims(g)[2]
    cfg = fit_rows(case.target, gemm_config(case.target), g.m, oh * wp)
    if oh * wp < cfg.nr or round_up(oh * wp, cfg.nr) > (1 + IMPLICIT_WASTE) * round_up(oh * ow, cfg.nr):
        return None
    return cfg


def nd_implicit_applicable(case: Any) -> Optional[str]:
    """CONV_PATHS' gate for the implicit 3-D path: None when _implicit_tiles takes the case."""
    return None if _implicit_tiles(case) is not None else "not a 3-D stride-1 (H, W) single-group conv on the CPU family"


def lower_conv_nd_implicit(ctx: LowerCtx, case: Any) -> list:
    """Implicit 3-D GEMM: X copied once into zero-padded volumes (pad_nd, about 1.1 x X where
    im2col writes KD*KH*KW x X), then per piece of images one gemm.cl launch over (image, output
    depth) batches: row k = (ci, kd, kh, kw) of B starts at koff[k] in the padded volume, the
    output depth od at od*SD*Hp*Wp, pixel n = oh*Wp + ow padded-linear, only ow < OW stored
    (gemm.cl implicit flag 4, as conv.py's 2-D implicit path)."""
    g: NdGeometry = case.geom
    e: Epilogue = case.epi
    label = ctx.label()
    cfg = _implicit_tiles(case)
    # z2 is the output depth here (one group): the weights and the bias are the same for every z2
    a = replace(_weights(ctx, g, cfg.mr), s2=0)
    bias = Bias(ctx.buf(2), sm=1, sn=0) if e.has_bias else None
    dp, hp, wp = _padded_dims(g)
    od, oh, ow = g.out_sp
    (d, h, w), (pd, ph, pw), (dd, dh, dw) = g.in_sp, g.pads, g.dil
    kd_, kh_, kw_ = g.k_sp
    vol = g.cin * dp * hp * wp
    kd, kh, kw = np.meshgrid(np.arange(kd_), np.arange(kh_), np.arange(kw_), indexing="ij")
    tap = ((kd * dd) * hp + kh * dh) * wp + kw * dw - pw
    koff = ctx.const_buffer((np.arange(g.cin)[:, None] * (dp * hp * wp) + tap.ravel()[None]).astype(np.int32).ravel())
    ni = max(1, min(g.n_img, SCRATCH_CAP // (4 * vol)))
    scratch = ctx.scratch(4 * (pw + ni * vol + wp + cfg.nr))  # slack: the last tile reads past the last volume
    npix = g.npix
    c_s1, c_s2 = g.cout * npix, oh * ow
    launches: list = []
    for i0 in range(0, g.n_img, ni):
        nb = min(ni, g.n_img - i0)
        head = [unaligned(ctx.buf(0)), i32(i0 * g.cin * g.in_vol), scratch, i32(pw)]
        dims = [i32(v) for v in (d, h, w, dp, hp, wp, pd, ph)]
        gsize, ls = grid(ctx.device, (hp, g.cin * dp, nb), (8, 1, 1))
        launches.append(Launch("im2col_nd", "pad_nd", gsize, head + [i32(g.cin)] + dims, ls, {}, label,
                               noop_args=head + [i32(0)] + dims))  # C = 0: returns at once
        off = i0 * c_s1
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2) if e.has_res else None
        b = Operand(scratch, off=pw, s1=vol, s2=g.strides[0] * hp * wp)
        launches.append(gemm_launch(cfg, m=g.m, n=oh * wp, k=g.kk, batch=nb * od, d2=od, a=a, b=b,
                                    c=Operand(ctx.out(0), off=off, ld=npix, s1=c_s1, s2=c_s2), bias=bias,
                                    res=res, act=e.act, act_alpha=e.alpha, act_beta=e.beta,
                                    implicit=Implicit(koff, wp, ow), label=label))
    return launches


def _weights(ctx: LowerCtx, g: NdGeometry, mr: int) -> Operand:
    """The weights as the GEMM's A: MR-row panels packed once per plan (constant), else in place."""
    groups, m, kk = g.groups, g.m, g.kk
    if ctx.const(1) is not None:
        return Operand(ctx.derived(1, f"convNdA{mr}g{groups}",
                                   lambda wt: pack_a(np.asarray(wt, np.float32).reshape(groups, m, kk), mr)),
                       packed=True, s2=max(round_up(m, mr), mr) * kk)
    return Operand(ctx.buf(1), ld=kk, ld2=1, s2=m * kk)


def lower_conv_nd(ctx: LowerCtx, case: Any) -> list:
    """im2col_nd panels of NR pixels into scratch, piece by piece, each followed by its GEMM
    (bias, residual and activation in the epilogue). `case` is conv.py's ConvCase (its target
    and epi read here, its geom an NdGeometry)."""
    g: NdGeometry = case.geom
    e: Epilogue = case.epi
    label = ctx.label()
    cfg = fit_rows(case.target, gemm_config(case.target), g.m, g.npix)
    nr = cfg.nr
    a = _weights(ctx, g, cfg.mr)
    bias = Bias(ctx.buf(2), sm=1, sn=0, s2=g.m) if e.has_bias else None
    c_s1, c_s2 = g.cout * g.npix, g.m * g.npix
    x_s1, x_s2 = g.cin * g.in_vol, g.cin_g * g.in_vol
    np_ = max(round_up(g.npix, nr), nr)
    parts, nbytes = pieces(g.n_img, np_ // nr, 4 * nr * g.kk * g.groups)
    scratch = ctx.scratch(nbytes)
    geo = ctx.const_buffer(np.array(g.in_sp + g.out_sp + g.k_sp + g.strides + g.pads + g.dil, np.int32))
    launches: list = []
    for i0, ni, q0, nq in parts:
        n0, nn = q0 * nr, min(nq * nr, g.npix - q0 * nr)
        pstride = nq * nr * g.kk  # packed elements per (image, group) in the scratch
        head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1), i32(x_s2), i32(g.groups), scratch,
                i32(pstride), geo, i32(g.npix)]
        ow = g.out_sp[-1]
        rows = -(-min(g.npix, (q0 + nq) * nr) // ow) - (q0 * nr) // ow  # output rows the piece touches
        gsize, ls = grid(ctx.device, (rows, g.kk, ni * g.groups), (8, 16, 1))
        launches.append(Launch("im2col_nd", "im2col_nd", gsize, head + [i32(g.kk), i32(q0), i32(nq)], ls, {"NR": nr},
                               label, noop_args=head + [i32(0), i32(q0), i32(nq)]))  # K = 0: returns at once
        off = i0 * c_s1 + n0
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2) if e.has_res else None
        b = Operand(scratch, packed=True, s1=g.groups * pstride, s2=pstride)
        launches.append(gemm_launch(cfg, m=g.m, n=nn, k=g.kk, batch=ni * g.groups, d2=g.groups, a=a, b=b,
                                    c=Operand(ctx.out(0), off=off, ld=g.npix, s1=c_s1, s2=c_s2), bias=bias,
                                    res=res, act=e.act, act_alpha=e.alpha, act_beta=e.beta, label=label))
    return launches


__all__ = ["ND_RANKS", "NdGeometry", "nd_geometry", "nd_applicable", "lower_conv_nd", "nd_implicit_applicable",
           "lower_conv_nd_implicit"]
