"""Conv and clglow FusedConv on OpenCL: implicit GEMM or im2col + GEMM, 1x1 on X in place,
direct depthwise.

FusedConv (domain "clglow", made by the fusion pass) is Y = act(conv(X, W) + B + Z): its bias,
residual and activation run in the GEMM's epilogue (gemm.cl), so a fused layer is one GEMM
launch (plus the producer of its pixel operand, if any). Plain Conv takes the same path
without residual or activation.

Paths, by what the node needs (the shape choices for CPU tiles, GemmConfig.cpu_tiles):
  depthwise (Cin/groups == 1, groups > 1)  -> dwconv.cl, one launch: dwconv_rows (8 rows x 16
                                              columns per work-item) for 3x3, 5x5 and 7x7 with
                                              stride 1 or 2, dwconv (16 columns of one row)
                                              otherwise
  1x1, stride 1, no padding                -> GEMM reading X in place as B (packed by pack_b
                                              only when N is narrower than 4 column tiles)
  other convs (implicit_ok)                -> conv_phases (im2col.cl) copies X once into
      zero-padded phase images; the GEMM reads row k of B at a per-k offset in them and stores
      only the real pixels (gemm.cl implicit flag 4)
  else                                     -> im2col.cl writes B panels into scratch -> GEMM
  few output pixels (N <= 256, gemm.transposed_config) -> transposed: Y^T = cols^T W^T with
      the pixels as the MR tile rows, read in place (X for a 1x1, phase images otherwise; flag
      8) when the output has at most 8 column tiles (implicit_rows_ok), else from im2col / pack
      panels, and the tile stored transposed (gemm.cl C_TRANS)
Weights are packed into A panels once per plan (ctx.derived). 1-D convs run as 2-D with H = 1;
3-D convs are declined by supports() and go to the host fallback.

Between two convs (LowerCtx offers, fixed by the planner, runtime/executor.py): a stride-1 conv
offers to read its input as its zero-padded phase image directly (offer_padded_in), a 1x1 conv
without residual to write its output in such a layout (offer_padded_out: the same GEMM, stored
remapped, gemm.cl opitch/ooff); where the two meet, the conv_phases copy is gone (ResNet's
bottlenecks). A FusedConv's output may take its residual's buffer (may_update).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, PaddedLayout, device_op, f32, float32_only, i32, round_up, unaligned
from .gemm import (ACTIVATIONS, Bias, GemmConfig, Implicit, Operand, act_params, b_unpacked_ok, fit_rows, gemm_config,
                   gemm_launch, pack_a, pack_b, pack_b_launch, transposed_config)
from .winograd import lower_winograd, winograd_variant

log = logging.getLogger(__name__)

# Packed operands (im2col / pack panels) are made piece by piece, each at most this large: the
# scratch buffer stays small (device memory: it is planned with the activations) and a piece is
# still in the caches when its GEMM reads it. Measured on pocl (ResNet layer1 3x3 conv, 7.2 MB
# of im2col): 3-4 MB pieces as fast as one whole image, 2 MB pieces ~10% slower.
_SCRATCH_CAP = 3 << 20


# Output rows per work-item of the KxK depthwise kernel (dwconv.cl dwconv_rows, unrolled): 16 rows
# ran MobileNet-style 0.04 ms faster than 8 but took ~3 s longer to generate at a cold start
# (11.3-11.8 s vs 8.1-9.2 s); 4 rows 0.1 ms slower.
_DW_ROWS = 8


def _pieces(n_img: int, n_panels: int, panel_bytes: int) -> tuple[list, int]:
    """Split a conv's packed operand into pieces of at most _SCRATCH_CAP bytes (at least one
    panel): whole images when one fits, else runs of panels of one image.
    Returns ([(first image, images, first panel, panels)], scratch bytes)."""
    per_img = panel_bytes * n_panels
    if per_img <= _SCRATCH_CAP:
        ni = max(1, min(n_img, _SCRATCH_CAP // per_img))
        return [(i0, min(ni, n_img - i0), 0, n_panels) for i0 in range(0, n_img, ni)], per_img * ni
    nq = max(1, _SCRATCH_CAP // panel_bytes)
    return ([(i0, 1, q0, min(nq, n_panels - q0)) for i0 in range(n_img) for q0 in range(0, n_panels, nq)],
            panel_bytes * nq)


def _pixel_panels(ctx: LowerCtx, width: int, *, n_img: int, g: int, kk: int, cin_g: int, geom: tuple,
                  pointwise: bool, label: str):
    """A conv's input as GEMM panels of `width` output pixels (K = Cin/G*KH*KW rows), made piece
    by piece into one scratch buffer: im2col, or for a 1x1 a pack of X's columns. The panels are
    B of the GEMM (width NR) or, transposed, its A (width MR). Yields (producer launch, packed
    operand, first image, images, first pixel, pixels) per piece."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    npix, hw, cin = oh * ow, h * w, cin_g * g
    x_s1, x_s2 = cin * hw, cin_g * hw
    np_ = max(round_up(npix, width), width)
    pieces, nbytes = _pieces(n_img, np_ // width, 4 * width * kk * g)
    scratch = ctx.scratch(nbytes)
    tab = None if pointwise else ctx.const_buffer(
        im2col_table(h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, np_, width))
    ly = 8 if cin_g >= 8 else 1
    for i0, ni, q0, nq in pieces:
        p0, pn = q0 * width, min(nq * width, npix - q0 * width)
        pstride = nq * width * kk  # packed elements per (image, group) in the scratch
        if pointwise:
            producer = pack_b_launch(width, src=ctx.buf(0), off=i0 * x_s1 + p0, s1=x_s1, s2=x_s2, s_k=hw,
                                     s_n=1, k=kk, n=pn, batch=ni * g, d2=g, dst=scratch, label=label)
        else:  # panels q0 .. q0+nq-1 of the table into panels 0 .. nq-1 of the scratch
            head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1), i32(x_s2), i32(g), tab, scratch,
                    i32(pstride), i32(hw), i32(kh * kw), i32(np_)]
            producer = Launch("im2col", "im2col", (nq, round_up(cin_g, ly), ni * g),
                              head + [i32(cin_g), i32(q0)], (1, ly, 1), {"NR": width}, label,
                              noop_args=head + [i32(0), i32(q0)])  # Cg = 0: returns at once
        yield producer, Operand(scratch, packed=True, s1=g * pstride, s2=pstride), i0, ni, p0, pn
