"""Conv and clglow FusedConv on OpenCL: a ranked table of implementations (CONV_PATHS), the first
applicable one lowers the node.

FusedConv (domain "clglow", made by the fusion pass) is Y = act(conv(X, W) + B + Z): its bias,
residual and activation run in the GEMM's epilogue (gemm.cl), so a fused layer is one GEMM
launch (plus the producer of its pixel operand, if any). Plain Conv takes the same paths
without residual or activation. 1-D convs run as 2-D with H = 1; 3-D convs take the "im2col nd"
row (lower/conv_nd.py: im2col_nd.cl panels + gemm.cl), first in the table, declined by 2-D ones. Weights are packed into GEMM panels once per plan
(ctx.derived).

The paths, in the order they are tried (each `applicable(case)` says why not, or None; the
shape tests are in lower/conv_gemm.py and lower/winograd.py, the tiles come from the Target):
  implicit nd 3-D convs with stride 1 along H and W, one group: pad_nd (im2col_nd.cl) copies X once
              into zero-padded volumes, one implicit gemm.cl launch over (image, depth) batches
              (lower/conv_nd.py). CPU family, as the 2-D implicit path.
  im2col nd   other 3-D convs (an NdGeometry): im2col_nd.cl B panels piece by piece, each then one
              gemm.cl launch, the weights packed once. Any family.
  gpu depthwise  depthwise convs on the GPU family with dedicated local memory: gpu_dwconv.cl, a tile
              of output pixels per work-group, its input halo staged in local memory once
              (lower/gpu_dwconv.py).
  depthwise   Cin/groups == 1, groups > 1: dwconv.cl, one launch: dwconv_rows (8 rows x 16
              columns per work-item) for 3x3, 5x5 and 7x7 with stride 1 or 2, dwconv (16
              columns of one row) otherwise (lower/conv_depthwise.py). Any family.
  gemv        a single-group 1x1 conv of a 1x1 map (SE blocks' FCs, a head after pooling): one
              conv_gemv.cl launch over weight panels of 16 output channels (lower/conv_gemv.py).
              CPU family.
  winograd    single-group 3x3 stride-1 convs with constant weights and enough tiles:
              F(4x4) / F(2x2) (lower/winograd.py); the tuner also offers their forms on few
              tiles and the transposed F4T / F2T (lower/winograd_small.py). CPU family,
              PlanOptions.winograd.
  regions     border outputs that read the image with few of their taps (a dilated conv on a
              small map, DeepLabV3's ASPP rate 12): per region of constant live taps, im2col of
              its pixels and taps + its GEMM, then a scatter into Y (lower/conv_regions.py).
              CPU family, constant weights, one group, no residual.
  transposed  few output pixels (N <= 8 column tiles, gemm_kernel.transposed_config): Y^T = cols^T
              W^T with the pixels as the MR tile rows, read in place (X for a 1x1, a strided
              conv's padded image read with its strides, phase images otherwise; gemm.cl flag
              8, lower/conv_gemm.py pixel_row_pieces) when the output has at most 8 column tiles
              (implicit_rows_ok), else from im2col / pack panels, the tile stored transposed
              (gemm.cl C_TRANS). CPU family, constant weights; not for a 1x1 that reads X in
              place as B while its transposed form would pack X.
  xgemm pointwise / xgemm im2col   GPU family with dedicated local memory (gpu_gemm.xgemm_applicable):
              xgemm.cl's local-memory tiles, a 1x1 reading X in place as B, any other conv on
              im2col panels of the tile's width; the weights read in place (not packed).
  xgemm implicit  the same tiles with B gathered from X into local memory per tile (implicit GEMM,
              no im2col buffer, padding by bounds): any other 2-D conv, one launch
              (lower/gpu_conv.py); "xgemm im2col" stays in the tuner's space of paths.
  gpu winograd  F(2x2, 3x3) or F(4x4, 3x3) (variant "F4") on xgemm.cl (lower/gpu_winograd.py):
              after the implicit GEMM, so taken where the conv family's tuning entry (measured on
              the device) chooses it.
  pointwise   1x1, stride 1, no padding: the GEMM reads X in place as B (when N is whole
              column tiles or at least 4 of them). Any family.
  implicit    other convs whose taps read phases 0..n-1: conv_phases (im2col.cl) copies X once
              into zero-padded phase images; the GEMM reads row k of B at a per-k offset in them
              and stores only the real pixels (gemm.cl implicit flag 4). CPU family.
  transposed rows  strided convs with at most 8 column tiles of output channels, any N: the
              transposed GEMM over the pixel rows read in place, X itself for a strided 1x1,
              else a stride-1 zero-padded image that a producing 1x1 conv writes directly (no
              copy) or conv_phases makes (lower/conv_gemm.py transposed_rows_config). CPU family,
              constant weights; after "implicit", so taken where the conv family's tuning entry
              chooses it (measured level with it: see transposed_rows_config).
  im2col      everything else: im2col.cl (or pack_b for a 1x1) writes B panels into scratch,
              piece by piece, then the GEMM. Any family (the GPU family's path for most convs).
A new device family is a new row or a new gate in its `applicable`, not an `if` in the lowering.

Half storage (SessionOptions.precision, passes/precision.py): X, the residual Z and Y may be
stored as half (HalfIO (0, 3) -> (0,)); weights and bias stay float32 (packed once), arithmetic
fp32. The HALF_PATHS rows read and write it themselves: im2col / pack_b / conv_phases read a half
X into float panels or phase images (im2col.cl X_HALF), gemm.cl writes Y and reads Z as half
(C_HALF), winograd.cl, dwconv.cl and conv_gemv.cl take XH / YH. A half X is not read in place
as a GEMM operand where gemm.cl would convert it once per tile (a 1x1 packs it, the transposed
paths widen their pixel rows): ResNet-50 fp16 kernel time 1.14x fp32's on pocl, where conversions
are integer code (no gain is expected on a CPU without half arithmetic). The GPU family's rows
(xgemm.cl B_HALF / C_HALF / Z_HALF, gpu_winograd.cl and gpu_dwconv.cl XH / YH) read and write it
too; the 3-D rows run on float32 copies (lower/half.py).

Between two convs (LowerCtx offers, fixed by the planner, runtime/executor.py): a stride-1 conv
offers to read its input as its zero-padded phase image directly (offer_padded_in), a 1x1 conv
without residual to write its output in such a layout (offer_padded_out: the same GEMM, stored
remapped, gemm.cl opitch/ooff); where the two meet, the conv_phases copy is gone (ResNet's
bottlenecks). A FusedConv's output may take its residual's buffer (may_update).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Optional, Union

import numpy as np

from ..config import PlanOptions
from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, f32, i32, round_up
from .common import AUTO_PADS, F16, F32, ConvGeometry, Epilogue, attr_str, check_dtypes, grid, resolve_conv
from .conv_depthwise import depthwise_applicable, lower_depthwise
from .conv_gemm import (fit_tiles, implicit_ok, implicit_rows_ok, padded_output, phase_geometry, phase_pieces,
                        pixel_panels, pixel_row_pieces, transposed_rows_config)
from .conv_nd import (ND_RANKS, NdGeometry, lower_conv_nd, lower_conv_nd_implicit, nd_applicable, nd_geometry,
                      nd_implicit_applicable)
from .conv_gemv import gemv_applicable, lower_gemv
from .conv_regions import lower_regions, regions_applicable
from .conv_taps import drop_dead_taps
from .gemm_kernel import (ACTIVATIONS, Bias, GemmConfig, Implicit, Operand, act_params, b_unpacked_ok,
                          gemm_config, gemm_key, gemm_launch, pack_a, pack_b, transposed_config, tuned_tiles)
from .gpu_gemm import tuned_xgemm, xgemm_applicable, xgemm_launch
from .gpu_conv import implicit_applicable as xgemm_implicit_applicable, lower_implicit as lower_xgemm_implicit
from .gpu_dwconv import depthwise_applicable as gpu_depthwise_applicable, lower_depthwise as lower_gpu_depthwise
from .gpu_winograd import VARIANTS as GPU_WINO_VARIANTS, lower_gpu_winograd
from .gpu_winograd import winograd_applicable as gpu_winograd_applicable
from .half import has_half, lower_as_float
from .tunable import Family, forget, note_request, record_decision, register, stored
from .winograd import VARIANTS, lower_winograd, variant_name, winograd_variant
from .winograd_small import lower_winograd_t

log = logging.getLogger(__name__)

_FLT_MAX = 3.4028234663852886e38


# --- supports ------------------------------------------------------------------------------------------
def _spatial_rank(node: Node, graph: Graph) -> Optional[int]:
    for name in (node.input(1), node.input(0)):
        v = graph.values.get(name) if name else None
        if v is not None and v.shape is not None:
            return len(v.shape) - 2
    ks = node.attrs.get("kernel_shape")
    return len(ks) if ks is not None else None


def supports_conv(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 1-D, 2-D and 3-D convolutions with any pads/strides/dilations/groups/auto_pad (X,
    the residual and Y may be stored as half: see HalfIO below)."""
    why = check_dtypes(node, graph, {F32}, [1, 2]) or check_dtypes(node, graph, {F32, F16}, [0, 3], outputs=True)
    if why:
        return why
    rank = _spatial_rank(node, graph)
    if rank is not None and rank not in (1, 2) + ND_RANKS:
        return f"{rank}-D convolution: the OpenCL kernels cover 1-D to {max(ND_RANKS)}-D"
    ap = attr_str(node.attrs.get("auto_pad"), "NOTSET")
    if ap not in AUTO_PADS:
        return f"auto_pad={ap!r} is not one of {', '.join(AUTO_PADS)}"
    act = attr_str(node.attrs.get("activation"), "")
    if act not in ACTIVATIONS:
        return f"fused activation {act!r} is not one of {sorted(a for a in ACTIVATIONS if a)}"
    return None


