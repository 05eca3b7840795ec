"""The "regions" row of CONV_PATHS (lower/conv.py): a conv whose border outputs read the image
with few of their taps, computed region by region, each with only the taps its pixels use.

Why: DeepLabV3's ASPP runs a 3x3 conv of rate 12 on a 20x20 map. Every tap reads the image
somewhere (no tap can be dropped: lower/conv_taps.py), but an output row near the top reads
nothing with the top tap row: along one axis, output y uses the taps i with 0 <= y*s + i*d - p
< n, one run of taps that changes only a few times over the outputs. The output splits into
rectangles (row segments x column segments) of constant live taps; here 3 x 3 of them, whose
pixels use 4, 2 or 1 of the 9 taps: 36% of im2col's multiply-adds. Each region is one im2col
(its pixels, its taps: table_of_reads) and one GEMM with the weights of its taps (packed once),
written into a scratch image in region order; a last launch scatters the pixels into Y
(kernels_cl/conv_regions.cl). Exact: the dropped products are those with padding.

Taken under the CPU family (gemm.cl's register tiles), constant weights, one group, no fused
residual, when the regions do at most MAX_WORK of im2col's work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from .base import Launch, LowerCtx, i32, round_up, unaligned
from .common import F16, ConvGeometry, grid
from .conv_gemm import pieces, table_of_reads, x_defines
from .gemm_kernel import Bias, Operand, fit_rows, gemm_config, gemm_launch, pack_a

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase

# At most this fraction of im2col's multiply-adds (ASPP rate 12 at 20x20: 0.36). Each region
# costs two launches and tiles with ragged edges, so the cut must be large.
MAX_WORK = 0.6


@dataclass(frozen=True)
class Region:
    """Output rows [y0, y1) x columns [x0, x1), reading with taps rows [ky0, ky1] x columns [kx0, kx1]."""

    y0: int
    y1: int
    x0: int
    x1: int
    ky0: int
    ky1: int
    kx0: int
    kx1: int

    @property
    def npix(self) -> int:
        return (self.y1 - self.y0) * (self.x1 - self.x0)

    @property
    def taps(self) -> int:
        return (self.ky1 - self.ky0 + 1) * (self.kx1 - self.kx0 + 1)


def axis_segments(n: int, o: int, k: int, s: int, p: int, d: int) -> Optional[list]:
    """[(first output, end, first tap, last tap)] of one axis: runs of outputs with the same
    live taps; None when some output reads only padding (no tap live)."""
    segs: list = []
    for y in range(o):
        live = [i for i in range(k) if 0 <= y * s + i * d - p < n]
        if not live:
            return None
        taps = (live[0], live[-1])
        if segs and segs[-1][2:] == taps:
            segs[-1] = (segs[-1][0], y + 1) + taps
        else:
            segs.append((y, y + 1) + taps)
    return segs


def conv_regions(g: ConvGeometry) -> Optional[list]:
    """The regions of `g` (row segments x column segments), or None (an output of padding only)."""
    rows = axis_segments(g.h, g.oh, g.kh, g.sh, g.ph, g.dh)
    cols = axis_segments(g.w, g.ow, g.kw, g.sw, g.pw, g.dw)
    if rows is None or cols is None:
        return None
    return [Region(r[0], r[1], c[0], c[1], r[2], r[3], c[2], c[3]) for r in rows for c in cols]


def regions_applicable(c: "ConvCase") -> Optional[str]:
    g = c.geom
    if not c.target.is_cpu_family or not c.const_weights or not isinstance(g, ConvGeometry):
        return "not the CPU family, weights not constant, or not a 2-D conv"
    if g.groups != 1 or c.epi.has_res or g.kh * g.kw == 1:
        return "grouped, a fused residual, or a 1x1"
    regs = conv_regions(g)
    if regs is None or len(regs) < 2:
        return "one region (every output uses the same taps)"
    work = sum(r.npix * r.taps for r in regs) / (g.npix * g.kh * g.kw)
    return None if work <= MAX_WORK else f"the regions do {work:.0%} of im2col's work"


def _region_table(g: ConvGeometry, r: Region, np_: int, nr: int) -> np.ndarray:
    """im2col.cl's table for the region's pixels (row-major) and taps (row-major)."""
    n = np.arange(np_)
    w_r = r.x1 - r.x0
    oy, ox = r.y0 + np.minimum(n, r.npix - 1) // w_r, r.x0 + np.minimum(n, r.npix - 1) % w_r
    t = np.arange(r.taps)
    ky, kx = r.ky0 + t // (r.kx1 - r.kx0 + 1), r.kx0 + t % (r.kx1 - r.kx0 + 1)
    ih = oy[None, :] * g.sh - g.ph + ky[:, None] * g.dh
    iw = ox[None, :] * g.sw - g.pw + kx[:, None] * g.dw
    return table_of_reads(ih, iw, (n < r.npix)[None, :], g.h, g.w, nr)


def _pixel_order(g: ConvGeometry, regs: list) -> np.ndarray:
    """pix[n]: where the n-th pixel in region order lies in the output plane."""
    idx = [(np.arange(r.y0, r.y1)[:, None] * g.ow + np.arange(r.x0, r.x1)[None, :]).ravel() for r in regs]
    return np.concatenate(idx).astype(np.int32)


def lower_regions(ctx: LowerCtx, c: "ConvCase") -> list:
    """Per region: im2col of its pixels and taps, one GEMM into the region-ordered scratch; then
    the scatter into Y. X and Y as stored (half: im2col.cl X_HALF, conv_regions.cl YH; the panels
    and the scratch stay float)."""
    g, e, label = c.geom, c.epi, ctx.label()
    x_defs = x_defines(ctx.inputs[0].dtype == F16)
    y_defs = {"YH": 1} if ctx.outputs[0].dtype == F16 else {}
    regs = conv_regions(g)
    m, npix, x_s1 = g.m, g.npix, g.cin * g.hw
    base = gemm_config(c.target)
    cfgs = [fit_rows(c.target, base, m, r.npix) for r in regs]
    plan = []  # (region, cfg, panels, table pieces)
    need = 0
    for r, cfg in zip(regs, cfgs):
        np_ = max(round_up(r.npix, cfg.nr), cfg.nr)
        parts, nbytes = pieces(g.n_img, np_ // cfg.nr, 4 * cfg.nr * g.cin * r.taps)
        plan.append((r, cfg, np_, parts))
        need = max(need, nbytes)
    panels = ctx.scratch(need)
    out_s = ctx.scratch(4 * g.n_img * m * npix)
    bias = Bias(ctx.buf(2), sm=1, sn=0, s2=m) if e.has_bias else None
    launches: list = []
    first = 0  # the region's first pixel in region order
    for r, cfg, np_, parts in plan:
        kk = g.cin * r.taps
        sl = (slice(None), slice(None), slice(r.ky0, r.ky1 + 1), slice(r.kx0, r.kx1 + 1))
        a = Operand(ctx.derived(1, f"convA{cfg.mr}r{r.ky0},{r.ky1},{r.kx0},{r.kx1}",
                                lambda w, sl=sl, kk=kk, mr=cfg.mr: pack_a(np.asarray(w, np.float32)[sl].reshape(m, kk), mr)),
                    packed=True)
        tab = ctx.const_buffer(_region_table(g, r, np_, cfg.nr))
        ly = 8 if g.cin >= 8 else 1
        for i0, ni, q0, nq in parts:
            p0, pn = q0 * cfg.nr, min(nq * cfg.nr, r.npix - q0 * cfg.nr)
            pstride = nq * cfg.nr * kk
            head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1), i32(x_s1), i32(1), tab, panels, i32(pstride),
                    i32(g.hw), i32(r.taps), i32(np_)]
            gsize, ls = grid(ctx.device, (nq, g.cin, ni), (1, ly, 1))
            launches.append(Launch("im2col", "im2col", gsize, head + [i32(g.cin), i32(q0)], ls,
                                   {"NR": cfg.nr, **x_defs}, label,
                                   noop_args=head + [i32(0), i32(q0)]))
            cop = Operand(out_s, off=i0 * m * npix + first + p0, ld=npix, s1=m * npix, s2=m * npix)
            launches.append(gemm_launch(cfg, m=m, n=pn, k=kk, batch=ni, d2=1, a=a,
                                        b=Operand(panels, packed=True, s1=pstride, s2=pstride), c=cop, bias=bias,
                                        act=e.act, act_alpha=e.alpha, act_beta=e.beta, label=label))
        first += r.npix
    pix = ctx.const_buffer(_pixel_order(g, regs))
    rows = g.n_img * g.cout
    head = [out_s, pix, ctx.out(0), i32(npix)]
    gsize, ls = grid(ctx.device, (round_up(npix, 16), rows, 1), (16, 1, 1))
    launches.append(Launch("conv_regions", "scatter_pixels", gsize, head + [i32(rows)], ls, y_defs, label,
                           noop_args=head + [i32(0)]))
    return launches


__all__ = ["MAX_WORK", "Region", "axis_segments", "conv_regions", "regions_applicable", "lower_regions"]
