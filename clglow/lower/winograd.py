"""Winograd F(2x2, 3x3) for stride-1 3x3 convolutions: 2.25x fewer multiplies than the GEMM.

Each 2x2 block of output pixels ("tile") comes from a 4x4 input patch; the 3x3 filter is
transformed once at plan time into 16 matrices U[xi] (Cout x Cin), the patches by wino_in into
16 matrices V[xi] (Cin x tiles) written straight as gemm.cl's B panels, and one batched GEMM
launch computes M[xi] = U[xi] @ V[xi] for every image and xi; wino_out folds the 16 products of
each tile back into its 2x2 pixels and applies the conv's epilogue (bias, residual, activation).
Three launches per conv (per piece of images), kernels_cl/winograd.cl.

Taken (winograd_ok) on CPU tiles for single-group 3x3 stride-1 undilated convs with at least 16
input and output channels and at least 4 column tiles of output tiles per image (ResNet-50's
56x56 and 28x28 layers; its 14x14 and 7x7 ones keep the transposed GEMM: few tiles per image,
and there U's 16/9 more weight bytes stream from memory every run). The transforms' rounding:
G has entries 1/2 and A, B entries +-1, so the result differs from the direct sum by a few ulps
of the intermediate sums (ResNet-50 end to end: within the same 1e-4 of onnx.reference).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import config
from .base import Launch, LowerCtx, f32, i32, round_up, unaligned
from .gemm import GemmConfig, Operand, act_params, b_unpacked_ok, fit_rows, gemm_launch, pack_a

# V and M bytes of one piece, per image of the batch (the memory target allows scratch in
# proportion to the activations): ResNet-50's 56x56 64-channel layer has 6.5 MB per image and
# runs in two pieces of 14 tile rows at batch 1 (arena 8.6 MB as without Winograd, where one
# piece made it 11.6), in pieces of 4 images at batch 8.
_PIECE_CAP = 4 << 20

# winograd.cl WINO_ROW: floats per row of wino_in's private buffer of 4 input rows (images up
# to ~490 columns wide).
_WINO_ROW = 512

# G of F(2x2, 3x3): U = G g G^T.
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def winograd_ok(cfg: GemmConfig, geom: tuple, g: int, cin_g: int, m: int) -> bool:
    """Whether a conv runs as Winograd F(2x2, 3x3) (see the module docstring)."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    if not cfg.cpu_tiles or not config.winograd():
        return False
    if (kh, kw, sh, sw, dh, dw) != (3, 3, 1, 1, 1, 1) or g != 1 or cin_g < 16 or m < 16:
        return False
    tw = -(-ow // 2)
    if max(pw + w, 2 * round_up(tw, 8)) + 18 > _WINO_ROW:  # wino_in's private row buffer
        return False
    nt = -(-oh // 2) * tw
    return nt >= 4 * cfg.nr and b_unpacked_ok(fit_rows(cfg, m, nt), nt)


def winograd_filter(w: np.ndarray) -> np.ndarray:
    """[Cout, Cin, 3, 3] -> U [16, Cout, Cin] (xi = 4 * row + column of G g G^T), computed in
    float64 and rounded once."""
    u = np.einsum("ak,oikl,bl->aboi", _G, np.asarray(w, np.float64), _G)
    return u.reshape(16, *u.shape[2:]).astype(np.float32)


def _pieces(n_img: int, th: int, tw: int, per_row: int, min_rows: int) -> list:
    """[(first image, images, first tile row, tile rows)]: whole images while their V and M fit
    the cap (_PIECE_CAP per image of the batch), else each image in runs of tile rows (at least
    `min_rows`, so the GEMM's B stays wide enough to read in place)."""
    cap, per_img = _PIECE_CAP * n_img, per_row * th
    if per_img <= cap:
        ni = max(1, min(n_img, cap // per_img))
        return [(i0, min(ni, n_img - i0), 0, th) for i0 in range(0, n_img, ni)]
    n = min(-(-per_img // cap), max(1, th // min_rows))  # balanced runs, none below min_rows
    rows = -(-th // n)
    return [(i, 1, r0, min(rows, th - r0)) for i in range(n_img) for r0 in range(0, th, rows)]


def lower_winograd(ctx: LowerCtx, cfg: GemmConfig, *, n_img: int, cin: int, m: int, geom: tuple,
                   has_bias: bool, has_res: bool, act: tuple) -> list:
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    th, tw = -(-oh // 2), -(-ow // 2)
    cfg = fit_rows(cfg, m, th * tw)
    label = ctx.label()
    a = Operand(ctx.derived(1, f"winoU{cfg.mr}", lambda wt: pack_a(winograd_filter(wt), cfg.mr)),
                packed=True, s2=max(round_up(m, cfg.mr), cfg.mr) * cin)
    pieces = _pieces(n_img, th, tw, 64 * (cin + m) * tw, -(-4 * cfg.nr // tw))
    # per piece, floats per image: V's rows on cache lines with 8 tiles of slack (wino_in's last
    # segment), M's rows the piece's tiles
    sizes = [(round_up(rows * tw + 8, 16), rows * tw) for _, _, _, rows in pieces]
    vs = ctx.scratch(4 * max(16 * ldv * cin * ni for (ldv, _), (_, ni, _, _) in zip(sizes, pieces)))
    ms = ctx.scratch(4 * (max(16 * m * nt * ni for (_, nt), (_, ni, _, _) in zip(sizes, pieces)) + 8))  # + wino_out's slack
    act_name, act_a, act_b = act
    act_code, act_p = act_params(act_name, act_a, act_b)
    defines = {"ACT": act_code} if act_code else {}
    x_s1, y_s1 = cin * h * w, m * oh * ow
    flags = (1 if has_bias else 0) | (2 if has_res else 0)
    bias_arg = ctx.buf(2) if has_bias else ctx.out(0)  # absent: the flags say so, never read
    z_arg = ctx.buf(3) if has_res else ctx.out(0)
    nseg = -(-tw // 8)  # wino_out's work-items take 8 tiles of a tile row (winograd.cl)
    launches: list = []
    for (i0, k, ty0, rows), (ldv, nt) in zip(pieces, sizes):
        per_v, per_m = 16 * ldv * cin, 16 * m * nt
        head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1)]
        tail = [i32(h), i32(w), i32(ph), i32(pw), i32(tw), i32(ty0), i32(rows), i32(ldv), vs, i32(per_v)]
        launches.append(Launch("winograd", "wino_in", (k * cin,), head + [i32(cin)] + tail,
                               (1,), {}, label, noop_args=head + [i32(0)] + tail))  # Cin = 0: no-op
        launches.append(gemm_launch(cfg, m=m, n=nt, k=cin, batch=k * 16, d2=16, a=a,
                                    b=Operand(vs, ld=ldv, s1=per_v, s2=ldv * cin),
                                    c=Operand(ms, ld=nt, s1=per_m, s2=m * nt), label=label))
        head = [ms, i32(per_m)]
        tail = [i32(tw), i32(ty0), i32(rows), i32(oh), i32(ow), unaligned(ctx.out(0)), i32(i0 * y_s1), i32(y_s1),
                bias_arg, unaligned(z_arg), i32(flags)] + [f32(p) for p in act_p]
        launches.append(Launch("winograd", "wino_out", (nseg, round_up(rows, 4), k * m), head + [i32(m)] + tail,
                               (1, 4, 1), defines, label, noop_args=head + [i32(0)] + tail))  # Cout = 0
    return launches