# --- the node's geometry and epilogue -----------------------------------------------------------------
def conv_geometry(ctx: LowerCtx) -> ConvGeometry:
    """The node's ConvGeometry at its concrete shapes, after auto_pad (a 1-D conv as 2-D with
    H = 1); InvalidModel when X, W, the attributes and the output shape disagree."""
    c = resolve_conv(ctx, (1, 2), "the OpenCL path takes 1-D and 2-D convs")
    if len(c.in_sp) == 1:
        sp = dict(h=1, w=c.in_sp[0], oh=1, ow=c.out_sp[0], kh=1, kw=c.k_sp[0], sh=1, sw=c.strides[0], ph=0,
                  pw=c.begins[0], dh=1, dw=c.dil[0])
    else:
        sp = dict(h=c.in_sp[0], w=c.in_sp[1], oh=c.out_sp[0], ow=c.out_sp[1], kh=c.k_sp[0], kw=c.k_sp[1],
                  sh=c.strides[0], sw=c.strides[1], ph=c.begins[0], pw=c.begins[1], dh=c.dil[0], dw=c.dil[1])
    return ConvGeometry(**sp, n_img=c.n_img, cin=c.cin, cout=c.cout, groups=c.groups)


def conv_epilogue(ctx: LowerCtx) -> Epilogue:
    """Bias, residual and activation (FusedConv attributes; plain Conv: bias only)."""
    act = attr_str(ctx.attr("activation"), "")
    if act not in ACTIVATIONS:
        raise InvalidModel(f"unsupported fused activation {act!r}", node=ctx.label())
    defaults = {"Clip": (-_FLT_MAX, _FLT_MAX), "LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5)}
    da, db = defaults.get(act, (0.0, 0.0))
    a, b = ctx.attr("alpha", None), ctx.attr("beta", None)
    has_res = ctx.has_input(3) and bool(ctx.node.input(3))
    if has_res and tuple(ctx.inputs[3].shape) != tuple(ctx.outputs[0].shape):
        raise InvalidModel(f"FusedConv residual {ctx.inputs[3].shape} differs from output {ctx.outputs[0].shape}",
                           node=ctx.label())
    return Epilogue(act, float(da if a is None else a), float(db if b is None else b),
                    has_bias=ctx.has_input(2) and bool(ctx.node.input(2)), has_res=has_res)


# --- the case the paths judge -----------------------------------------------------------------------------
@dataclass
class ConvCase:
    """One conv node at its shapes on one Target: what the paths' `applicable` read. The tile
    choices are computed once, on first use."""

    target: Target
    options: PlanOptions
    geom: Union[ConvGeometry, NdGeometry]  # NdGeometry: a 3-D conv (only the "im2col nd" row reads it)
    epi: Epilogue
    const_weights: bool
    label: str = ""  # the node's, for the profiler's record of its tuned tiles
    variants: Optional[tuple] = None  # the Winograd variants allowed (winograd.VARIANTS' names; None: the defaults)

    @cached_property
    def cfg(self) -> GemmConfig:
        """The Target's GEMM tiles (tuned, else its family's defaults)."""
        return gemm_config(self.target)

    @cached_property
    def winograd(self) -> Optional[tuple]:
        """(variant, GEMM tiles) when the conv runs as Winograd, else None."""
        if not self.const_weights:
            return None
        return winograd_variant(self.target, self.options, self.cfg, self.geom, self.variants)

    @cached_property
    def transposed(self) -> Optional[GemmConfig]:
        """The transposed GEMM's tiles when it is taken, else None."""
        g = self.geom
        if not self.const_weights:
            return None
        tcfg = transposed_config(self.target, self.cfg, g.m, g.npix)
        if (tcfg is not None and g.pointwise and b_unpacked_ok(self.cfg, g.npix)
                and not implicit_rows_ok(self.target, tcfg, g)):
            # A 1x1 whose transposed form would pack X (many output channels): X read in place as
            # B instead, its ragged last column tile overlapping. ResNet-50's 14x14 1024-channel
            # convs (224 columns computed for 196 pixels), A/B on pocl: 0.1-0.3 ms faster per
            # image than packed and stored transposed, 6 launches fewer.
            return None
        return tcfg

    @cached_property
    def transposed_rows(self) -> Optional[GemmConfig]:
        """The tiles of a strided conv's transposed GEMM over its pixel rows read in place (any N;
        lower/conv_gemm.py transposed_rows_config), else None."""
        return transposed_rows_config(self.target, self.cfg, self.geom) if self.const_weights else None

    @cached_property
    def tiles(self) -> GemmConfig:
        """The tiles of the non-transposed GEMM paths: the tuning database's for this conv's GEMM
        (gemm family, lower/tunable.py) when it keeps the path, else fitted to the columns they
        compute."""
        fit = fit_tiles(self.target, self.cfg, self.geom)
        g = self.geom
        if isinstance(g, NdGeometry) or not self.const_weights:
            return fit
        if g.pointwise:
            inplace, n = b_unpacked_ok(fit, g.npix), g.npix

            def keeps(cfg: GemmConfig) -> bool:
                return b_unpacked_ok(cfg, g.npix) == inplace
        else:
            inplace = implicit_ok(self.target, fit, g)
            n = g.oh * phase_geometry(g)[3] if inplace else g.npix

            def keeps(cfg: GemmConfig) -> bool:
                return implicit_ok(self.target, cfg, g) == inplace
        key = gemm_key(g.m, n, g.kk, "inplace" if inplace else "packed")
        return tuned_tiles(self.target, key, fit, self.label, valid=keeps)[0]


@dataclass(frozen=True)
class ConvPath:
    """One implementation of Conv: `applicable(case)` is None when it runs the case, else why
    not; `lower(ctx, case)` its launches. `gemm`: a GEMM epilogue reads the residual before
    writing each output, so the output may take the residual's buffer."""

    name: str
    applicable: Callable[[ConvCase], Optional[str]]
    lower: Callable[[LowerCtx, ConvCase], list]
    gemm: bool = True


# --- half storage -----------------------------------------------------------------------------------------
_HALF_IO = HalfIO((0, 3), (0,))
# The paths that read and write half storage themselves (the rest run on float32 copies).
HALF_PATHS = frozenset({"pointwise", "implicit", "im2col", "transposed", "transposed rows", "winograd", "gemv", "regions",
                        "depthwise", "xgemm pointwise", "xgemm implicit", "xgemm im2col", "gpu winograd",
                        "gpu depthwise"})


# A 1x1 conv on a half X packs it into float panels (pack_b, one pass) instead of reading it in
# place, where gemm.cl converts each B row once per row tile of the weights.
HALF_X_PACKED = True


def _half(ctx: LowerCtx, i: int) -> bool:
    """Whether input i of the conv is present and stored as half."""
    return ctx.has_input(i) and bool(ctx.node.input(i)) and ctx.inputs[i].dtype == F16


def _y_half(ctx: LowerCtx) -> bool:
    return ctx.outputs[0].dtype == F16


def half_native(ctx: LowerCtx, c: ConvCase, path: ConvPath) -> bool:
    """Whether `path` lowers the node on its tensors as stored: a 2-D conv's HALF_PATHS row, with
    the residual stored as Y (gemm.cl C_HALF covers both)."""
    g = c.geom
    return (path.name in HALF_PATHS and not isinstance(g, NdGeometry)
            and _half(ctx, 3) == (c.epi.has_res and _y_half(ctx)))


# --- Winograd -------------------------------------------------------------------------------------------
def _winograd_applicable(c: ConvCase) -> Optional[str]:
    return None if c.winograd is not None else "not a Winograd conv on this Target (see winograd_variant)"


def _lower_winograd(ctx: LowerCtx, c: ConvCase) -> list:
    variant, tiles = c.winograd
    if variant.transposed:  # few tiles: the GEMM transposed (lower/winograd_small.py)
        return lower_winograd_t(ctx, variant, tiles, c.geom, c.epi)
    return lower_winograd(ctx, variant, tiles, c.geom, c.epi)


# --- transposed (small N) -------------------------------------------------------------------------------
def _transposed_applicable(c: ConvCase) -> Optional[str]:
    return None if c.transposed is not None else "N not small, weights not constant, or not the CPU family"


def _transposed_rows_applicable(c: ConvCase) -> Optional[str]:
    return None if c.transposed_rows is not None else "not strided, too many channels, or not the CPU family"


def _lower_transposed_rows(ctx: LowerCtx, c: ConvCase) -> list:
    return _lower_transposed(ctx, c, c.transposed_rows)


def _lower_transposed(ctx: LowerCtx, c: ConvCase, cfg: Optional[GemmConfig] = None) -> list:
    """Small-N convs (few output pixels) as Y^T = cols^T @ W^T: the pixels are the GEMM's MR rows,
    read in place (X for a 1x1, else a padded image or phase images; gemm.cl flag 8) or from
    im2col panels of MR pixels, the weights packed once into NR output-channel panels, and the
    tile stored transposed (gemm.cl C_TRANS). `cfg`: the tiles (default c.transposed)."""
    cfg, g, e, label = cfg or c.transposed, c.geom, c.epi, ctx.label()
    m, kk, npix, groups = g.m, g.kk, g.npix, g.groups
    mp = max(round_up(m, cfg.nr), cfg.nr)
    b = Operand(ctx.derived(1, f"convBT{cfg.nr}g{groups}",
                            lambda wt: pack_b(np.asarray(wt, np.float32).reshape(groups, m, kk).swapaxes(-1, -2),
                                              cfg.nr)),
                packed=True, s2=mp * kk)
    bias = Bias(ctx.buf(2), sm=0, sn=1, s2=m) if e.has_bias else None
    c_s1, c_s2 = g.cout * npix, m * npix
    xh, yh = _half(ctx, 0), _y_half(ctx)

    def gemm(a: Operand, off: int, rows: int, batch: int, cop: Optional[Operand] = None,
             implicit: Optional[Implicit] = None) -> Launch:
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2, half=yh) if e.has_res else None
        cop = cop if cop is not None else Operand(ctx.out(0), off=off, ld=npix, s1=c_s1, s2=c_s2, half=yh)
        return gemm_launch(cfg, m=rows, n=m, k=kk, batch=batch, d2=groups, a=a, b=b, c=cop, bias=bias, res=res,
                           act=e.act, act_alpha=e.alpha, act_beta=e.beta, c_trans=True, implicit=implicit,
                           label=label)

    launches: list = []
    if implicit_rows_ok(c.target, cfg, g):
        # A read in place: X itself for a 1x1 (one launch, no pack), else the phase images.
        # A half X is not read in place as the pixel rows (gemm.cl converts such an A row by row,
        # per k: ResNet-50's 14x14 convs 10x their float32 time on pocl) but widened into float
        # phase images by conv_phases (one vector pass over X).
        for producer, a, koff, wph, i0, ni in pixel_row_pieces(ctx, g, phase_geometry(g)[3] + cfg.mr, xh, widen=xh):
            if producer is not None:
                launches.append(producer)
            off = i0 * c_s1  # C^T: pixels are the rows, stored contiguously per channel
            cop, pitch, ooff = None, None, 0
            if g.pointwise:
                ctx.offer_padded_out = groups == 1 and not e.has_res
                if ctx.out_layout is not None:  # Y straight into the next conv's padded input
                    cop, pitch, ooff = padded_output(ctx, g, yh)
            launches.append(gemm(a, off, npix, ni * groups, cop, Implicit(koff, wph, g.ow, pitch, ooff)))
        return launches
    # Else the pixel panels of A: im2col panels of MR pixels (the waste of the padding rows of
    # phase images too high).
    for producer, a, i0, ni, p0, pn in pixel_panels(ctx, cfg.mr, g, xh):
        launches.append(producer)
        launches.append(gemm(a, i0 * c_s1 + p0, pn, ni * groups))
    return launches


