"""A convolution's GEMM operands: im2col and pack panels, the implicit GEMM's phase images and
row offsets, padded outputs, the pieces that keep scratch small, and the shape tests the conv
paths (lower/conv.py CONV_PATHS) are chosen by.

Why apart from conv.py: conv.py says which path a conv takes (its table); this module builds
what those paths feed gemm.cl, on a `ConvGeometry`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Optional

import numpy as np

from ..errors import InvalidModel
from ..target import Target
from .base import Launch, LowerCtx, PaddedLayout, i32, round_up, unaligned
from .common import ConvGeometry, grid
from .gemm_kernel import GemmConfig, Operand, b_unpacked_ok, fit_rows, pack_b_launch, transposed_pfn

# Packed operands (im2col / pack panels) are made piece by piece, each at most this large: the
# scratch buffer stays small (device memory: it is planned with the activations) and a piece is
# still in the caches when its GEMM reads it. Measured on pocl (ResNet layer1 3x3 conv, 7.2 MB
# of im2col): 3-4 MB pieces as fast as one whole image, 2 MB pieces ~10% slower.
SCRATCH_CAP = 3 << 20

# An implicit GEMM computes OH x WPH padded-linear columns for OH x OW pixels: taken while that
# wastes at most this fraction more than im2col's column tiles (ResNet-50, 32-column tiles:
# 56x56 2.0%, 28x28 and the stride-2 56 -> 28 4.0%, the 7x7/2 stem 1.8%; its 14x14 layers
# take the transposed GEMM first).
IMPLICIT_WASTE = 0.10


def pieces(n_img: int, n_panels: int, panel_bytes: int) -> tuple[list, int]:
    """Split a conv's packed operand into pieces of at most SCRATCH_CAP bytes (at least one
    panel): whole images when one fits, else runs of panels of one image.
    Returns ([(first image, images, first panel, panels)], scratch bytes)."""
    per_img = panel_bytes * n_panels
    if per_img <= SCRATCH_CAP:
        ni = max(1, min(n_img, SCRATCH_CAP // per_img))
        return [(i0, min(ni, n_img - i0), 0, n_panels) for i0 in range(0, n_img, ni)], per_img * ni
    nq = max(1, SCRATCH_CAP // panel_bytes)
    return ([(i0, 1, q0, min(nq, n_panels - q0)) for i0 in range(n_img) for q0 in range(0, n_panels, nq)],
            panel_bytes * nq)


# --- im2col / pack panels -----------------------------------------------------------------------------
def panel_vector_width(nr: int) -> int:
    """The vector width im2col.cl stores panels with (its PV), for panels of `nr` columns."""
    return next(v for v in (16, 8, 4, 1) if nr % v == 0)


def im2col_table(geom: ConvGeometry, np_: int, nr: int) -> np.ndarray:
    """The index table of im2col.cl, int32, two parts:

    [KH*KW, Np]: input offset ih*W + iw read by tap r at output pixel n, -1 for padding;
    [KH*KW, Np/PV]: for each run of PV columns (PV = panel_vector_width(nr)), the offset s of its
    first element when the run reads PV consecutive inputs (no padding: one vector load),
    -(s + 2) when it reads every other input from s (a stride-2 conv: two loads, even lanes),
    else -1.
    The flags are computed here because no cheap test in the kernel is exact: with stride 1 a
    run across a padded row edge can start and end exactly PV-1 elements apart."""
    g = geom
    n = np.arange(np_)
    o_h, o_w = n // g.ow, n % g.ow
    r = np.arange(g.kh * g.kw)
    ih = o_h[None, :] * g.sh - g.ph + (r // g.kw)[:, None] * g.dh
    iw = o_w[None, :] * g.sw - g.pw + (r % g.kw)[:, None] * g.dw
    return table_of_reads(ih, iw, (n < g.npix)[None, :], g.h, g.w, nr)


def table_of_reads(ih: np.ndarray, iw: np.ndarray, real: np.ndarray, h: int, w: int, nr: int) -> np.ndarray:
    """im2col.cl's table (see im2col_table) from the input row and column that each tap (rows)
    reads at each panel column (columns, a whole number of PV runs); `real` marks the columns
    that are output pixels (the rest, and reads outside the h x w plane, are padding)."""
    ok = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w) & real
    tab = np.where(ok, ih * w + iw, -1).astype(np.int32)
    pv = panel_vector_width(nr)
    ntap, np_ = tab.shape
    hw = h * w
    runs = tab.reshape(ntap, np_ // pv, pv)
    start = runs[..., 0]
    contiguous = (start >= 0) & np.all(runs - runs[..., :1] == np.arange(pv), axis=-1)
    # stride-2 runs (strided convs) read 2*PV consecutive inputs and keep the even ones; only
    # where those stay inside the channel's plane (never past the end of the tensor)
    every_other = ((start >= 0) & np.all(runs - runs[..., :1] == 2 * np.arange(pv), axis=-1)
                   & (start + 2 * pv <= hw) & (pv > 1))
    fast = np.where(contiguous, start, np.where(every_other, -(start + 2), -1)).astype(np.int32)
    return np.concatenate([tab.ravel(), fast.ravel()])


def x_defines(x_half: bool) -> dict:
    """im2col.cl's define for an input X stored as half (none for float: the fp32 programs keep
    their keys)."""
    return {"X_HALF": 1} if x_half else {}


def pixel_panels(ctx: LowerCtx, width: int, geom: ConvGeometry, x_half: bool = False) -> Iterator[tuple]:
    """A conv's input as GEMM panels of `width` output pixels (K = Cin/G*KH*KW rows), made piece
    by piece into one scratch buffer: im2col, or for a 1x1 a pack of X's columns. The panels are
    B of the GEMM (width NR) or, transposed, its A (width MR). Yields (producer launch, packed
    operand, first image, images, first pixel, pixels) per piece. `x_half`: X is stored as half
    (im2col or pack_b reads it so, im2col.cl X_HALF; the panels are float)."""
    g, label = geom, ctx.label()
    x_s1, x_s2 = g.cin * g.hw, g.cin_g * g.hw
    np_ = max(round_up(g.npix, width), width)
    parts, nbytes = pieces(g.n_img, np_ // width, 4 * width * g.kk * g.groups)
    scratch = ctx.scratch(nbytes)
    tab = None if g.pointwise else ctx.const_buffer(im2col_table(g, np_, width))
    ly = 8 if g.cin_g >= 8 else 1
    for i0, ni, q0, nq in parts:
        p0, pn = q0 * width, min(nq * width, g.npix - q0 * width)
        pstride = nq * width * g.kk  # packed elements per (image, group) in the scratch
        if g.pointwise:
            producer = pack_b_launch(ctx.device, width, src=ctx.buf(0), off=i0 * x_s1 + p0, s1=x_s1, s2=x_s2,
                                     s_k=g.hw, s_n=1, k=g.kk, n=pn, batch=ni * g.groups, d2=g.groups, dst=scratch,
                                     label=label)
            producer = replace(producer, defines={**producer.defines, **x_defines(x_half)})
        else:  # panels q0 .. q0+nq-1 of the table into panels 0 .. nq-1 of the scratch
            head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1), i32(x_s2), i32(g.groups), tab, scratch,
                    i32(pstride), i32(g.hw), i32(g.kh * g.kw), i32(np_)]
            gsize, ls = grid(ctx.device, (nq, g.cin_g, ni * g.groups), (1, ly, 1))
            producer = Launch("im2col", "im2col", gsize, head + [i32(g.cin_g), i32(q0)], ls,
                              {"NR": width, **x_defines(x_half)}, label,
                              noop_args=head + [i32(0), i32(q0)])  # Cg = 0: returns at once
        yield producer, Operand(scratch, packed=True, s1=g.groups * pstride, s2=pstride), i0, ni, p0, pn


# --- implicit GEMM: phase images and row offsets -------------------------------------------------------
def phases_read(k: int, d: int, s: int) -> Optional[int]:
    """How many phases along one axis the taps read, when they are phases 0..n-1 (else None):
    tap i reads phase (i*d) % s. All of them for the usual strided kxk conv, one for a 1x1."""
    used = {i * d % s for i in range(k)}
    return len(used) if used == set(range(len(used))) else None


def phases_ok(geom: ConvGeometry) -> bool:
    """The taps read phases 0..n-1 along both axes (the implicit GEMM's phase images cover them)."""
    return phases_read(geom.kh, geom.dh, geom.sh) is not None and phases_read(geom.kw, geom.dw, geom.sw) is not None


def phase_geometry(geom: ConvGeometry) -> tuple:
    """(phases along H, along W, HPH, WPH) of the implicit GEMM's phase images (see
    im2col.cl conv_phases): output pixel (y, x) reads tap (ky, kx) at row y + ky*dh // sh,
    column x + kx*dw // sw of phase ((ky*dh) % sh, (kx*dw) % sw); only the phases some tap
    reads are made (see implicit_ok).

    Row pitch WPH: the columns an output row touches, [0, OW + KW' - 1) with KW' the taps per
    phase, less the left padding columns every phase has: a read past a row's end lands in the
    next row's left padding, zeros like the right padding it stands for (3x3/1 at 56x56: a pitch
    of 57, not 58; 1.8% of the GEMM's columns are padding). HPH has one extra row for the last
    row's wrap (written by conv_phases like any other)."""
    g = geom
    nh, nw = phases_read(g.kh, g.dh, g.sh) or g.sh, phases_read(g.kw, g.dw, g.sw) or g.sw
    lo = min(max(0, -(-(g.pw - px) // g.sw)) for px in range(nw))  # leading padding columns
    hi = max((g.w - 1 + g.pw - px) // g.sw + 1 for px in range(nw))   # end of the data columns
    wph = max(hi, g.ow + (g.kw - 1) * g.dw // g.sw - lo)
    return nh, nw, g.oh + (g.kh - 1) * g.dh // g.sh + 1, wph


def implicit_ok(target: Target, cfg: GemmConfig, geom: ConvGeometry) -> bool:
    """Whether a (non-pointwise) conv runs as an implicit GEMM over phase images instead of
    im2col: under the CPU family (GPUs keep im2col until measured there), the taps read phases
    0..n-1 along each axis (every phase of a kxk stride-k conv, the first of a strided 1x1), at
    least one column tile, and little waste on the padding columns."""
    if not target.is_cpu_family or not phases_ok(geom):
        return False
    ncols = geom.oh * phase_geometry(geom)[3]
    if ncols < cfg.nr:
        return False
    return round_up(ncols, cfg.nr) <= (1 + IMPLICIT_WASTE) * round_up(geom.npix, cfg.nr)


def implicit_rows_ok(target: Target, cfg: GemmConfig, geom: ConvGeometry) -> bool:
    """Whether a transposed conv (pixels as the MR rows) reads its pixels in place: a 1x1 conv
    X itself (no pack), others the phase images (as implicit_ok). The rows are the output
    pixels themselves, each read through its own pointer (gemm.cl flag 8), so the phase
    images' padding columns cost no FMAs (ResNet-50's 14x14 3x3s: 196 rows, where padded-linear
    rows were 14 x 15 = 210).

    Only under the CPU family and for at most 8 column tiles of output channels (M): read in
    place, a pixel tile costs a cache line per k where its packed panel costs MR floats, paid
    again for every column tile. Measured in ResNet-50 on pocl: 256-channel layers faster in
    place (1x1 conv1 0.280 -> 0.260 ms with its pack, 3x3 0.595 -> 0.570 with im2col), 1024- and
    2048-channel ones slower (conv3 0.31 -> 0.34 ms, layer4 1x1s +0.03..0.06 ms). Walking the
    column tiles first was slower still (weight panels streamed once per pixel tile)."""
    if not target.is_cpu_family or geom.npix < cfg.mr or geom.m > 8 * cfg.nr:
        return False
    return geom.pointwise or phases_ok(geom)


def implicit_offsets(geom: ConvGeometry) -> np.ndarray:
    """koff[k] for k = (ci, ky, kx) (the weights' [Cin/G, KH, KW] order): where row k of the
    implicit B starts in one group's phase images ([ci][phase][HPH][WPH])."""
    g = geom
    nh, nw, hph, wph = phase_geometry(g)
    plane = hph * wph
    ky, kx = np.arange(g.kh)[:, None] * g.dh, np.arange(g.kw)[None, :] * g.dw
    tap = ((ky % g.sh) * nw + kx % g.sw) * plane + (ky // g.sh) * wph + kx // g.sw  # [KH, KW]
    ci = np.arange(g.cin_g)[:, None, None] * (nh * nw * plane)
    return (ci + tap[None]).astype(np.int32).ravel()


def padded_output(ctx: LowerCtx, geom: ConvGeometry, half: bool = False) -> tuple:
    """(C operand, row pitch, offset of pixel (0, 0)) for writing Y in the PaddedLayout the
    planner fixed for it (ctx.out_layout): planes of rows x pitch, one image after another;
    `half`: Y stored as half."""
    lay = ctx.out_layout
    if lay is None or geom.groups != 1:
        raise InvalidModel("a padded output needs a single-group conv", node=ctx.label())
    return (Operand(ctx.out(0), ld=lay.plane, s1=geom.cout * lay.plane, s2=geom.m * lay.plane, half=half), lay.pitch,
            lay.top * lay.pitch + lay.left)


def phase_kernel(sw: int, nw: int) -> tuple:
    """(im2col.cl kernel, phase planes per work-item) that splits X into phase images: both column
    phases of a stride-2 conv from one read of each input row (conv_phases' phase_rows_pair; A/B
    in turns on pocl under load, medians of 40: ResNet-50's 56 -> 28 3x3/2 input 0.114 -> 0.081
    ms, its 28 -> 14 0.100 -> 0.076 ms, the 224 x 224 stem 0.024 -> 0.021 ms), else one plane
    each. One kernel for both: each kernel's first launch generates its code at a cold start
    (0.2-0.4 s each on pocl under load)."""
    return ("conv_phases", 2) if sw == 2 and nw == 2 else ("conv_phases", 1)


def phase_pieces(ctx: LowerCtx, geom: ConvGeometry, slack: int, offer: bool = True,
                 x_half: bool = False, widen: bool = False) -> Iterator[tuple]:
    """The input of an implicit GEMM: X copied into zero-padded phase images (conv_phases, about
    1.1 x X where im2col writes KH*KW x X), images in pieces within the scratch cap. A stride-1
    1x1 conv reads X itself (no copy, one piece). `offer`: whether a one-phase image is offered
    to X's producer (LowerCtx.offer_padded_in). `x_half`: X stored as half (read so by
    conv_phases, or the operand when X is read in place; the phase images are float). `widen`:
    never X in place (a 1x1 too is copied, into float phase images), nothing offered. Yields (producer launch or None, pixel operand
    (stride per image and per group), offset table, WPH, first image, images)."""
    g, label = geom, ctx.label()
    if g.pointwise and not widen:
        koff = ctx.const_buffer((np.arange(g.cin_g) * g.hw).astype(np.int32))
        yield None, Operand(ctx.buf(0), s1=g.cin * g.hw, s2=g.cin_g * g.hw, half=x_half), koff, g.w, 0, g.n_img
        return
    nh, nw, hph, wph = phase_geometry(g)
    per_img = g.cin * nh * nw * hph * wph  # floats of one image's phase images
    x_s1 = g.cin * g.hw
    koff = ctx.const_buffer(implicit_offsets(g))
    if nh == nw == 1 and g.groups == 1 and offer and not widen:
        # One phase image per channel (a stride-1 conv): its producer may write X padded like
        # that in the first place (PaddedLayout), and then there is nothing to copy.
        layout = PaddedLayout(hph, wph, g.ph, g.pw, slack)
        ctx.offer_padded_in = layout
        if ctx.in_layout is not None:
            if ctx.in_layout != layout:
                raise InvalidModel(f"padded input {ctx.in_layout} differs from the conv's {layout}", node=label)
            yield None, Operand(ctx.buf(0), s1=per_img, s2=per_img, half=x_half), koff, wph, 0, g.n_img
            return
    parts, nbytes = pieces(g.n_img, 1, 4 * per_img)
    scratch = ctx.scratch(nbytes + 4 * slack)
    for i0, ni, _, _ in parts:
        tail = [i32(g.h), i32(g.w), scratch, i32(per_img), i32(hph), i32(wph), i32(g.sh), i32(g.sw), i32(g.ph),
                i32(g.pw), i32(nh), i32(nw)]
        head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1)]
        kernel, per_item = phase_kernel(g.sw, nw)
        gsize, ls = grid(ctx.device, (-(-hph // 8), g.cin * nh * nw // per_item, ni), (1, 16, 1))
        producer = Launch("im2col", kernel, gsize, head + [i32(g.cin)] + tail, ls, x_defines(x_half), label,
                          noop_args=head + [i32(0)] + tail)  # Cin = 0: returns at once
        yield producer, Operand(scratch, s1=per_img, s2=g.cin_g * nh * nw * hph * wph), koff, wph, i0, ni


# Whether a strided conv reading its pixel rows from a padded image (pixel_row_pieces) offers that
# image to X's producer, which then stores into it instead of a copy being made: off, because a
# non-transposed 1x1 producer's GEMM stores the vectors that cross a row end of the padded
# layout run by run: ResNet-50's layer3.0.conv1 (28-pixel rows) measured 15% slower that way,
# more than the copy it saves its consumer (A/B in turns, whole model, under load: conv1 0.934
# -> 1.095 ms, conv2 1.145 -> 1.067 ms).
OFFER_STRIDED_PADDED = False


def strided_cover(geom: ConvGeometry) -> ConvGeometry:
    """The stride-1 conv whose output pixels (y, x) include every (y*SH, x*SW): it reads the same
    rows and columns of X as `geom`, so its zero-padded image (one phase) holds every tap of
    `geom` at a plain offset."""
    g = geom
    return replace(g, sh=1, sw=1, oh=(g.oh - 1) * g.sh + 1, ow=(g.ow - 1) * g.sw + 1)


def transposed_rows_config(target: Target, cfg: GemmConfig, geom: ConvGeometry) -> Optional[GemmConfig]:
    """The tiles of a strided conv's transposed GEMM over its pixel rows read in place (gemm.cl
    flag 8, pixel_row_pieces) whatever its N (gemm_kernel.transposed_config takes only N <= 8
    NR): MR the pixel rows with the fewest padded ones (the largest such), NR = 2 VW output
    channels; None unless implicit_rows_ok (CPU family, at most 8 channel tiles).

    Why for strided convs: the implicit GEMM reads phase images, which a conv_phases launch
    copies X into every run and whose padding columns it computes; the pixel rows read X itself
    (a 1x1) or a stride-1 padded image, which a producing 1x1 conv could write directly
    (OFFER_STRIDED_PADDED). Measured level with the implicit GEMM, so a tuning choice (conv.py's
    "transposed rows", after "implicit"): ResNet-50's
    56 -> 28 3x3/2 (128 channels), A/B in turns on pocl under load: alone (each with its copy
    of X) x1.12 (GEMM 1.207 -> 1.135 ms, copy 0.195 -> 0.115 ms); after its 1x1 producer
    (which then writes the padded image, 6% slower, and no copy is made) x0.86-1.04 in three
    runs; a strided 1x1 (56 -> 28, 64 -> 128: X read in place, no copy) x0.92. Stride-1 convs
    measured level (x0.99-1.04) and are not offered it."""
    if geom.pointwise or geom.sh == geom.sw == 1:
        return None
    tcfg = replace(cfg, nv=2, pfn=transposed_pfn(target))
    if not target.is_cpu_family or geom.m < 2 * tcfg.nr:
        return None
    mr = min(range(tcfg.mr, 5, -1), key=lambda r: (round_up(geom.npix, r), -r))
    tcfg = replace(tcfg, mr=mr)
    return tcfg if implicit_rows_ok(target, tcfg, geom) else None


def pixel_row_pieces(ctx: LowerCtx, geom: ConvGeometry, slack: int, x_half: bool = False,
                     widen: bool = False) -> Iterator[tuple]:
    """The pixel operand of a transposed implicit GEMM (output pixels as its rows, each read
    through its own pointer, gemm.cl flag 8): as phase_pieces, but a strided conv reads X itself
    (a 1x1 without padding) or a stride-1 zero-padded image of X with its row and column
    strides, not phase images: a plain copy, half the time of the phase split (ResNet-50's
    28 -> 14 3x3/2, A/B under load: 0.169 -> 0.086 ms), or none for a 1x1. The image is offered
    to X's producer (offer_padded_in) only where OFFER_STRIDED_PADDED says. Yields (producer
    launch or None, pixel operand with its column stride as ld2, offset table, row stride,
    first image, images). `x_half` and `widen` as for phase_pieces."""
    g = geom
    if g.sh == g.sw == 1:
        yield from phase_pieces(ctx, g, slack, x_half=x_half, widen=widen)
        return
    if g.kh == g.kw == 1 and g.ph == g.pw == 0 and not widen:  # a strided 1x1: X in place, subsampled
        koff = ctx.const_buffer((np.arange(g.cin_g) * g.hw).astype(np.int32))
        yield (None, Operand(ctx.buf(0), s1=g.cin * g.hw, s2=g.cin_g * g.hw, ld2=g.sw, half=x_half), koff,
               g.sh * g.w, 0, g.n_img)
        return
    g1 = strided_cover(g)
    pieces_ = phase_pieces(ctx, g1, slack + (g.sw - 1) * g.ow, OFFER_STRIDED_PADDED, x_half, widen)
    for producer, a, koff, wph, i0, ni in pieces_:
        yield producer, replace(a, ld2=g.sw), koff, g.sh * wph, i0, ni


def fit_tiles(target: Target, cfg: GemmConfig, geom: ConvGeometry) -> GemmConfig:
    """The tiles of a non-transposed conv GEMM: fit_rows over the columns its path computes
    (the padded-linear pixels of an implicit GEMM), keeping the config's path (X in place,
    implicit) where the narrower tiles would lose it."""
    m, npix = geom.m, geom.npix
    if geom.pointwise:
        fit = fit_rows(target, cfg, m, npix)
        return fit if b_unpacked_ok(fit, npix) == b_unpacked_ok(cfg, npix) else cfg
    if implicit_ok(target, cfg, geom):
        fit = fit_rows(target, cfg, m, geom.oh * phase_geometry(geom)[3])
        return fit if implicit_ok(target, fit, geom) else cfg
    return fit_rows(target, cfg, m, npix)


__all__ = ["SCRATCH_CAP", "IMPLICIT_WASTE", "pieces", "panel_vector_width", "im2col_table", "table_of_reads",
           "pixel_panels",
           "phases_read", "phases_ok", "phase_geometry", "implicit_ok", "implicit_rows_ok", "implicit_offsets",
           "padded_output", "x_defines", "phase_kernel", "phase_pieces", "OFFER_STRIDED_PADDED", "strided_cover",
           "transposed_rows_config", "pixel_row_pieces", "fit_tiles"]