_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_FLT_MAX = 3.4028234663852886e38


def _str(v, default: str = "") -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _spatial_rank(node: Node, graph: Graph) -> Optional[int]:
    for name in (node.input(1), node.input(0)):
        v = graph.values.get(name) if name else None
        if v is not None and v.shape is not None:
            return len(v.shape) - 2
    ks = node.attrs.get("kernel_shape")
    return len(ks) if ks is not None else None


def supports_conv(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 1-D and 2-D convolutions with any pads/strides/dilations/groups/auto_pad."""
    why = float32_only(node, graph)
    if why:
        return why
    rank = _spatial_rank(node, graph)
    if rank is not None and rank not in (1, 2):
        return f"{rank}-D convolution: the OpenCL kernels cover 1-D and 2-D"
    ap = _str(node.attrs.get("auto_pad"), "NOTSET")
    if ap not in _AUTO_PADS:
        return f"auto_pad={ap!r} is not one of {', '.join(_AUTO_PADS)}"
    act = _str(node.attrs.get("activation"), "")
    if act not in ACTIVATIONS:
        return f"fused activation {act!r} is not one of {sorted(a for a in ACTIVATIONS if a)}"
    return None


def _resolve_pads(ctx: LowerCtx, in_sp: tuple, k_sp: tuple, strides: tuple, dil: tuple) -> tuple:
    """(begin pads, output spatial shape) after auto_pad, as ONNX defines them."""
    nd = len(in_sp)
    ap = _str(ctx.attr("auto_pad"), "NOTSET")
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        begins, outs = [], []
        for i in range(nd):
            out = -(-in_sp[i] // strides[i])
            total = max((out - 1) * strides[i] + (k_sp[i] - 1) * dil[i] + 1 - in_sp[i], 0)
            begins.append(total // 2 if ap == "SAME_UPPER" else total - total // 2)
            outs.append(out)
        return tuple(begins), tuple(outs)
    pads = list(ctx.attr("pads", None) or [0] * (2 * nd)) if ap == "NOTSET" else [0] * (2 * nd)
    if len(pads) != 2 * nd:
        raise InvalidModel(f"Conv pads {pads} do not match {nd} spatial dims", node=ctx.label())
    outs = []
    for i in range(nd):
        span = in_sp[i] + pads[i] + pads[i + nd] - ((k_sp[i] - 1) * dil[i] + 1)
        outs.append(span // strides[i] + 1 if span >= 0 else 0)
    return tuple(pads[:nd]), tuple(outs)


def _epilogue(ctx: LowerCtx) -> tuple:
    """(activation name, act_alpha, act_beta) from FusedConv attributes (plain Conv: none)."""
    act = _str(ctx.attr("activation"), "")
    if act not in ACTIVATIONS:
        raise InvalidModel(f"unsupported fused activation {act!r}", node=ctx.label())
    defaults = {"Clip": (-_FLT_MAX, _FLT_MAX), "LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5)}
    da, db = defaults.get(act, (0.0, 0.0))
    a, b = ctx.attr("alpha", None), ctx.attr("beta", None)
    return act, float(da if a is None else a), float(db if b is None else b)


def panel_vector_width(nr: int) -> int:
    """The vector width im2col.cl stores panels with (its PV), for panels of `nr` columns."""
    return next(v for v in (16, 8, 4, 1) if nr % v == 0)


def im2col_table(h: int, w: int, oh: int, ow: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int,
                 dh: int, dw: int, np_: int, nr: int) -> np.ndarray:
    """The index table of im2col.cl, int32, two parts:

    [KH*KW, Np]: input offset ih*W + iw read by tap r at output pixel n, -1 for padding;
    [KH*KW, Np/PV]: for each run of PV columns (PV = panel_vector_width(nr)), the offset s of its
    first element when the run reads PV consecutive inputs (no padding: one vector load),
    -(s + 2) when it reads every other input from s (a stride-2 conv: two loads, even lanes),
    else -1.
    The flags are computed here because no cheap test in the kernel is exact: with stride 1 a
    run across a padded row edge can start and end exactly PV-1 elements apart."""
    n = np.arange(np_)
    o_h, o_w = n // ow, n % ow
    r = np.arange(kh * kw)
    ih = o_h[None, :] * sh - ph + (r // kw)[:, None] * dh
    iw = o_w[None, :] * sw - pw + (r % kw)[:, None] * dw
    ok = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w) & (n < oh * ow)[None, :]
    tab = np.where(ok, ih * w + iw, -1).astype(np.int32)
    pv = panel_vector_width(nr)
    runs = tab.reshape(kh * kw, np_ // pv, pv)
    start = runs[..., 0]
    contiguous = (start >= 0) & np.all(runs - runs[..., :1] == np.arange(pv), axis=-1)
    # stride-2 runs (strided convs) read 2*PV consecutive inputs and keep the even ones; only
    # where those stay inside the channel's plane (never past the end of the tensor)
    every_other = ((start >= 0) & np.all(runs - runs[..., :1] == 2 * np.arange(pv), axis=-1)
                   & (start + 2 * pv <= h * w) & (pv > 1))
    fast = np.where(contiguous, start, np.where(every_other, -(start + 2), -1)).astype(np.int32)
    return np.concatenate([tab.ravel(), fast.ravel()])


@device_op("Conv", supports=supports_conv)
def lower_conv(ctx: LowerCtx) -> list:
    return _lower(ctx)


@device_op("FusedConv", domain="clglow", supports=supports_conv)
def lower_fused_conv(ctx: LowerCtx) -> list:
    return _lower(ctx)


def _lower(ctx: LowerCtx) -> list:
    xs, ws = tuple(ctx.inputs[0].shape), tuple(ctx.inputs[1].shape)
    label = ctx.label()
    if len(xs) not in (3, 4) or len(ws) != len(xs):
        raise InvalidModel(f"Conv of X {xs} with W {ws}: the OpenCL path takes 1-D and 2-D convs",
                           node=label)
    nd = len(xs) - 2
    n_img, cin = xs[:2]
    cout, cin_g = ws[:2]
    k_sp = tuple(ctx.attr("kernel_shape", None) or ws[2:])
    if tuple(k_sp) != tuple(ws[2:]):
        raise InvalidModel(f"kernel_shape {list(k_sp)} differs from W's shape {ws}", node=label)
    g = int(ctx.attr("group", 1))
    if g < 1 or cin != cin_g * g or cout % g != 0:
        raise InvalidModel(f"group={g} does not fit X {xs} and W {ws}", node=label)
    strides = tuple(ctx.attr("strides", None) or (1,) * nd)
    dil = tuple(ctx.attr("dilations", None) or (1,) * nd)
    if len(strides) != nd or len(dil) != nd or min(strides) < 1 or min(dil) < 1:
        raise InvalidModel(f"bad strides {strides} / dilations {dil}", node=label)
    begins, o_sp = _resolve_pads(ctx, xs[2:], k_sp, strides, dil)
    out_shape = tuple(ctx.outputs[0].shape)
    if out_shape != (n_img, cout) + o_sp:
        raise InvalidModel(f"Conv output shape {out_shape} differs from the computed "
                           f"{(n_img, cout) + o_sp}", node=label)
    if 0 in out_shape:
        return []
    # 1-D as 2-D with a height of 1.
    if nd == 1:
        h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = (1, xs[2], 1, k_sp[0], 1, strides[0], 0,
                                                        begins[0], 1, dil[0], 1, o_sp[0])
    else:
        (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = xs[2:], k_sp, strides, begins, dil, o_sp
    act, act_a, act_b = _epilogue(ctx)
    has_bias = ctx.has_input(2) and bool(ctx.node.input(2))
    has_res = ctx.has_input(3) and bool(ctx.node.input(3))
    if has_res and tuple(ctx.inputs[3].shape) != out_shape:
        raise InvalidModel(f"FusedConv residual {ctx.inputs[3].shape} differs from output {out_shape}",
                           node=label)

    if cin_g == 1 and g > 1:
        act_code, act_p = act_params(act, act_a, act_b)
        defines = {"DW_T": 16, "HAS_BIAS": int(has_bias), "HAS_RES": int(has_res)}
        if act_code:
            defines["ACT"] = act_code
        args: list = [ctx.buf(0), ctx.buf(1)]
        if has_bias:
            args.append(ctx.buf(2))
        if has_res:
            args.append(ctx.buf(3))
        head = args + [ctx.out(0), i32(cin), i32(h), i32(w), i32(cout)]
        tail = [i32(v) for v in (kh, kw, sh, sw, ph, pw, dh, dw, cout // cin)] + [f32(p) for p in act_p]
        args = head + [i32(oh), i32(ow)] + tail
        noop = head + [i32(0), i32(0)] + tail  # OH = OW = 0: returns at once (code generated early)
        if kh == kw and kh in (3, 5, 7) and dh == dw == 1 and sh == sw and sh in (1, 2):
            # The usual depthwise KxK (stride 1 or 2): _DW_ROWS output rows x 16 columns per
            # work-item, each input row loaded once for the output rows it serves.
            # MobileNet-style on pocl (AVX-512), A/B in one process: its 7 depthwise layers
            # 1.20 -> 0.49 ms (the 14x14 one 0.22 -> 0.063, the stride-2 112 -> 56 one 0.19 ->
            # 0.10); groups of 2 work-items slower than 1.
            dw3 = dict(defines, DW_S=sh, DW_K=kh, DW_RT=_DW_ROWS)
            del dw3["DW_T"]
            return [Launch("dwconv", "dwconv_rows", (-(-ow // 16), -(-oh // _DW_ROWS), n_img * cout), args,
                           (1, 1, 1), dw3, label, noop_args=noop)]
        # 8 output rows per work-group (the kernel skips rows past OH): pocl pays per group, and
        # left to itself it picked groups of a single work-item for most layer shapes
        return [Launch("dwconv", "dwconv", (-(-ow // 16), round_up(oh, 8), n_img * cout), args, (1, 8, 1), defines,
                       label, noop_args=noop)]

    if has_res:  # every GEMM path reads Z[i] before writing Y[i], in one work-item (gemm.cl)
        ctx.may_update(0, 3)
    cfg = gemm_config(ctx.device)
    m, kk, npix = cout // g, cin_g * kh * kw, oh * ow
    hw = h * w
    pointwise = kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and (oh, ow) == (h, w)
    tcfg = transposed_config(cfg, m, npix) if ctx.const(1) is not None else None
    geom = (h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    if (tcfg is not None and pointwise and b_unpacked_ok(cfg, npix)
            and not implicit_rows_ok(tcfg, geom, pointwise, m)):
        # A 1x1 whose transposed form would pack X (many output channels): X read in place as
        # B instead, its ragged last column tile overlapping. ResNet-50's 14x14 1024-channel
        # convs (224 columns computed for 196 pixels), A/B on pocl: 0.1-0.3 ms faster per image
        # than packed and stored transposed, 6 launches fewer.
        tcfg = None
    wino = winograd_variant(cfg, geom, g, cin_g, m) if ctx.const(1) is not None else None
    if wino is not None:
        return lower_winograd(ctx, *wino, n_img=n_img, cin=cin, m=m, geom=geom, has_bias=has_bias,
                              has_res=has_res, act=(act, act_a, act_b))
    cfg = _fit_tiles(cfg, m, geom, pointwise)
    if tcfg is not None:
        return _lower_transposed(ctx, tcfg, n_img=n_img, cin=cin, cin_g=cin_g, g=g, m=m, kk=kk,
                                 geom=geom, pointwise=pointwise,
                                 has_bias=has_bias, has_res=has_res, act=(act, act_a, act_b))
    if ctx.const(1) is not None:
        a = Operand(ctx.derived(1, f"convA{cfg.mr}g{g}",
                                lambda wt: pack_a(np.asarray(wt, np.float32).reshape(g, m, kk), cfg.mr)),
                    packed=True, s2=max(round_up(m, cfg.mr), cfg.mr) * kk)
    else:
        a = Operand(ctx.buf(1), ld=kk, ld2=1, s2=m * kk)
    bias = Bias(ctx.buf(2), sm=1, sn=0, s2=m) if has_bias else None
    c_s1, c_s2 = cout * npix, m * npix
    x_s1, x_s2 = cin * hw, cin_g * hw

    launches: list = []
    # 1x1: the GEMM reads X in place. Measured on pocl (AVX-512) with the current kernel: within
    # 5% of packed panels (e.g. 64x3136x256: 424 vs 433 GFLOP/s), while the pack costs a
    # launch and a pass over X (0.1 ms for ResNet's layer1 conv1).
    if pointwise and b_unpacked_ok(cfg, npix):
        ctx.offer_padded_out = g == 1 and not has_res
        if ctx.out_layout is not None:
            # Y straight into the next conv's zero-padded input: the same GEMM read as an
            # implicit one over X (row k at k*H*W, no padding columns), stored remapped.
            koff = ctx.const_buffer((np.arange(cin_g) * hw).astype(np.int32))
            c, pitch, ooff = _padded_output(ctx, m=m, g=g)
            return [gemm_launch(cfg, m=m, n=npix, k=kk, batch=n_img, d2=1, a=a,
                                b=Operand(ctx.buf(0), s1=x_s1, s2=x_s2), c=c, bias=bias, act=act,
                                act_alpha=act_a, act_beta=act_b, implicit=Implicit(koff, w, w, pitch, ooff),
                                label=label)]
        # 1x1: B is X itself, [Cin_g, H*W] per (image, group).
        b = Operand(ctx.buf(0), ld=hw, s1=x_s1, s2=x_s2)
        res = Operand(ctx.buf(3), s1=c_s1, s2=c_s2) if has_res else None
        return [gemm_launch(cfg, m=m, n=npix, k=kk, batch=n_img * g, d2=g, a=a, b=b,
                            c=Operand(ctx.out(0), ld=npix, s1=c_s1, s2=c_s2), bias=bias, res=res,
                            act=act, act_alpha=act_a, act_beta=act_b, label=label)]

    if not pointwise and implicit_ok(cfg, geom):
        return _lower_implicit(ctx, cfg, n_img=n_img, cin=cin, cin_g=cin_g, g=g, m=m, kk=kk, geom=geom,
                               a=a, bias=bias, has_res=has_res, act=(act, act_a, act_b))
    for producer, b, i0, ni, n0, nn in _pixel_panels(ctx, cfg.nr, n_img=n_img, g=g, kk=kk, cin_g=cin_g,
                                                     geom=geom, pointwise=pointwise, label=label):
        launches.append(producer)
        off = i0 * c_s1 + n0
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2) if has_res else None
        launches.append(gemm_launch(cfg, m=m, n=nn, k=kk, batch=ni * g, d2=g, a=a, b=b,
                                    c=Operand(ctx.out(0), off=off, ld=npix, s1=c_s1, s2=c_s2),
                                    bias=bias, res=res, act=act, act_alpha=act_a, act_beta=act_b,
                                    label=label))
    return launches


def _fit_tiles(cfg: GemmConfig, m: int, geom: tuple, pointwise: bool) -> GemmConfig:
    """The tiles of a non-transposed conv GEMM: fit_rows over the columns its path computes
    (the padded-linear pixels of an implicit GEMM), keeping the config's path (X in place,
    implicit) where the narrower tiles would lose it."""
    npix = geom[2] * geom[3]
    if pointwise:
        fit = fit_rows(cfg, m, npix)
        return fit if b_unpacked_ok(fit, npix) == b_unpacked_ok(cfg, npix) else cfg
    if implicit_ok(cfg, geom):
        fit = fit_rows(cfg, m, geom[2] * phase_geometry(geom)[3])
        return fit if implicit_ok(fit, geom) else cfg
    return fit_rows(cfg, m, npix)


# An implicit GEMM computes OH x WPH padded-linear columns for OH x OW pixels: taken while that
# wastes at most this fraction more than im2col's column tiles (ResNet-50, 32-column tiles:
# 56x56 2.0%, 28x28 and the stride-2 56 -> 28 4.0%, the 7x7/2 stem 1.8%; its 14x14 layers
# take the transposed GEMM first).
_IMPLICIT_WASTE = 0.10


def _phases_read(k: int, d: int, s: int) -> Optional[int]:
    """How many phases along one axis the taps read, when they are phases 0..n-1 (else None):
    tap i reads phase (i*d) % s. All of them for the usual strided kxk conv, one for a 1x1."""
    used = {i * d % s for i in range(k)}
    return len(used) if used == set(range(len(used))) else None


def phase_geometry(geom: tuple) -> tuple:
    """(phases along H, along W, HPH, WPH) of the implicit GEMM's phase images (see
    im2col.cl conv_phases): output pixel (y, x) reads tap (ky, kx) at row y + ky*dh // sh,
    column x + kx*dw // sw of phase ((ky*dh) % sh, (kx*dw) % sw); only the phases some tap
    reads are made (see implicit_ok).

    Row pitch WPH: the columns an output row touches, [0, OW + KW' - 1) with KW' the taps per
    phase, less the left padding columns every phase has: a read past a row's end lands in the
    next row's left padding, zeros like the right padding it stands for (3x3/1 at 56x56: a pitch
    of 57, not 58; 1.8% of the GEMM's columns are padding). HPH has one extra row for the last
    row's wrap (written by conv_phases like any other)."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    nh, nw = _phases_read(kh, dh, sh) or sh, _phases_read(kw, dw, sw) or sw
    lo = min(max(0, -(-(pw - px) // sw)) for px in range(nw))  # leading padding columns
    hi = max((w - 1 + pw - px) // sw + 1 for px in range(nw))   # end of the data columns
    wph = max(hi, ow + (kw - 1) * dw // sw - lo)
    return nh, nw, oh + (kh - 1) * dh // sh + 1, wph


def implicit_ok(cfg: GemmConfig, geom: tuple) -> bool:
    """Whether a (non-pointwise) conv runs as an implicit GEMM over phase images instead of
    im2col: the taps read phases 0..n-1 along each axis (every phase of a kxk stride-k conv,
    the first of a strided 1x1), at least one column tile, and little waste on the padding
    columns."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    if not cfg.cpu_tiles:  # GPUs keep im2col until measured there
        return False
    if _phases_read(kh, dh, sh) is None or _phases_read(kw, dw, sw) is None:
        return False
    _, _, _, wph = phase_geometry(geom)
    ncols = oh * wph
    if ncols < cfg.nr:
        return False
    return round_up(ncols, cfg.nr) <= (1 + _IMPLICIT_WASTE) * round_up(oh * ow, cfg.nr)


def implicit_offsets(cin_g: int, geom: tuple) -> np.ndarray:
    """koff[k] for k = (ci, ky, kx) (the weights' [Cin/G, KH, KW] order): where row k of the
    implicit B starts in one group's phase images ([ci][phase][HPH][WPH])."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    nh, nw, hph, wph = phase_geometry(geom)
    plane = hph * wph
    ky, kx = np.arange(kh)[:, None] * dh, np.arange(kw)[None, :] * dw
    tap = ((ky % sh) * nw + kx % sw) * plane + (ky // sh) * wph + kx // sw  # [KH, KW]
    ci = np.arange(cin_g)[:, None, None] * (nh * nw * plane)
    return (ci + tap[None]).astype(np.int32).ravel()


def _padded_output(ctx: LowerCtx, *, m: int, g: int) -> tuple:
    """(C operand, row pitch, offset of pixel (0, 0)) for writing Y in the PaddedLayout the
    planner fixed for it (ctx.out_layout): planes of rows x pitch, one image after another."""
    lay = ctx.out_layout
    if lay is None or g != 1:
        raise InvalidModel("a padded output needs a single-group conv", node=ctx.label())
    cout = m * g
    return (Operand(ctx.out(0), ld=lay.plane, s1=cout * lay.plane, s2=m * lay.plane), lay.pitch,
            lay.top * lay.pitch + lay.left)


def _phase_pieces(ctx: LowerCtx, *, n_img: int, cin: int, cin_g: int, geom: tuple, slack: int):
    """The input of an implicit GEMM: X copied into zero-padded phase images (conv_phases, about
    1.1 x X where im2col writes KH*KW x X), images in pieces within the scratch cap. A stride-1
    1x1 conv reads X itself (no copy, one piece). Yields (producer launch or None, pixel operand
    (stride per image and per group), offset table, WPH, first image, images)."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    label = ctx.label()
    if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0) and (oh, ow) == (h, w):
        koff = ctx.const_buffer((np.arange(cin_g) * (h * w)).astype(np.int32))
        yield None, Operand(ctx.buf(0), s1=cin * h * w, s2=cin_g * h * w), koff, w, 0, n_img
        return
    nh, nw, hph, wph = phase_geometry(geom)
    per_img = cin * nh * nw * hph * wph  # floats of one image's phase images
    x_s1 = cin * h * w
    koff = ctx.const_buffer(implicit_offsets(cin_g, geom))
    if nh == nw == 1 and cin_g == cin:
        # One phase image per channel (a stride-1 conv): its producer may write X padded like
        # that in the first place (PaddedLayout), and then there is nothing to copy.
        layout = PaddedLayout(hph, wph, ph, pw, slack)
        ctx.offer_padded_in = layout
        if ctx.in_layout is not None:
            if ctx.in_layout != layout:
                raise InvalidModel(f"padded input {ctx.in_layout} differs from the conv's {layout}",
                                   node=label)
            yield None, Operand(ctx.buf(0), s1=per_img, s2=per_img), koff, wph, 0, n_img
            return
    pieces, nbytes = _pieces(n_img, 1, 4 * per_img)
    scratch = ctx.scratch(nbytes + 4 * slack)
    for i0, ni, _, _ in pieces:
        tail = [i32(h), i32(w), scratch, i32(per_img), i32(hph), i32(wph), i32(sh), i32(sw), i32(ph), i32(pw),
                i32(nh), i32(nw)]
        head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1)]
        producer = Launch("im2col", "conv_phases", (-(-hph // 8), round_up(cin * nh * nw, 16), ni),
                          head + [i32(cin)] + tail, (1, 16, 1), {}, label,
                          noop_args=head + [i32(0)] + tail)  # Cin = 0: returns at once
        yield producer, Operand(scratch, s1=per_img, s2=cin_g * nh * nw * hph * wph), koff, wph, i0, ni


def _lower_implicit(ctx: LowerCtx, cfg: GemmConfig, *, n_img: int, cin: int, cin_g: int, g: int, m: int,
                    kk: int, geom: tuple, a: Operand, bias: Optional[Bias], has_res: bool, act: tuple) -> list:
    """Implicit GEMM: the GEMM reads B rows as shifted runs of the phase images through a K-entry
    offset table and stores only the real pixels (gemm.cl implicit flag)."""
    oh, ow = geom[2:4]
    label = ctx.label()
    npix, cout = oh * ow, m * g
    c_s1, c_s2 = cout * npix, m * npix
    act_name, act_a, act_b = act
    launches: list = []
    # slack: the last tile's padding columns read up to WPH floats past the last phase image
    for producer, b, koff, wph, i0, ni in _phase_pieces(ctx, n_img=n_img, cin=cin, cin_g=cin_g, geom=geom,
                                                        slack=phase_geometry(geom)[3] + cfg.nr):
        if producer is not None:  # None: X is already the padded image (PaddedLayout)
            launches.append(producer)
        off = i0 * c_s1
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2) if has_res else None
        launches.append(gemm_launch(cfg, m=m, n=oh * wph, k=kk, batch=ni * g, d2=g, a=a, b=b,
                                    c=Operand(ctx.out(0), off=off, ld=npix, s1=c_s1, s2=c_s2), bias=bias,
                                    res=res, act=act_name, act_alpha=act_a, act_beta=act_b,
                                    implicit=Implicit(koff, wph, ow), label=label))
    return launches


def implicit_rows_ok(cfg: GemmConfig, geom: tuple, pointwise: bool, m: int) -> bool:
    """Whether a transposed conv (pixels as the MR rows) reads its pixels in place: a 1x1 conv
    X itself (no pack), others the phase images (as implicit_ok). The rows are the output
    pixels themselves, each read through its own pointer (gemm.cl flag 8), so the phase
    images' padding columns cost no FMAs (ResNet-50's 14x14 3x3s: 196 rows, where padded-linear
    rows were 14 x 15 = 210).

    Only for at most 8 column tiles of output channels (`m`): read in place, a pixel tile
    costs a cache line per k where its packed panel costs MR floats, paid again for every
    column tile. Measured in ResNet-50 on pocl: 256-channel layers faster in place (1x1 conv1
    0.280 -> 0.260 ms with its pack, 3x3 0.595 -> 0.570 with im2col), 1024- and 2048-channel
    ones slower (conv3 0.31 -> 0.34 ms, layer4 1x1s +0.03..0.06 ms). Walking the column tiles
    first was slower still (weight panels streamed once per pixel tile)."""
    h, w, oh, ow = geom[:4]
    if not cfg.cpu_tiles or oh * ow < cfg.mr or m > 8 * cfg.nr:
        return False
    if pointwise:
        return True
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    return _phases_read(kh, dh, sh) is not None and _phases_read(kw, dw, sw) is not None


def _lower_transposed(ctx: LowerCtx, cfg: GemmConfig, *, n_img: int, cin: int, cin_g: int, g: int, m: int,
                      kk: int, geom: tuple, pointwise: bool, has_bias: bool, has_res: bool,
                      act: tuple) -> list:
    """Small-N convs (few output pixels) as Y^T = cols^T @ W^T: the pixels are the GEMM's MR rows,
    read in place (X for a 1x1, else phase images; gemm.cl flag 8) or from im2col panels of MR
    pixels, the weights packed once into NR output-channel panels, and the tile stored
    transposed (gemm.cl C_TRANS)."""
    oh, ow = geom[2:4]
    label = ctx.label()
    npix, cout = oh * ow, m * g
    mp = max(round_up(m, cfg.nr), cfg.nr)
    b = Operand(ctx.derived(1, f"convBT{cfg.nr}g{g}",
                            lambda wt: pack_b(np.asarray(wt, np.float32).reshape(g, m, kk).swapaxes(-1, -2),
                                              cfg.nr)),
                packed=True, s2=mp * kk)
    bias = Bias(ctx.buf(2), sm=0, sn=1, s2=m) if has_bias else None
    c_s1, c_s2 = cout * npix, m * npix
    act_name, act_a, act_b = act

    def gemm(a: Operand, i0: int, ni: int, p0: int, pn: int) -> Launch:
        off = i0 * c_s1 + p0  # C^T: pixels are the rows, stored contiguously per channel
        res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2) if has_res else None
        return gemm_launch(cfg, m=pn, n=m, k=kk, batch=ni * g, d2=g, a=a, b=b,
                           c=Operand(ctx.out(0), off=off, ld=npix, s1=c_s1, s2=c_s2), bias=bias,
                           res=res, act=act_name, act_alpha=act_a, act_beta=act_b, c_trans=True,
                           label=label)

    launches: list = []
    if implicit_rows_ok(cfg, geom, pointwise, m):
        # A read in place: X itself for a 1x1 (one launch, no pack), else the phase images.
        oh, ow = geom[2:4]
        for producer, a, koff, wph, i0, ni in _phase_pieces(ctx, n_img=n_img, cin=cin, cin_g=cin_g, geom=geom,
                                                            slack=phase_geometry(geom)[3] + cfg.mr):
            if producer is not None:
                launches.append(producer)
            off = i0 * c_s1
            res = Operand(ctx.buf(3), off=off, s1=c_s1, s2=c_s2) if has_res else None
            c, pitch, ooff = Operand(ctx.out(0), off=off, ld=npix, s1=c_s1, s2=c_s2), None, 0
            if pointwise:
                ctx.offer_padded_out = g == 1 and not has_res
                if ctx.out_layout is not None:  # Y straight into the next conv's padded input
                    c, pitch, ooff = _padded_output(ctx, m=m, g=g)
            launches.append(gemm_launch(cfg, m=oh * ow, n=m, k=kk, batch=ni * g, d2=g, a=a, b=b,
                                        c=c, bias=bias, res=res, act=act_name, act_alpha=act_a, act_beta=act_b,
                                        c_trans=True, implicit=Implicit(koff, wph, ow, pitch, ooff), label=label))
        return launches
    # Else the pixel panels of A: im2col panels of MR pixels (the waste of the padding rows of
    # phase images too high, or a GPU).
    for producer, a, i0, ni, p0, pn in _pixel_panels(ctx, cfg.mr, n_img=n_img, g=g, kk=kk, cin_g=cin_g,
                                                     geom=geom, pointwise=pointwise, label=label):
        launches.append(producer)
        launches.append(gemm(a, i0, ni, p0, pn))
    return launches