# --- the non-transposed GEMM paths ------------------------------------------------------------------------
def _weights_a(ctx: LowerCtx, c: ConvCase) -> Operand:
    """The weights as the GEMM's A: MR-row panels packed once (constant), else read in place."""
    cfg, g = c.tiles, c.geom
    if c.const_weights:
        groups, m, kk = g.groups, g.m, g.kk
        return Operand(ctx.derived(1, f"convA{cfg.mr}g{groups}",
                                   lambda wt: pack_a(np.asarray(wt, np.float32).reshape(groups, m, kk), cfg.mr)),
                       packed=True, s2=max(round_up(m, cfg.mr), cfg.mr) * kk)
    return Operand(ctx.buf(1), ld=g.kk, ld2=1, s2=g.m * g.kk)


def _bias(ctx: LowerCtx, c: ConvCase) -> Optional[Bias]:
    return Bias(ctx.buf(2), sm=1, sn=0, s2=c.geom.m) if c.epi.has_bias else None


def _pointwise_applicable(c: ConvCase) -> Optional[str]:
    if not c.geom.pointwise:
        return "not a 1x1 stride-1 unpadded conv"
    return None if b_unpacked_ok(c.tiles, c.geom.npix) else "N too narrow to read X in place"


def _lower_pointwise(ctx: LowerCtx, c: ConvCase) -> list:
    """1x1: the GEMM reads X in place. Measured on pocl (AVX-512) with the current kernel: within
    5% of packed panels (e.g. 64x3136x256: 424 vs 433 GFLOP/s), while the pack costs a launch
    and a pass over X (0.1 ms for ResNet's layer1 conv1)."""
    cfg, g, e, label = c.tiles, c.geom, c.epi, ctx.label()
    xh, yh = _half(ctx, 0), _y_half(ctx)
    if xh and HALF_X_PACKED:
        return _lower_im2col(ctx, c)
    a, bias = _weights_a(ctx, c), _bias(ctx, c)
    c_s1, c_s2 = g.cout * g.npix, g.m * g.npix
    x_s1, x_s2 = g.cin * g.hw, g.cin_g * g.hw
    ctx.offer_padded_out = g.groups == 1 and not e.has_res
    if ctx.out_layout is not None:
        # Y straight into the next conv's zero-padded input: the same GEMM read as an
        # implicit one over X (row k at k*H*W, no padding columns), stored remapped.
        koff = ctx.const_buffer((np.arange(g.cin_g) * g.hw).astype(np.int32))
        cop, pitch, ooff = padded_output(ctx, g, yh)
        return [gemm_launch(cfg, m=g.m, n=g.npix, k=g.kk, batch=g.n_img, d2=1, a=a,
                            b=Operand(ctx.buf(0), s1=x_s1, s2=x_s2, half=xh), c=cop, bias=bias, act=e.act,
                            act_alpha=e.alpha, act_beta=e.beta, implicit=Implicit(koff, g.w, g.w, pitch, ooff),
                            label=label)]
    # B is X itself, [Cin_g, H*W] per (image, group).
    b = Operand(ctx.buf(0), ld=g.hw, s1=x_s1, s2=x_s2, half=xh)
    res = Operand(ctx.buf(3), s1=c_s1, s2=c_s2, half=yh) if e.has_res else None
    return [gemm_launch(cfg, m=g.m, n=g.npix, k=g.kk, batch=g.n_img * g.groups, d2=g.groups, a=a, b=b,
                        c=Operand(ctx.out(0), ld=g.npix, s1=c_s1, s2=c_s2, half=yh), bias=bias, res=res,
                        act=e.act, act_alpha=e.alpha, act_beta=e.beta, label=label)]


