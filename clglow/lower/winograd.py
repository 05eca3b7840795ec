"""Winograd F(2x2, 3x3) and F(4x4, 3x3) for stride-1 3x3 convolutions: 2.25x and 4x fewer
multiplies than the GEMM.

Each m x m block of output pixels ("tile") comes from an (m + 2)^2 input patch; the 3x3 filter
is transformed once at plan time into alpha^2 matrices U[xi] (Cout x Cin, alpha = m + 2), the
patches by the input transform into alpha^2 matrices V[xi] (Cin x tiles), and one batched GEMM
launch (gemm.cl, B read in place) computes M[xi] = U[xi] @ V[xi] for every image and xi; the
output transform folds the alpha^2 products of each tile back into its pixels and applies the
conv's epilogue (bias, residual, activation). Three launches per conv (per piece of images or of
tile rows, the scratch capped), kernels_cl/winograd.cl.

Taken (winograd_variant; lower/conv.py's CONV_PATHS) under the CPU family, unless the plan
options turn it off (PlanOptions.winograd, CLGLOW_WINOGRAD=0), for single-group 3x3 stride-1
undilated convs with at least 16 input and output channels: F(4x4) when its tiles give the GEMM
enough columns (enough_tiles: at least 4 column tiles, e.g. ResNet-50's 56x56 layers, 196 tiles;
or exactly one or at least 3: with 6 x 16 tiles its 28x28 layers, 49 tiles, and 14x14 ones, 16),
else F(2x2) when its do (its 7x7 layers: 16 tiles). Fewer columns (down to one column tile)
only from the conv family's tuning entries; the transposed forms for fewer tiles still
(F4T / F2T: lower/winograd_small.py) likewise. Cost: alpha^2 / 9 times the weight bytes (U), on
ResNet-50 b1 with 6 x 16 tiles about 50 MB more weights than without the small-map defaults
(FEW_TILES_DEFAULT turns them off), past the device memory target (weights + 1.5 x live
activations). Rounding: F(2x2)'s
transforms have entries 0, +-1, +-1/2 (a few ulps of the intermediate sums); F(4x4)'s up to 8
and 1/24, about 10x that: on ResNet-50's 56x56 layers 5e-6 of the output's scale (end to end
1e-4 on logits of 13; onnx.reference's check allows 1e-3 relative).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..config import PlanOptions
from ..target import Target
from .base import Launch, LowerCtx, f32, i32, round_up, unaligned
from .common import F16, ConvGeometry, Epilogue, grid
from .gemm_kernel import (GemmConfig, Operand, act_params, b_unpacked_ok, gemm_launch, in_place_columns,
                          narrow_rows, pack_a)

# V and M bytes of one piece, per image of the batch (the memory target allows scratch in
# proportion to the activations): ResNet-50's 56x56 64-channel layer has 6.5 MB per image and
# runs in two pieces of 14 tile rows at batch 1 (arena 8.6 MB as without Winograd, where one
# piece made it 11.6), in pieces of 4 images at batch 8.
_PIECE_CAP = 4 << 20

# winograd.cl WINO_ROW: floats per row of wino_in's private ring of zero-padded input rows
# (images up to ~490 columns wide).
_WINO_ROW = 512


@dataclass(frozen=True, eq=False)
class Variant:
    """F(m x m, 3x3): output blocks of `m`, input patches of `alpha` = m + 2, alpha^2 GEMMs."""

    m: int
    g: np.ndarray  # G (alpha x 3): U = G g G^T
    kernels: tuple  # (input transform, output transform) in winograd.cl
    transposed: bool = False  # the GEMM as M^T = V^T U^T, tiles as its rows (lower/winograd_small.py)

    @property
    def alpha(self) -> int:
        return self.m + 2

    def tiles(self, oh: int, ow: int) -> tuple:
        return -(-oh // self.m), -(-ow // self.m)

    def span(self, tw: int) -> int:
        """Columns of the row ring the input transform reads (its segments of 8 tiles)."""
        return self.m * round_up(tw, 8) + (18 if self.m == 2 else 16)


F2 = Variant(2, np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
             ("wino_in", "wino_out"))
F4 = Variant(4, np.array([[1 / 4, 0.0, 0.0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                          [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0.0, 0.0, 1.0]]),
             ("wino4_in", "wino4_out"))
# The transposed forms for few tiles (lower/winograd_small.py): the same transforms, the GEMM with
# the tiles as its rows and the output channels as its columns.
F2T = Variant(2, F2.g, ("wt2_in", "wino_out"), True)
F4T = Variant(4, F4.g, ("wt4_in", "wino4_out"), True)
VARIANTS = {"F4": F4, "F2": F2, "F4T": F4T, "F2T": F2T}


def gemm_tiles(cfg: GemmConfig, m: int, n: int, few: bool = False) -> Optional[GemmConfig]:
    """The tiles of a Winograd GEMM (M = output channels, N = tiles, B read in place): of the
    config's and the 8-row ones, those that can read B in place and compute fewer outputs,
    counting the columns gemm.cl really computes (fit_rows counts whole column tiles: for
    ResNet-50's 28x28 layers, 196 columns, it keeps 12 x 32 where 8 x 48 computes 3% less; paired
    0.990-0.998 on the whole run). None when neither reads B in place."""
    cands = [c for c in ([cfg, narrow_rows(cfg)] if cfg.mr > 8 else [cfg]) if b_unpacked_ok(c, n) or (few and n >= c.nr)]
    if not cands:
        return None
    return min(cands, key=lambda c: round_up(m, c.mr) * in_place_columns(c, n))


def winograd_variant(target: Target, options: PlanOptions, cfg: GemmConfig,
                     geom: ConvGeometry, variants: Optional[tuple] = None) -> Optional[tuple]:
    """(the Winograd variant a conv runs as, its GEMM's tiles), or None (see the module
    docstring): F(4x4) where its tiles give the GEMM enough columns, else F(2x2) where those do.
    `variants` ("F4", "F2" or both, from the conv family's tuning entry) restricts the choice."""
    g = geom
    if not target.is_cpu_family or not options.winograd:
        return None
    if (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) != (3, 3, 1, 1, 1, 1) or g.groups != 1 or g.cin_g < 16 or g.m < 16:
        return None
    for v in (F4, F2, F4T, F2T):
        if variants is not None and variant_name(v) not in variants:
            continue
        th, tw = v.tiles(g.oh, g.ow)
        nt = th * tw
        if v.transposed:
            if variants is not None and few_tiles(cfg, nt):  # the tuner's choice (default_transposed)
                return v, transposed_tiles(cfg, nt)
            continue
        fits = max(g.pw + g.w, v.span(tw)) <= _WINO_ROW and enough_tiles(cfg, nt, variants is not None)
        tiles = gemm_tiles(cfg, g.m, nt, few=nt < 4 * cfg.nr) if fits else None
        if tiles is not None:
            return v, tiles
    return None


def variant_name(v: Variant) -> str:
    """"F4", "F2", "F4T" or "F2T": how the conv family's tuning entries name a variant."""
    return f"F{v.m}" + ("T" if v.transposed else "")


GROUP_ROW_TILES = True


def transposed_tiles(cfg: GemmConfig, nt: int) -> GemmConfig:
    """The tiles of a transposed Winograd GEMM (rows = the image's `nt` tiles, columns = output
    channels, gemm.cl C_TRANS, B the packed U^T): two vectors of channels, and the row count
    from the config's down to 6 that pads the tiles least (7 for 49 tiles)."""
    top = max(cfg.mr, 7)
    mr = min(range(top, 5, -1), key=lambda r: (round_up(nt, r), -r))
    return GemmConfig(mr, cfg.vw, 2, (-(-nt // mr), 1, 1) if GROUP_ROW_TILES else (1, 1, 1))


# Whether the plain forms take few tiles (one to four column tiles of the GEMM) without a
# database entry where enough_tiles says so; off, only the tuner's entries choose them.
FEW_TILES_DEFAULT = True


def enough_tiles(cfg: GemmConfig, nt: int, searched: bool) -> bool:
    """Whether a plain form's GEMM (N = `nt` tiles, B read in place) is worth running: at least 4
    column tiles; or, with fewer, at least one, where the tuner measures it (`searched`), and by
    default where the tiles are one whole column tile or at least 3 of them. Measured on both pocl
    drivers of the 2-vCPU guest (6 x 16 tiles, ResNet's shapes, kernel time in turns, b1): 14x14
    256-channel F(4x4) (16 tiles) 1.56 / 1.62 ms vs the implicit GEMM's 3.05 / ~3.0; 7x7
    512-channel F(2x2) (16) 1.46 / 2.44 vs the transposed GEMM's 2.08 / 3.44; 28x28 128-channel
    F(4x4) (49) 1.55 / 1.53 vs F(2x2)'s 196 tiles 2.31 / 2.31; a ragged 49 tiles of F(2x2) at
    14x14 3.4-3.6 ms, slower than F(4x4) there (taken first). Unmeasured with 32-column tiles, whose
    defaults on ResNet's maps stay as they were (16 and 49 tiles are neither)."""
    if nt >= 4 * cfg.nr:
        return True
    if nt < cfg.nr:
        return False
    return searched or (FEW_TILES_DEFAULT and (nt == cfg.nr or nt >= 3 * cfg.nr))


def few_tiles(cfg: GemmConfig, nt: int) -> bool:
    """Whether a map's `nt` tiles are few enough for the transposed forms to be searched: at most
    8 column tiles of the plain form's GEMM (beyond that its columns are wide enough)."""
    return nt <= 8 * cfg.nr


def winograd_filter(w: np.ndarray, v: Variant = F2) -> np.ndarray:
    """[Cout, Cin, 3, 3] -> U [alpha^2, Cout, Cin] (xi = alpha * row + column of G g G^T),
    computed in float64 and rounded once."""
    u = np.einsum("ak,oikl,bl->aboi", v.g, np.asarray(w, np.float64), v.g)
    return u.reshape(v.alpha ** 2, *u.shape[2:]).astype(np.float32)


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


def lower_winograd(ctx: LowerCtx, v: Variant, cfg: GemmConfig, geom: ConvGeometry, epi: Epilogue) -> list:
    """The launches of a conv as Winograd variant `v`, its GEMM on tiles `cfg` (winograd_variant)."""
    n_img, cin, m = geom.n_img, geom.cin, geom.m
    h, w, oh, ow, ph, pw = geom.h, geom.w, geom.oh, geom.ow, geom.ph, geom.pw
    has_bias, has_res = epi.has_bias, epi.has_res
    th, tw = v.tiles(oh, ow)
    nx = v.alpha ** 2
    label = ctx.label()
    a = Operand(ctx.derived(1, f"winoU{v.m}x{cfg.mr}", lambda wt: pack_a(winograd_filter(wt, v), cfg.mr)),
                packed=True, s2=max(round_up(m, cfg.mr), cfg.mr) * cin)
    pieces = _pieces(n_img, th, tw, 4 * nx * (cin + m) * tw, -(-4 * cfg.nr // tw))
    # per piece, floats per image: V's rows on cache lines with 8 tiles of slack (the input
    # transform's last segment), M's rows the piece's tiles
    sizes = [(round_up(rows * tw + 8, 16), rows * tw) for _, _, _, rows in pieces]
    vs = ctx.scratch(4 * max(nx * ldv * cin * ni for (ldv, _), (_, ni, _, _) in zip(sizes, pieces)))
    ms = ctx.scratch(4 * (max(nx * m * nt * ni for (_, nt), (_, ni, _, _) in zip(sizes, pieces)) + 8))  # + slack
    act_code, act_p = act_params(epi.act, epi.alpha, epi.beta)
    defines = {"ACT": act_code} if act_code else {}
    # half storage (kernels_cl/storage.h): X read by the input transform, Y and Z by the output one
    in_defs = {"XH": 1} if ctx.inputs[0].dtype == F16 else {}
    if ctx.outputs[0].dtype == F16:
        defines["YH"] = 1
    x_s1, y_s1 = cin * h * w, m * oh * ow
    flags = (1 if has_bias else 0) | (2 if has_res else 0)
    bias_arg = ctx.buf(2) if has_bias else ctx.out(0)  # absent: the flags say so, never read
    z_arg = ctx.buf(3) if has_res else ctx.out(0)
    k_in, k_out = v.kernels
    launches: list = []
    for (i0, k, ty0, rows), (ldv, nt) in zip(pieces, sizes):
        per_v, per_m = nx * ldv * cin, nx * m * nt
        head = [unaligned(ctx.buf(0)), i32(i0 * x_s1), i32(x_s1)]
        tail = [i32(h), i32(w), i32(ph), i32(pw), i32(tw), i32(ty0), i32(rows), i32(ldv), vs, i32(per_v)]
        gsize, ls = grid(ctx.device, (k * cin,), (1,))
        launches.append(Launch("winograd", k_in, gsize, head + [i32(cin)] + tail,
                               ls, in_defs, label, noop_args=head + [i32(0)] + tail))  # Cin = 0: no-op
        launches.append(gemm_launch(cfg, m=m, n=nt, k=cin, batch=k * nx, d2=nx, a=a,
                                    b=Operand(vs, ld=nx * ldv, s1=per_v, s2=ldv),
                                    c=Operand(ms, ld=nt, s1=per_m, s2=m * nt), label=label))
        head = [ms, i32(per_m)]
        tail = [i32(tw), i32(ty0), i32(rows), i32(oh), i32(ow), unaligned(ctx.out(0)), i32(i0 * y_s1), i32(y_s1),
                bias_arg, unaligned(z_arg), i32(flags)] + [f32(p) for p in act_p]
        gsize, ls = grid(ctx.device, (rows, k * m), (1, 1))
        launches.append(Launch("winograd", k_out, gsize, head + [i32(m)] + tail,
                               ls, defines, label, noop_args=head + [i32(0)] + tail))  # Cout = 0
    return launches
