"""GEMM on OpenCL: Gemm and MatMul, plus the shared GEMM launch builder that conv.py uses.

One kernel (kernels_cl/gemm.cl) computes C = act(alpha * A @ B + beta * bias + Z) for a
batch of matrices. Its tile sizes (MR x NR per work-item, vector width) are `-D` defines
picked from the device, and its operands are either packed into panels (aligned vector
loads, zero padded edges: weights packed once at plan time, activations by a pack kernel
or by im2col) or read strided/row-major. Shapes, strides and batch offsets are run-time
arguments so one program serves every layer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Arg, Launch, LowerCtx, Scratch, device_op, f32, i32, round_up, unaligned
from .common import attr_str, float32_only, grid

log = logging.getLogger(__name__)

# Activations the GEMM / depthwise epilogues fuse, and their ACT define (kernels_cl/activation.h):
# 0 is piecewise linear with run-time parameters, so the common ones share one program.
ACTIVATIONS = {"": 0, "Relu": 0, "Clip": 0, "LeakyRelu": 0, "Sigmoid": 4, "HardSigmoid": 5, "Tanh": 6, "Gelu": 7,
               "Swish": 8, "HardSwish": 9}  # Swish: x * Sigmoid(x) (SiLU), fused from its two-node form
_INF = float("inf")


def act_params(act: str, alpha: float = 0.0, beta: float = 0.0) -> tuple:
    """(ACT define, (a, b, c) run-time parameters) for activation.h, from the ONNX op name and
    its alpha/beta (LeakyRelu alpha, Clip min/max, HardSigmoid alpha/beta)."""
    if act not in ACTIVATIONS:
        raise ValueError(f"unsupported fused activation {act!r}")
    if act == "Relu":
        return 0, (1.0, 0.0, _INF)
    if act == "LeakyRelu":
        return 0, (alpha, -_INF, _INF)
    if act == "Clip":
        return 0, (1.0, alpha, beta)
    if act == "HardSigmoid":
        return 5, (alpha, beta, 0.0)
    if act == "HardSwish":
        return 9, (1.0 / 6.0, 0.5, 0.0)
    return ACTIVATIONS[act], (1.0, -_INF, _INF)


@dataclass(frozen=True)
class GemmConfig:
    """Tile sizes for one device: each work-item computes MR rows x (VW*NV) columns."""

    mr: int
    vw: int
    nv: int
    lsize: tuple

    @property
    def nr(self) -> int:
        return self.vw * self.nv


def default_gemm_config(target: Target) -> GemmConfig:
    """The Target's tile defaults (what the tuner measures first), by family and vector width.

    CPU family (register-blocked tiles): a work-group of one work-item each (a CPU driver runs
    work-groups on threads) and as many accumulators as the vector registers hold: 12 x 32 with
    float16 vectors (AVX-512: 24 zmm accumulators), 6 x 16 with float8 (AVX2). Larger groups
    measured on pocl (AVX-512): within the noise on ResNet-50 as a whole, its 28x28 implicit 3x3
    convs 25% slower with 4 row tiles per group (alone, back to back with waits, small-K GEMMs
    ran 2x faster with 4: a benchmark artefact of waking pocl's threads per launch).
    GPU family: small 4 x 4 tiles in 8 x 8 work-groups (within the device's work-group limit);
    correct anywhere, tuned by measurement.
    """
    if target.is_cpu_family:
        if target.preferred_vector_width_float >= 16:
            return GemmConfig(12, 16, 2, (1, 1, 1))
        return GemmConfig(6, 8, 2, (1, 1, 1))
    return GemmConfig(4, 4, 1, target.fit_group((8, 8, 1)))


def gemm_config(target: Target) -> GemmConfig:
    """The tiles to lower with: the Target's tuned choice (runtime.tuning) when it has one."""
    if target.gemm_tiles is not None:
        mr, vw, nv, ls = target.gemm_tiles
        return GemmConfig(mr, vw, nv, tuple(ls))
    return default_gemm_config(target)


# --- host-side packing (plan time, for constant operands) -----------------------------------------
def pack_a(a: np.ndarray, mr: int) -> np.ndarray:
    """[..., M, K] -> [..., ceil(M/mr), K, mr] (rows zero padded): the A panels of gemm.cl."""
    a = np.asarray(a, dtype=np.float32)
    *lead, m, k = a.shape
    mp = max(round_up(m, mr), mr)
    if mp != m:
        a = np.pad(a, [(0, 0)] * len(lead) + [(0, mp - m), (0, 0)])
    # one copy: splitting M into (panel, row) is a view, the transpose happens while copying
    return _nonempty(a.reshape(*lead, mp // mr, mr, k).swapaxes(-1, -2))


def pack_b(b: np.ndarray, nr: int) -> np.ndarray:
    """[..., K, N] -> [..., ceil(N/nr), K, nr] (columns zero padded): the B panels of gemm.cl.
    `b` may be a transposed view (weights W^T): still one copy."""
    b = np.asarray(b, dtype=np.float32)
    *lead, k, n = b.shape
    np_ = max(round_up(n, nr), nr)
    if np_ != n:
        b = np.pad(b, [(0, 0)] * len(lead) + [(0, 0), (0, np_ - n)])
    return _nonempty(b.reshape(*lead, k, np_ // nr, nr).swapaxes(-2, -3))


def _nonempty(a: np.ndarray) -> np.ndarray:
    """A contiguous copy with at least one element (an OpenCL buffer cannot be empty)."""
    a = np.ascontiguousarray(a)
    return a if a.size else np.zeros(1, a.dtype)


# --- the launch builder -------------------------------------------------------------------------------
@dataclass
class Operand:
    """One GEMM operand: where it lives and how the kernel indexes it.

    `s1`/`s2` are the element strides for the two batch levels (z1 = z // d2, z2 = z % d2).
    For a packed operand the strides count packed elements. `ld`/`ld2` describe an unpacked
    operand: A uses (row stride, k stride); B and C/Z use `ld` as the row stride.
    """

    arg: Arg
    packed: bool = False
    off: int = 0
    s1: int = 0
    s2: int = 0
    ld: int = 0
    ld2: int = 1


@dataclass
class Bias:
    """The epilogue's additive term beta * bias[m * sm + n * sn] (sn is 0 or 1)."""

    arg: Arg
    sm: int
    sn: int
    beta: float = 1.0
    off: int = 0
    s1: int = 0
    s2: int = 0


@dataclass
class Implicit:
    """An implicit-GEMM convolution's pixel operand and C mapping: row k of the pixel operand
    starts at offset koff[k] of the phase images (or of X itself), pixel n is the padded-linear
    y*wph + x, and only pixels with x < ow are stored, at y*opitch + x + ooff of each channel
    (opitch None: ow, the plain layout; else the consumer's padded image, see PaddedLayout). The
    pixels are B's columns (gemm.cl flag 4), or in a transposed GEMM A's rows (flag 8)."""

    koff: Arg
    wph: int
    ow: int
    opitch: Optional[int] = None
    ooff: int = 0


def gemm_defines(cfg: GemmConfig, *, a_packed: bool, b_packed: bool, act_code: int = 0,
                 c_trans: bool = False) -> dict:
    """The -D defines of one gemm.cl program: what changes its code (everything else is a
    run-time argument)."""
    defines = {"MR": cfg.mr, "VW": cfg.vw, "NV": cfg.nv, "A_PACKED": int(a_packed), "B_PACKED": int(b_packed)}
    if act_code:
        defines["ACT"] = act_code
    if c_trans:
        defines["C_TRANS"] = 1
    return defines


def gemm_launch(cfg: GemmConfig, *, m: int, n: int, k: int, batch: int, d2: int,
                a: Operand, b: Operand, c: Operand, bias: Optional[Bias] = None,
                res: Optional[Operand] = None, alpha: float = 1.0, act: str = "",
                act_alpha: float = 0.0, act_beta: float = 0.0, c_trans: bool = False,
                implicit: Optional[Implicit] = None, label: str = "") -> Launch:
    """The gemm.cl launch for C[z] = act(alpha * A[z] @ B[z] + bias + res) over `batch` z's.

    c_trans: C (and res) are stored transposed, element (i, j) at C[j * c.ld + i].
    implicit: the pixel operand (B; A when c_trans) is a convolution's input or phase images
    read in place through a row-offset table (see Implicit; transposed, the weights packed); the
    bias is per output channel."""
    if act not in ACTIVATIONS:
        raise InvalidModel(f"unsupported fused activation {act!r}", node=label or None)
    act_code, act_p = act_params(act, act_alpha, act_beta)
    if implicit is not None and (b.packed if not c_trans else a.packed or not b.packed):
        raise ValueError("an implicit GEMM reads its pixels (B, or A when transposed) in place; "
                         "transposed, the weights are packed")
    # a transposed implicit GEMM is a flag of the packed-A program (no program of its own)
    defines = gemm_defines(cfg, a_packed=a.packed or (implicit is not None and c_trans), b_packed=b.packed,
                           act_code=act_code, c_trans=c_trans)
    # operands read in place (not panels) go through scalar or floatv_u loads: any alignment
    args: list = [a.arg if a.packed else unaligned(a.arg), i32(a.off), i32(a.s1), i32(a.s2), i32(a.ld), i32(a.ld2),
                  b.arg if b.packed else unaligned(b.arg), i32(b.off), i32(b.s1), i32(b.s2), i32(b.ld),
                  c.arg, i32(c.off), i32(c.s1), i32(c.s2), i32(c.ld)]
    # Absent bias / residual: the flags say so and C stands in for the pointer (never read).
    bias_ = bias if bias is not None else Bias(c.arg, sm=0, sn=0, beta=0.0)
    res_ = res if res is not None else Operand(c.arg)
    flags = ((1 if bias is not None else 0) | (2 if res is not None else 0)
             | (0 if implicit is None else 8 if c_trans else 4))
    args += [bias_.arg, i32(bias_.off), i32(bias_.s1), i32(bias_.s2), i32(bias_.sm), i32(bias_.sn),
             f32(bias_.beta)]
    args += [res_.arg, i32(res_.off), i32(res_.s1), i32(res_.s2)]
    tail = [i32(max(d2, 1)), f32(alpha), i32(flags)] + [f32(p) for p in act_p]
    tail += ([implicit.koff, i32(implicit.wph), i32(implicit.ow),
              i32(implicit.ow if implicit.opitch is None else implicit.opitch), i32(implicit.ooff)]
             if implicit is not None
             else [c.arg, i32(1), i32(1), i32(1), i32(0)])  # absent: C stands in for the table (never read)
    ls = cfg.lsize
    if c_trans:  # gemm.cl: the transposed programs walk the images before the column tiles
        if tuple(ls[1:]) != (1, 1):
            raise ValueError("transposed GEMMs take work-groups along the row tiles only (local size (n, 1, 1))")
        gsize = (round_up(-(-m // cfg.mr), ls[0]), batch, -(-n // cfg.nr))
    else:
        gsize = (round_up(-(-m // cfg.mr), ls[0]), round_up(-(-n // cfg.nr), ls[1]), round_up(batch, ls[2]))
    return Launch("gemm", "gemm", gsize, args + [i32(m), i32(n), i32(k)] + tail, ls, defines, label,
                  noop_args=args + [i32(0), i32(0), i32(0)] + tail)


def pack_b_launch(target: Target, nr: int, *, src: Arg, off: int, s1: int, s2: int, s_k: int, s_n: int,
                  k: int, n: int, batch: int, d2: int, dst: Scratch, label: str = "") -> Launch:
    """Pack `batch` strided [K, N] matrices into `nr`-column panels (dst stride = panel set size).

    `nr` is a GEMM config's NR for B panels, or its MR for the A panels of a transposed GEMM
    (pixels as rows). One fixed local size (64 k-rows per group, the kernel skips k >= K: a CPU
    driver pays per group, so fewer larger groups; one work-group function per panel width),
    fitted to the Target."""
    np_ = round_up(n, nr)
    head = [unaligned(src), i32(off), i32(s1), i32(s2), i32(s_k), i32(s_n), dst, i32(np_ * k), i32(n)]
    gsize, ls = grid(target, (np_ // nr, k, batch), (1, 64, 1))
    return Launch("im2col", "pack_b", gsize, head + [i32(k), i32(max(d2, 1))],
                  ls, {"NR": nr}, label, noop_args=head + [i32(0), i32(max(d2, 1))])  # K = 0


def pack_rows_launch(target: Target, nr: int, *, src: Arg, s2: int, s_m: int, m: int, k: int, batch: int,
                     dst: Scratch, label: str = "") -> Launch:
    """Pack `batch` row-major [M, K] matrices (rows s_m apart, s2 apart per batch) into
    `nr`-row panels (im2col.cl pack_rows: 16 k per work-item, read as one vector per row; 256 k
    per group: a CPU driver pays per group)."""
    head = [unaligned(src), i32(0), i32(0), i32(s2), i32(s_m), dst, i32(round_up(m, nr) * k), i32(m)]
    gsize, ls = grid(target, (-(-m // nr), -(-k // 16), batch), (1, 16, 1))
    return Launch("im2col", "pack_rows", gsize, head + [i32(k), i32(max(batch, 1))], ls, {"NR": nr}, label,
                  noop_args=head + [i32(0), i32(max(batch, 1))])  # K = 0


def packed_b_bytes(nr: int, k: int, n: int, batch: int) -> int:
    """Bytes of `batch` [K, N] matrices packed into `nr`-column panels."""
    return 4 * max(round_up(n, nr), nr) * max(k, 1) * max(batch, 1)


def fit_rows(target: Target, cfg: GemmConfig, m: int, n: Optional[int] = None) -> GemmConfig:
    """The config with 8-row tiles when they compute clearly fewer padded rows, or, given the
    GEMM's N, fewer padded outputs (rows x columns) than the config's tiles. With 16-float
    vectors the 8-row tiles are 3 vectors wide (8 x 48: 24 accumulators, as many as 12 x 32, for
    11 loads per 24 FMAs instead of 14), so they are as fast per FMA (measured on pocl, AVX-512,
    a 128-channel 3x3 conv at 28x28: 473 GFLOP/s for 8 x 48 against 447 for 12 x 32, the 5% of
    padding 12-row tiles and 32-column tiles compute there) and the choice is the one that
    pads less: ResNet's 64-channel layers (72 rows with 12-row tiles), its 128-channel 3x3s and
    56x56 1x1s; 12 x 32 stays for 14x14 outputs (196 columns: 224 with 32-column tiles, 240
    with 48). Under the CPU family only (register-blocked tiles); the conv's B panels (im2col)
    take the chosen config's NR."""
    if not target.is_cpu_family or cfg.mr <= 8:
        return cfg
    narrow = narrow_rows(cfg)
    if n is None:
        waste = round_up(m, cfg.mr) / m
        return narrow if round_up(m, 8) / m < waste - 0.05 else cfg
    work = round_up(m, cfg.mr) * round_up(n, cfg.nr)
    return narrow if round_up(m, narrow.mr) * round_up(n, narrow.nr) < work else cfg


def narrow_rows(cfg: GemmConfig) -> GemmConfig:
    """The 8-row tiles fit_rows may choose instead of the config's (8 x 48 with 16-float vectors)."""
    return GemmConfig(8, cfg.vw, 3 if cfg.vw >= 16 and cfg.nv == 2 else cfg.nv, cfg.lsize)


def in_place_columns(cfg: GemmConfig, n: int) -> int:
    """Columns gemm.cl computes for a B read in place with n columns: whole column tiles, the
    ragged last one as the last NR columns, or just the last vector when at most one is left
    (its tail1 tiles; n >= NR)."""
    full, rem = divmod(n, cfg.nr)
    if rem == 0:
        return n
    return full * cfg.nr + (cfg.vw if cfg.nv > 1 and rem <= cfg.vw and n >= cfg.nr else cfg.nr)


def transposed_config(target: Target, cfg: GemmConfig, m: int, n: int) -> Optional[GemmConfig]:
    """A config for computing C^T = B^T A^T when N is small, else None.

    With N = 49 (ResNet's layer4, 7x7 pixels) the NR-column tiles pad N to 64 (23% of the
    FLOPs wasted) and give few tiles; transposed, the pixels become MR-row tiles with an MR
    that divides N (7 x 7) and the output channels the NR columns; the weights are then read
    once instead of once per column tile. Taken for N <= 8 * NR when it wastes clearly fewer
    FLOPs on padding (ResNet-50: layer4 N = 49 and layer3 N = 196 with MR = 7). Under the CPU
    family only (its tiles: work-groups along the row tiles, which the transposed programs need).
    """
    cfg = GemmConfig(cfg.mr, cfg.vw, 2, cfg.lsize)  # conv.py's transposed path takes NR = 2 x VW
    if not target.is_cpu_family or n > 8 * cfg.nr or m < 2 * cfg.nr:
        return None
    pad_n = round_up(n, cfg.nr) / n
    best = None
    for mr in range(cfg.mr, 5, -1):  # fewer rows: fewer accumulators, still FMA-bound
        waste = round_up(n, mr) / n * round_up(m, cfg.nr) / m
        if best is None or waste < best[0] - 1e-9:
            best = (waste, mr)
    if best is None or best[0] > 0.9 * pad_n:
        return None
    return GemmConfig(best[1], cfg.vw, cfg.nv, cfg.lsize)


def b_unpacked_ok(cfg: GemmConfig, n: int) -> bool:
    """Read a row-major B in place when N is whole column tiles or at least 4 of them: gemm.cl
    computes a ragged last tile as the last NR columns (overlapping its neighbour) with whole
    vector loads. Narrower ragged B's are packed: in place, each k reads a short row across cache
    lines that no prefetcher follows (SGEMM 512x4608x49: 38 GFLOP/s in place vs 59 packed), and
    below one tile the kernel would read B element by element over all of K (measured on pocl,
    256x512x784 with that path: 0.85 ms in place vs 0.50 ms packed)."""
    return n % cfg.nr == 0 or n >= 4 * cfg.nr


# --- supports -----------------------------------------------------------------------------------------
def _shape(graph: Graph, name: str) -> Optional[tuple]:
    v = graph.values.get(name) if name else None
    return None if v is None else v.shape


def supports_gemm(node: Node, graph: Graph, target: Target) -> Optional[str]:
    why = float32_only(node, graph)
    if why:
        return why
    for i in (0, 1):
        s = _shape(graph, node.input(i))
        if s is not None and len(s) != 2:
            return f"Gemm input {i} has rank {len(s)}; Gemm takes matrices"
    return None


def supports_matmul(node: Node, graph: Graph, target: Target) -> Optional[str]:
    why = float32_only(node, graph)
    if why:
        return why
    for i in (0, 1):
        s = _shape(graph, node.input(i))
        if s is not None and len(s) == 0:
            return "MatMul of a scalar is undefined"
    return None


# --- Gemm ---------------------------------------------------------------------------------------------
def pack_a_at_run_time(target: Target, cfg: GemmConfig, m: int, k: int, row_pitch: int) -> bool:
    """Whether a live A is packed into MR-row panels (pack_rows) before the GEMM, or read in
    place (strided rows, `row_pitch` elements apart). The CPU family reads it in place: measured on
    pocl (AVX-512, Zen 5), A/B in one process, every shape ran faster without the pack (kernel
    time: SGEMM 1024^3 6.07 -> 5.82 ms, 256x4096x256 1.90 -> 1.41, 512x4608x49 2.36 -> 0.78,
    BERT-style 2.96 -> 2.88 ms per run; an MR-row tile's rows stay in L1 as it walks k) -- except
    rows a multiple of 4 KiB apart: then a tile's MR rows all fall in one L1 set, more than its
    ways on a Zen 4 (32 KiB, 8-way), and each k step misses. Packed there (Zen 4, A/B in one
    process): SGEMM 1024^3 23-29% faster, BERT-style (its FFN's 3072-wide rows) 5%; 512x2048 and
    768^3 unchanged. The GPU family (unmeasured) keeps the pack, except for a few rows (GEMV-like),
    where A is tiny anyway."""
    if m < 4 * cfg.mr or k < 16:
        return False
    return not target.is_cpu_family or (4 * row_pitch) % 4096 == 0


# --- operand paths: how each GEMM operand reaches gemm.cl, best first ----------------------------------
# The first applicable row is taken (Gemm, MatMul, FusedMatMul and its transposed views share them;
# convolutions have their own table, lower/conv.py CONV_PATHS):
#   A (M x K)  "constant"  weights packed once into MR-row panels at plan time (ctx.derived)
#              "packed"    a live A packed at run time into MR-row panels (pack_a_at_run_time:
#                          the GPU family, or rows a multiple of 4 KiB apart under the CPU family)
#              "strided"   a live A read in place through its strides
#   B (K x N)  "constant"  weights packed once into NR-column panels at plan time
#              "in place"  a live row-major B read where it lies (b_unpacked_ok)
#              "packed"    a live B packed at run time into NR-column panels (pack_b)
def a_path(target: Target, cfg: GemmConfig, *, const: bool, m: int, k: int, row_pitch: int) -> str:
    """The A operand's path ("constant", "packed" or "strided"; see the table above)."""
    if const:
        return "constant"
    return "packed" if pack_a_at_run_time(target, cfg, m, k, row_pitch) else "strided"


def b_path(cfg: GemmConfig, *, const: bool, n: int, row_major: bool = True) -> str:
    """The B operand's path ("constant", "in place" or "packed"; see the table above)."""
    if const:
        return "constant"
    return "in place" if row_major and b_unpacked_ok(cfg, n) else "packed"


def _pack_a_launch(ctx: LowerCtx, cfg: GemmConfig, i: int, m: int, k: int, trans: bool, batch: int,
                   launches: list) -> Operand:
    """Pack a live A (or A^T when `trans`) of `batch` matrices into MR-row panels (pack_b's
    column panels of A'^T: A' rows become panel columns). A row-major A goes through pack_rows,
    which reads 16 k of a row as one vector (BERT-style on pocl, A/B in one process: its 24
    live-A packs 0.33-0.44 ms faster per run than pack_b reading MR floats K apart per panel
    row). The batch strides are the caller's: ceil(M / MR) * MR * K elements per matrix."""
    dst = ctx.scratch(packed_b_bytes(cfg.mr, k, m, batch))
    if trans:
        launches.append(pack_b_launch(ctx.device, cfg.mr, src=ctx.buf(i), off=0, s1=0, s2=m * k, s_k=m if trans else 1,
                                      s_n=1 if trans else k, k=k, n=m, batch=batch, d2=batch, dst=dst,
                                      label=ctx.label()))
    else:
        launches.append(pack_rows_launch(ctx.device, cfg.mr, src=ctx.buf(i), s2=m * k, s_m=k, m=m, k=k, batch=batch,
                                         dst=dst, label=ctx.label()))
    return Operand(dst, packed=True)


def _a_operand(ctx: LowerCtx, cfg: GemmConfig, i: int, m: int, k: int, trans: bool,
               launches: list) -> Operand:
    """A as packed constant panels (weights), panels packed at run time, or a strided read."""
    path = a_path(ctx.device, cfg, const=ctx.const(i) is not None, m=m, k=k, row_pitch=1 if trans else k)
    if path == "constant":
        def fn(w: np.ndarray) -> np.ndarray:
            w2 = np.asarray(w, np.float32).reshape(-1, w.shape[-1]) if w.ndim >= 2 else w.reshape(1, -1)
            return pack_a(w2.T if trans else w2, cfg.mr)
        return Operand(ctx.derived(i, f"packA{cfg.mr}t{int(trans)}", fn), packed=True)
    if path == "packed":
        return _pack_a_launch(ctx, cfg, i, m, k, trans, 1, launches)
    # A'[m, k] = A[k, m] when transposed.
    return Operand(ctx.buf(i), ld=1 if trans else k, ld2=m if trans else 1)


def _b_operand(ctx: LowerCtx, cfg: GemmConfig, i: int, k: int, n: int, trans: bool,
               launches: list) -> Operand:
    """B as packed constant panels, an in-place row-major read, or panels packed at run time."""
    path = b_path(cfg, const=ctx.const(i) is not None, n=n, row_major=not trans)
    if path == "constant":
        def fn(w: np.ndarray) -> np.ndarray:
            w2 = np.asarray(w, np.float32)
            return pack_b(w2.T if trans else w2, cfg.nr)
        return Operand(ctx.derived(i, f"packB{cfg.nr}t{int(trans)}", fn), packed=True)
    if path == "in place":
        return Operand(ctx.buf(i), ld=n)
    dst = ctx.scratch(packed_b_bytes(cfg.nr, k, n, 1))
    launches.append(pack_b_launch(ctx.device, cfg.nr, src=ctx.buf(i), off=0, s1=0, s2=0, s_k=1 if trans else n,
                                  s_n=k if trans else 1, k=k, n=n, batch=1, d2=1, dst=dst,
                                  label=ctx.label()))
    return Operand(dst, packed=True)


@device_op("Gemm", supports=supports_gemm)
def lower_gemm(ctx: LowerCtx) -> list:
    """Y = alpha * A' @ B' + beta * C with C unidirectionally broadcast to [M, N]."""
    cfg = gemm_config(ctx.device)
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    sa, sb = ctx.inputs[0].shape, ctx.inputs[1].shape
    if len(sa) != 2 or len(sb) != 2:
        raise InvalidModel(f"Gemm needs 2-D inputs, got {sa} and {sb}", node=ctx.label())
    m, k = (sa[1], sa[0]) if ta else sa
    kb, n = (sb[1], sb[0]) if tb else sb
    if kb != k:
        raise InvalidModel(f"Gemm inner dimensions differ: {sa} (transA={ta}) x {sb} (transB={tb})",
                           node=ctx.label())
    if m == 0 or n == 0:
        return []
    launches: list = []
    a = _a_operand(ctx, cfg, 0, m, k, ta, launches)
    b = _b_operand(ctx, cfg, 1, k, n, tb, launches)
    bias = None
    beta = float(ctx.attr("beta", 1.0))
    if ctx.has_input(2) and ctx.node.input(2) and beta != 0.0:
        cs = tuple(ctx.inputs[2].shape)
        if len(cs) > 2:
            raise InvalidModel(f"Gemm C of shape {cs} does not broadcast to {(m, n)}", node=ctx.label())
        c2 = (1,) * (2 - len(cs)) + cs
        if c2[0] not in (1, m) or c2[1] not in (1, n):
            raise InvalidModel(f"Gemm C of shape {cs} does not broadcast to {(m, n)}", node=ctx.label())
        bias = Bias(ctx.buf(2), sm=c2[1] if c2[0] != 1 else 0, sn=1 if c2[1] != 1 else 0, beta=beta)
    c = Operand(ctx.out(0), ld=n)
    launches.append(gemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=a, b=b, c=c, bias=bias,
                                alpha=float(ctx.attr("alpha", 1.0)), label=ctx.label()))
    return launches


# --- MatMul -------------------------------------------------------------------------------------------
def _batch_strides(bshape: tuple, out_batch: tuple, mat_size: int) -> list:
    """Element strides of an operand's (right-aligned) batch dims over the output batch; 0 = broadcast."""
    full = (1,) * (len(out_batch) - len(bshape)) + tuple(bshape)
    strides, acc = [0] * len(full), mat_size
    for d in range(len(full) - 1, -1, -1):
        strides[d] = acc if full[d] != 1 else 0
        acc *= full[d]
    return strides


def _collapse(dims: list, strides: Sequence[list]) -> tuple:
    """Merge adjacent batch dims that every operand walks contiguously (fewer kernel levels)."""
    out_d: list = []
    out_s: list = [[] for _ in strides]
    for d, size in enumerate(dims):
        if size == 1:
            continue
        # merge into the previous dim when each operand's outer stride is inner stride * size
        if out_d and all(s[d] * size == os_[-1] for s, os_ in zip(strides, out_s)):
            out_d[-1] *= size
            for s, os_ in zip(strides, out_s):
                os_[-1] = s[d]
            continue
        out_d.append(size)
        for s, os_ in zip(strides, out_s):
            os_.append(s[d])
    return out_d, out_s


def supports_fused_matmul(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """clglow.FusedMatMul (passes/fuse_matmul.py): float32, both operands at least 2-D, an
    activation the epilogue has."""
    why = supports_matmul(node, graph, target) or float32_only(node, graph)
    if why:
        return why
    for i in (0, 1):
        s = _shape(graph, node.input(i))
        if s is not None and len(s) < 2:
            return "a fused MatMul takes 2-D or batched operands"
    act = node.attrs.get("activation", "")
    act = attr_str(act)
    if act not in ACTIVATIONS:
        return f"fused activation {act!r} is not one of {sorted(a for a in ACTIVATIONS if a)}"
    return None


@device_op("MatMul", supports=supports_matmul)
def lower_matmul(ctx: LowerCtx) -> list:
    """numpy matmul: 1-D operands promoted then squeezed, leading dims broadcast."""
    return _lower_matmul(ctx)


@device_op("FusedMatMul", domain="clglow", supports=supports_fused_matmul)
def lower_fused_matmul(ctx: LowerCtx) -> list:
    """Y = act(alpha * A @ B + bias + residual): inputs A, B, bias (per column: [N] or
    [1, .., 1, N], may be absent) and residual (Y's shape, may be absent), all in the epilogue."""
    out_shape = tuple(ctx.outputs[0].shape)
    bias = None
    if ctx.has_input(2) and ctx.node.input(2):
        bs = tuple(ctx.inputs[2].shape)
        n = out_shape[-1] if out_shape else 1
        if bs and (bs[-1] not in (n, 1) or any(d != 1 for d in bs[:-1])):
            raise InvalidModel(f"FusedMatMul bias of shape {bs} is not a per-column vector of {n}",
                               node=ctx.label())
        bias = Bias(ctx.buf(2), sm=0, sn=1 if bs and bs[-1] == n and n != 1 else 0)
    res = None
    if ctx.has_input(3) and ctx.node.input(3):
        if tuple(ctx.inputs[3].shape) != out_shape:
            raise InvalidModel(f"FusedMatMul residual {tuple(ctx.inputs[3].shape)} differs from the output "
                               f"{out_shape}", node=ctx.label())
        res = ctx.buf(3)
    act = ctx.attr("activation", "")
    act = attr_str(act, "")
    act_t = (act, float(ctx.attr("act_alpha", 0.0)), float(ctx.attr("act_beta", 0.0)))
    perms = [ctx.attr(k) for k in ("perm_a", "perm_b", "perm_c")]
    if any(perms):
        return _lower_matmul_views(ctx, perms, bias=bias, res=res, alpha=float(ctx.attr("alpha", 1.0)), act=act_t)
    return _lower_matmul(ctx, bias=bias, res=res, alpha=float(ctx.attr("alpha", 1.0)), act=act_t)


def _view(shape: Sequence[int], perm: Optional[Sequence[int]]) -> tuple:
    """(shape, element strides) of transpose(X, perm) for a contiguous X of `shape`."""
    st = [0] * len(shape)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        st[d] = acc
        acc *= int(shape[d])
    if not perm:
        return tuple(int(d) for d in shape), st
    return tuple(int(shape[p]) for p in perm), [st[p] for p in perm]


def _lower_matmul_views(ctx: LowerCtx, perms: list, bias: Optional[Bias] = None, res: Optional[Arg] = None,
                        alpha: float = 1.0, act: tuple = ("", 0.0, 0.0)) -> list:
    """A FusedMatMul whose operands and/or result are transposed views of contiguous tensors
    (passes/fuse_matmul.fold_transposes: a transformer's head split and merge): the operands
    are read, or packed, through their view strides and C is stored through its own, so the
    Transpose copies never run. Batched (rank 3-4) views; C's last axis stays its last."""
    cfg = gemm_config(ctx.device)
    label = ctx.label()
    perm_a, perm_b, perm_c = (None if not p else [int(v) for v in p] for p in perms)
    sa, sta = _view(ctx.inputs[0].shape, perm_a)
    sb, stb = _view(ctx.inputs[1].shape, perm_b)
    y_shape = tuple(int(d) for d in ctx.outputs[0].shape)
    r = len(y_shape)
    if len(sa) != r or len(sb) != r or r < 3 or r > 4:
        raise InvalidModel(f"FusedMatMul views of ranks {len(sa)}, {len(sb)} -> {r}: batched views of equal "
                           f"rank 3 or 4 only", node=label)
    # C as the view of Y: C dim perm_c[j] is Y dim j
    y_st = _view(y_shape, None)[1]
    if perm_c:
        if sorted(perm_c) != list(range(r)) or perm_c[-1] != r - 1:
            raise InvalidModel(f"FusedMatMul perm_c {perm_c} must keep the last axis", node=label)
        sc, stc = [0] * r, [0] * r
        for j, p in enumerate(perm_c):
            sc[p], stc[p] = y_shape[j], y_st[j]
        if res is not None:
            raise InvalidModel("FusedMatMul with a transposed result takes no residual", node=label)
    else:
        sc, stc = list(y_shape), y_st
    m, k = sa[-2:]
    kb, n = sb[-2:]
    if k != kb or tuple(sc[-2:]) != (m, n):
        raise InvalidModel(f"FusedMatMul views {sa} x {sb} -> {tuple(sc)} do not multiply", node=label)
    out_batch = tuple(sc[:-2])
    try:
        if tuple(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))) != out_batch:
            raise ValueError
    except ValueError:
        raise InvalidModel(f"FusedMatMul batch dims {sa[:-2]} x {sb[:-2]} -> {out_batch}", node=label) from None
    if m == 0 or n == 0 or int(np.prod(out_batch, dtype=np.int64)) == 0:
        return []
    launches: list = []

    def bstrides(shape: tuple, st: list) -> list:  # batch strides over out_batch, 0 where broadcast
        return [0 if shape[d] == 1 else st[d] for d in range(len(out_batch))]

    def pack(i: int, width: int, rows: int, cols: int, s_rows: int, s_cols: int, shape: tuple, st: list):
        """Pack operand i's batch of views into `width` panels (pack_b over cols, rows = K)."""
        dims, (bs,) = _collapse(list(shape[:-2]), [bstrides(shape, st)])
        if len(dims) > 2:
            raise InvalidModel("FusedMatMul views with more than two batch levels", node=label)
        d1, d2 = ([1, 1] + dims)[-2:]
        s1, s2 = ([0, 0] + bs)[-2:]
        nmat = d1 * d2
        dst = ctx.scratch(packed_b_bytes(width, rows, cols, nmat))
        launches.append(pack_b_launch(ctx.device, width, src=ctx.buf(i), off=0, s1=s1, s2=s2, s_k=s_rows, s_n=s_cols,
                                      k=rows,
                                      n=cols, batch=nmat, d2=d2, dst=dst, label=label))
        return Operand(dst, packed=True), max(round_up(cols, width), width) * rows

    # A: MR-row panels packed at run time, or read strided
    if a_path(ctx.device, cfg, const=False, m=m, k=k, row_pitch=sta[-2]) == "packed":
        a, a_mat = pack(0, cfg.mr, k, m, sta[-1], sta[-2], sa, sta)
        a_st = _batch_strides(tuple(d for d in sa[:-2]), out_batch, a_mat)
    else:
        a = Operand(ctx.buf(0), ld=sta[-2], ld2=sta[-1])
        a_st = bstrides(sa, sta)
    # B: rows in place when they are contiguous, else packed
    if b_path(cfg, const=False, n=n, row_major=stb[-1] == 1) == "in place":
        b = Operand(ctx.buf(1), ld=stb[-2])
        b_st = bstrides(sb, stb)
    else:
        b, b_mat = pack(1, cfg.nr, k, n, stb[-2], stb[-1], sb, stb)
        b_st = _batch_strides(tuple(d for d in sb[:-2]), out_batch, b_mat)
    c_st = list(stc[:-2])
    dims, st = _collapse(list(out_batch), [a_st, b_st, c_st])
    if len(dims) > 2:
        raise InvalidModel("FusedMatMul views with more than two batch levels", node=label)
    dims = ([1, 1] + dims)[-2:]
    st = [([0, 0] + s)[-2:] for s in st]
    batch, d2 = dims[0] * dims[1], dims[1]
    aa = Operand(a.arg, a.packed, 0, st[0][0], st[0][1], a.ld, a.ld2)
    bo = Operand(b.arg, b.packed, 0, st[1][0], st[1][1], b.ld)
    co = Operand(ctx.out(0), False, 0, st[2][0], st[2][1], stc[-2])
    zo = None if res is None else Operand(res, False, 0, st[2][0], st[2][1], stc[-2])
    launches.append(gemm_launch(cfg, m=m, n=n, k=k, batch=batch, d2=d2, a=aa, b=bo, c=co, bias=bias, res=zo,
                                alpha=alpha, act=act[0], act_alpha=act[1], act_beta=act[2], label=label))
    return launches


def _lower_matmul(ctx: LowerCtx, bias: Optional[Bias] = None, res: Optional[Arg] = None, alpha: float = 1.0,
                  act: tuple = ("", 0.0, 0.0)) -> list:
    cfg = gemm_config(ctx.device)
    sa, sb = tuple(ctx.inputs[0].shape), tuple(ctx.inputs[1].shape)
    if len(sa) == 0 or len(sb) == 0:
        raise InvalidModel("MatMul of a scalar is undefined", node=ctx.label())
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    m, k = a2[-2:]
    kb, n = b2[-2:]
    if k != kb:
        raise InvalidModel(f"MatMul inner dimensions differ: {sa} x {sb}", node=ctx.label())
    ba, bb = a2[:-2], b2[:-2]
    try:
        out_batch = tuple(np.broadcast_shapes(ba, bb))
    except ValueError:
        raise InvalidModel(f"MatMul batch dimensions do not broadcast: {sa} x {sb}",
                           node=ctx.label()) from None
    nbatch = int(np.prod(out_batch, dtype=np.int64))
    if m == 0 or n == 0 or nbatch == 0:
        return []
    launches: list = []
    label = ctx.label()

    # A broadcast B matrix and a batched A: fold A's batch into M (one big GEMM, no batch loop).
    if int(np.prod(bb, dtype=np.int64)) == 1 and ctx.const(0) is None:
        m, out_batch, nbatch, ba = m * nbatch, (), 1, ()
    a_kind = a_path(ctx.device, cfg, const=ctx.const(0) is not None, m=m, k=k, row_pitch=k)
    b_kind = b_path(cfg, const=ctx.const(1) is not None, n=n)

    # A
    if a_kind == "constant":
        mp = max(round_up(m, cfg.mr), cfg.mr)
        a = Operand(ctx.derived(0, f"packA{cfg.mr}mm",
                                lambda w: pack_a(np.asarray(w).reshape(*ba, m, k), cfg.mr)), packed=True)
        a_mat = mp * k
    elif a_kind == "packed":
        na = int(np.prod(ba, dtype=np.int64))
        a = _pack_a_launch(ctx, cfg, 0, m, k, False, na, launches)
        a_mat = max(round_up(m, cfg.mr), cfg.mr) * k
    else:
        a = Operand(ctx.buf(0), ld=k, ld2=1)
        a_mat = m * k
    # B
    np_ = max(round_up(n, cfg.nr), cfg.nr)
    if b_kind == "constant":
        b = Operand(ctx.derived(1, f"packB{cfg.nr}mm",
                                lambda w: pack_b(np.asarray(w).reshape(*bb, k, n), cfg.nr)), packed=True)
        b_mat = np_ * k
    elif b_kind == "in place":
        b = Operand(ctx.buf(1), ld=n)
        b_mat = k * n
    else:
        nb = int(np.prod(bb, dtype=np.int64))
        dst = ctx.scratch(packed_b_bytes(cfg.nr, k, n, nb))
        launches.append(pack_b_launch(ctx.device, cfg.nr, src=ctx.buf(1), off=0, s1=0, s2=k * n, s_k=n, s_n=1, k=k,
                                      n=n, batch=nb, d2=nb, dst=dst, label=label))
        b = Operand(dst, packed=True)
        b_mat = np_ * k
    c = Operand(ctx.out(0), ld=n)

    strides = [_batch_strides(ba, out_batch, a_mat), _batch_strides(bb, out_batch, b_mat),
               _batch_strides(out_batch, out_batch, m * n)]
    dims, st = _collapse(list(out_batch), strides)
    # The kernel walks two batch levels; loop over any outer ones with offsets.
    inner = dims[-2:]
    outer = dims[:-2]
    ins = [s[-2:] for s in st]
    outs = [s[:-2] for s in st]
    if len(inner) == 0:
        inner, ins = [1], [[0], [0], [0]]
    if len(inner) == 1:
        inner, ins = [1] + inner, [[0] + s for s in ins]
    batch, d2 = inner[0] * inner[1], inner[1]
    for idx in np.ndindex(*outer) if outer else [()]:
        offs = [int(sum(i * s for i, s in zip(idx, o))) for o in outs]
        aa = Operand(a.arg, a.packed, offs[0], ins[0][0], ins[0][1], a.ld, a.ld2)
        bo = Operand(b.arg, b.packed, offs[1], ins[1][0], ins[1][1], b.ld)
        co = Operand(c.arg, False, offs[2], ins[2][0], ins[2][1], c.ld)
        zo = None if res is None else Operand(res, False, offs[2], ins[2][0], ins[2][1], c.ld)
        launches.append(gemm_launch(cfg, m=m, n=n, k=k, batch=batch, d2=d2, a=aa, b=bo, c=co, bias=bias,
                                    res=zo, alpha=alpha, act=act[0], act_alpha=act[1], act_beta=act[2],
                                    label=label))
    return launches