def _implicit_applicable(c: ConvCase) -> Optional[str]:
    if c.geom.pointwise:
        return "a 1x1 conv (read in place or packed instead)"
    return None if implicit_ok(c.target, c.tiles, c.geom) else "taps, padding waste or the Target's family"


def _lower_implicit(ctx: LowerCtx, c: ConvCase) -> list:
    """Implicit GEMM: the GEMM reads B rows as shifted runs of the phase images through a K-entry
    offset table and stores only the real pixels (gemm.cl implicit flag)."""
    cfg, g, e, label = c.tiles, c.geom, c.epi, ctx.label()
    a, bias = _weights_a(ctx, c), _bias(ctx, c)
    c_s1, c_s2 = g.cout * g.npix, g.m * g.npix
    launches: list = []
    yh = _y_half(ctx)
    # slack: the last tile's padding columns read up to WPH floats past the last phase image
    for producer, b, koff, wph, i0, ni in phase_pieces(ctx, g, phase_geometry(g)[3] + cfg.nr, x_half=_half(ctx, 0)):
        if producer is not None:  # None: X is already the padded image (PaddedLayout)
            launches.append(producer)
        off = i0 * c_s1
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2, half=yh) if e.has_res else None
        launches.append(gemm_launch(cfg, m=g.m, n=g.oh * wph, k=g.kk, batch=ni * g.groups, d2=g.groups, a=a, b=b,
                                    c=Operand(ctx.out(0), off=off, ld=g.npix, s1=c_s1, s2=c_s2, half=yh), bias=bias,
                                    res=res, act=e.act, act_alpha=e.alpha, act_beta=e.beta,
                                    implicit=Implicit(koff, wph, g.ow), label=label))
    return launches


def _lower_im2col(ctx: LowerCtx, c: ConvCase) -> list:
    """im2col (or, for a 1x1, pack) panels of NR pixels into scratch, piece by piece, each
    followed by its GEMM."""
    cfg, g, e, label = c.tiles, c.geom, c.epi, ctx.label()
    a, bias = _weights_a(ctx, c), _bias(ctx, c)
    c_s1, c_s2 = g.cout * g.npix, g.m * g.npix
    launches: list = []
    yh = _y_half(ctx)
    for producer, b, i0, ni, n0, nn in pixel_panels(ctx, cfg.nr, g, _half(ctx, 0)):
        launches.append(producer)
        off = i0 * c_s1 + n0
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2, half=yh) if e.has_res else None
        launches.append(gemm_launch(cfg, m=g.m, n=nn, k=g.kk, batch=ni * g.groups, d2=g.groups, a=a, b=b,
                                    c=Operand(ctx.out(0), off=off, ld=g.npix, s1=c_s1, s2=c_s2, half=yh),
                                    bias=bias, res=res, act=e.act, act_alpha=e.alpha, act_beta=e.beta,
                                    label=label))
    return launches


# --- the GPU family's local-memory tiles (xgemm.cl, lower/gpu_gemm.py) -----------------------------------
def _xgemm_operands(ctx: LowerCtx, c: ConvCase) -> tuple:
    """(weights as A read in place, [Cout/G, Cin/G*KH*KW] per group; the bias; C's strides)."""
    g = c.geom
    return (Operand(ctx.buf(1), ld=g.kk, ld2=1, s2=g.m * g.kk), _bias(ctx, c), g.cout * g.npix, g.m * g.npix)


def _xgemm_pointwise_applicable(c: ConvCase) -> Optional[str]:
    return xgemm_applicable(c.target) or (None if c.geom.pointwise else "not a 1x1 stride-1 unpadded conv")


def _lower_xgemm_pointwise(ctx: LowerCtx, c: ConvCase) -> list:
    """1x1 on xgemm.cl: X itself is B ([Cin/G, H*W] per image and group), no producer launch."""
    g, e = c.geom, c.epi
    a, bias, c_s1, c_s2 = _xgemm_operands(ctx, c)
    b = Operand(ctx.buf(0), ld=g.hw, ld2=1, s1=g.cin * g.hw, s2=g.cin_g * g.hw, half=_half(ctx, 0))
    res = Operand(ctx.buf(3), s1=c_s1, s2=c_s2, ld=g.npix, half=_half(ctx, 3)) if e.has_res else None
    cfg = tuned_xgemm(c.target, gemm_key(g.m, g.npix, g.kk, "inplace"), c.label)
    return [xgemm_launch(cfg, m=g.m, n=g.npix, k=g.kk, batch=g.n_img * g.groups, d2=g.groups, a=a,
                         b=b, c=Operand(ctx.out(0), ld=g.npix, s1=c_s1, s2=c_s2, half=_y_half(ctx)), bias=bias,
                         res=res, act=e.act,
                         act_alpha=e.alpha, act_beta=e.beta, label=ctx.label())]


def _lower_xgemm_im2col(ctx: LowerCtx, c: ConvCase) -> list:
    """im2col panels of NWG pixels (the tile's width: xgemm.cl B_PANEL reads one panel per
    work-group column), piece by piece, each followed by its xgemm."""
    g, e = c.geom, c.epi
    cfg = tuned_xgemm(c.target, gemm_key(g.m, g.npix, g.kk, "packed"), c.label)
    a, bias, c_s1, c_s2 = _xgemm_operands(ctx, c)
    launches: list = []
    for producer, b, i0, ni, n0, nn in pixel_panels(ctx, cfg.nwg, g, x_half=_half(ctx, 0)):
        launches.append(producer)
        off = i0 * c_s1 + n0
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2, ld=g.npix, half=_half(ctx, 3)) if e.has_res else None
        launches.append(xgemm_launch(cfg, m=g.m, n=nn, k=g.kk, batch=ni * g.groups, d2=g.groups, a=a, b=b,
                                     c=Operand(ctx.out(0), off=off, ld=g.npix, s1=c_s1, s2=c_s2, half=_y_half(ctx)),
                                     bias=bias, res=res,
                                     act=e.act, act_alpha=e.alpha, act_beta=e.beta, label=ctx.label()))
    return launches


# The implementations, best first: the first applicable one lowers the node.
CONV_PATHS = (
    ConvPath("implicit nd", nd_implicit_applicable, lower_conv_nd_implicit),  # first two: 3-D convs (the rows
    ConvPath("im2col nd", nd_applicable, lower_conv_nd),                      # below read a 2-D geometry)
    ConvPath("gpu depthwise", gpu_depthwise_applicable, lower_gpu_depthwise, gemm=False),  # lower/gpu_dwconv.py
    ConvPath("depthwise", depthwise_applicable, lower_depthwise, gemm=False),  # lower/conv_depthwise.py
    ConvPath("gemv", gemv_applicable, lower_gemv, gemm=False),  # 1x1 of a 1x1 map (lower/conv_gemv.py)
    ConvPath("winograd", _winograd_applicable, _lower_winograd),
    ConvPath("regions", regions_applicable, lower_regions, gemm=False),  # lower/conv_regions.py
    ConvPath("transposed", _transposed_applicable, _lower_transposed),
    ConvPath("xgemm pointwise", _xgemm_pointwise_applicable, _lower_xgemm_pointwise),
    ConvPath("xgemm implicit", xgemm_implicit_applicable, lower_xgemm_implicit),  # lower/gpu_conv.py
    ConvPath("gpu winograd", gpu_winograd_applicable, lower_gpu_winograd),  # tuner's choice: lower/gpu_winograd.py
    ConvPath("xgemm im2col", lambda c: xgemm_applicable(c.target), _lower_xgemm_im2col),
    ConvPath("pointwise", _pointwise_applicable, _lower_pointwise),
    ConvPath("implicit", _implicit_applicable, _lower_implicit),
    ConvPath("transposed rows", _transposed_rows_applicable, _lower_transposed_rows),  # strided; tuner-chosen
    ConvPath("im2col", lambda c: None, _lower_im2col),
)


def conv_case(ctx: LowerCtx) -> Optional[ConvCase]:
    """The node as a ConvCase, or None when its output is empty."""
    geom = nd_geometry(ctx) if len(ctx.inputs[0].shape) - 2 in ND_RANKS else conv_geometry(ctx)
    if 0 in tuple(ctx.outputs[0].shape):
        return None
    return ConvCase(ctx.device, ctx.options, geom, conv_epilogue(ctx), ctx.const(1) is not None, ctx.label())


def choose_path(case: ConvCase) -> ConvPath:
    """The first applicable implementation of CONV_PATHS for `case`."""
    for path in CONV_PATHS:
        if path.applicable(case) is None:
            return path
    raise AssertionError("CONV_PATHS ends with an implementation that is always applicable")  # pragma: no cover


# --- the tunable family (lower/tunable.py): which path a conv takes, per conv shape ----------------------
# Shape key: the ConvGeometry's fields, then the epilogue's activation, bias and residual flags
# (conv_key). Parameters: {"path": a CONV_PATHS name, "variant": "F4" | "F2" | "F4T" | "F2T" for
# Winograd (the T forms transposed for few tiles: lower/winograd_small.py), "" (F(2x2)) | "F4" for
# gpu winograd, else ""}.
# Measured as a whole node (its launches together: runtime/node_bench.py), not as one Launch.
_PATHS = {p.name: p for p in CONV_PATHS}
# the variants of the paths that have some (the first: what a point without one means)
_PATH_VARIANTS = {"winograd": tuple(VARIANTS), "gpu winograd": tuple(GPU_WINO_VARIANTS)}


def conv_key(case: ConvCase) -> Optional[tuple]:
    """The conv family's shape key of a 2-D conv with constant weights, else None (not tuned)."""
    g = case.geom
    if isinstance(g, NdGeometry) or not case.const_weights:
        return None
    return dataclasses.astuple(g) + (case.epi.act, case.epi.has_bias, case.epi.has_res)


def key_case(target: Target, key: tuple, variants: Optional[tuple] = None) -> ConvCase:
    """The ConvCase a conv family key describes, on `target` without database entries (defaults)."""
    geom = ConvGeometry(*key[:-3])
    act, has_bias, has_res = key[-3:]
    return ConvCase(dataclasses.replace(target, tuned=()), PlanOptions(), geom,
                    Epilogue(act, has_bias=bool(has_bias), has_res=bool(has_res)), True, variants=variants)


def _path_params(case: ConvCase, path: ConvPath) -> dict:
    w = case.winograd if path.name == "winograd" else None
    return {"path": path.name, "variant": variant_name(w[0]) if w is not None else ""}


def runs(case: ConvCase, p: dict) -> bool:
    """Whether the conv family's point `p` applies to `case` (its path and Winograd variant)."""
    path = _PATHS.get(str(p.get("path")))
    if path is None or path.name in ("implicit nd", "im2col nd"):
        return False
    variant = str(p.get("variant") or "")
    if variant not in _PATH_VARIANTS.get(path.name, ("",)):  # Winograd names one; gpu winograd "" or "F4"
        return False
    c = dataclasses.replace(case, variants=(variant,)) if variant else case
    return path.applicable(c) is None


def conv_space(target: Target, key: tuple) -> list:
    """Every path (and Winograd variant) that runs this conv on `target`, the default first."""
    out = [conv_default(target, key)]
    case = key_case(target, key)
    for path in CONV_PATHS:
        for variant in _PATH_VARIANTS.get(path.name, ("",)):
            p = {"path": path.name, "variant": variant}
            if p not in out and runs(case, p) and not _plain_runs(case, variant):
                out.append(p)
    return out


def _plain_runs(case: ConvCase, variant: str) -> bool:
    """Whether `variant` is a transposed Winograd form whose plain form runs the case: the
    transposed forms are searched only where the plain ones cannot (fewer tiles than a column
    tile; lower/winograd_small.py: measured slower than the plain forms wherever both ran)."""
    return variant.endswith("T") and runs(case, {"path": "winograd", "variant": variant[:-1]})


def conv_default(target: Target, key: tuple) -> dict:
    """The ranked table's choice (the first applicable path)."""
    case = key_case(target, key)
    return _path_params(case, choose_path(case))


def conv_flops(key: tuple) -> float:
    """2 x images x Cout x Cin/groups x kh x kw x output pixels of a conv family key."""
    h, w, oh, ow, kh, kw, *_rest = key
    n_img, cin, cout, groups = key[12:16]
    return 2.0 * n_img * cout * (cin // max(1, groups)) * kh * kw * oh * ow


# The kernel hash is winograd.cl's (the path most sensitive to it); a changed gemm.cl invalidates
# the gemm family's entries, which these choices sit on too.
CONV_FAMILY = register(Family("conv", "winograd", conv_space, conv_default, lambda target, key, p: None,
                              flops=conv_flops, priority=5, tolerance=1e-3))


def tuned_path(case: ConvCase) -> Optional[ConvPath]:
    """The tuning database's path for this conv (its Winograd variant set on `case`), None on a
    miss or when the stored path no longer applies: the ranked table decides then."""
    key = conv_key(case)
    if key is None:
        return None
    note_request(case.target, "conv", key)
    p = stored(case.target, "conv", key)
    if p is None or not runs(case, p):
        return None  # the ranked table's choice (recorded by _lower), not computed twice here
    record_decision(case.label, "conv", key, p, "db")
    if p.get("variant"):
        case.variants = (str(p["variant"]),)
        case.__dict__.pop("winograd", None)  # computed again for the stored variant
    return _PATHS[str(p["path"])]


def _lower(ctx: LowerCtx) -> list:
    forget(ctx.label())  # the profiler's record of this node's tuned choices starts again
    case = conv_case(ctx)
    if case is None:
        return []
    stored_ctx = ctx
    ctx, case = drop_dead_taps(ctx, case)  # exact (lower/conv_taps.py)
    path = tuned_path(case)
    if path is None:
        path = choose_path(case)
        key = conv_key(case)
        if key is not None:
            record_decision(ctx.label(), "conv", key, _path_params(case, path), "default")
    if has_half(stored_ctx) and not half_native(ctx, case, path):
        log.debug("%s: conv path %s on float32 copies", ctx.label(), path.name)
        return lower_as_float(stored_ctx, _lower)
    if path.gemm and case.epi.has_res:  # every GEMM path reads Z[i] before writing Y[i], in one work-item
        ctx.may_update(0, 3)
    log.debug("%s: conv path %s", ctx.label(), path.name)
    return path.lower(ctx, case)


@device_op("Conv", supports=supports_conv, half=_HALF_IO)
def lower_conv(ctx: LowerCtx) -> list:
    return _lower(ctx)


@device_op("FusedConv", domain="clglow", supports=supports_conv, half=_HALF_IO)
def lower_fused_conv(ctx: LowerCtx) -> list:
    return _lower(ctx)
