"""The gemm.cl kernel family: tiles, host packing, the launch builder and its tile gates.

One kernel (kernels_cl/gemm.cl) computes C = act(alpha * A @ B + beta * bias + Z) for a
batch of matrices. Its tile sizes (MR x NR per work-item, vector width) are `-D` defines
picked from the device, and its operands are either packed into panels (aligned vector
loads, zero padded edges: weights packed once at plan time, activations by a pack kernel
or by im2col) or read strided/row-major. Shapes, strides and batch offsets are run-time
arguments so one program serves every layer.

Why a module of its own: every GEMM user builds on it (Gemm in gemm.py, MatMul/FusedMatMul in
matmul.py, the convolutions in conv.py, conv_gemm.py, conv_transpose.py and winograd.py, and
the tuner in runtime/tuning.py); it registers no op and imports no other lowering module but
base.py and common.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

import numpy as np

from ..errors import InvalidModel
from ..target import Target
from .base import Arg, Launch, Scratch, f32, i32, round_up, unaligned
from .common import grid
from .tunable import Family, Params, ShapeKey, choose, record_decision, register

# Activations the GEMM / depthwise epilogues fuse, and their ACT define (kernels_cl/activation.h):
# 0 is piecewise linear with run-time parameters, so the common ones share one program.
ACTIVATIONS = {"": 0, "Relu": 0, "Clip": 0, "LeakyRelu": 0, "Sigmoid": 4, "HardSigmoid": 5, "Tanh": 6, "Gelu": 7,
               "Swish": 8, "HardSwish": 9}  # Swish: x * Sigmoid(alpha x) (SiLU, quick-GELU), fused from its node forms
_INF = float("inf")


def act_params(act: str, alpha: float = 0.0, beta: float = 0.0) -> tuple:
    """(ACT define, (a, b, c) run-time parameters) for activation.h, from the ONNX op name and
    its alpha/beta (LeakyRelu alpha, Clip min/max, HardSigmoid alpha/beta, Swish alpha: the
    sigmoid's scale, 0 read as SiLU's 1 as the epilogues were written before it had one)."""
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
    if act == "Swish":
        return 8, (alpha or 1.0, -_INF, _INF)
    if act == "HardSwish":
        return 9, (1.0 / 6.0, 0.5, 0.0)
    return ACTIVATIONS[act], (1.0, -_INF, _INF)


@dataclass(frozen=True)
class GemmConfig:
    """Tile sizes for one device: each work-item computes MR rows x (VW*NV) columns; pfb is
    gemm.cl's PFB, how many k rows ahead an in-place B is prefetched (0: not); akb its AKB, the k
    block in which a strided A's rows are read as vectors (0: element by element); pfn its PF_NEXT
    in the transposed (C_TRANS) programs: 1 spreads the prefetch of the next weight panel over the
    current panel's work-items, 0 does not (see transposed_pfn)."""

    mr: int
    vw: int
    nv: int
    lsize: tuple
    pfb: int = 0
    akb: int = 0
    pfn: int = 1

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
    The CPU family prefetches an in-place B's rows CPU_PFB k steps ahead (gemm.cl PFB): measured
    on pocl, both drivers (16-float vectors), gemm.cl alone in turns, 64x576x3136 with B in
    place (8 x 48 tiles) 120 -> 163 GFLOP/s (Debian's pocl 3.1) and 71 -> 93 (PyPI's 3.0), under
    load; 4 and 16 close behind (the search tries them). A strided A's k block (AKB): see CPU_AKB.
    GPU family: small 4 x 4 tiles in 8 x 8 work-groups (within the device's work-group limit);
    correct anywhere, tuned by measurement; no prefetch (unmeasured).
    """
    if target.is_cpu_family:
        akb = min(16, max(4, target.preferred_vector_width_float)) if CPU_AKB else 0
        if target.preferred_vector_width_float >= 16:
            return GemmConfig(12, 16, 2, (1, 1, 1), CPU_PFB, akb)
        return GemmConfig(6, 8, 2, (1, 1, 1), CPU_PFB, akb)
    return GemmConfig(4, 4, 1, target.fit_group((8, 8, 1)))


CPU_PFB = 8
PFB_VALUES = (0, 4, 8, 16)
# Whether the CPU family's default reads a strided A by vector blocks of its preferred width
# (AKB): off, the search decides. Measured on pocl under heavy load from other work, gemm.cl alone
# and MatMul's kernel time in turns, 256x2304x196 and 64x576x3136 with A live: +15% on Debian's
# pocl 3.1 (LLVM 15: its element-wise loop spills the row pointers), -5 to -10% on PyPI's 3.0
# (LLVM 14 keeps them in registers there); repeated, the medians disagreed.
CPU_AKB = False
AKB_VALUES = (0, 4, 8, 16)


def gemm_config(target: Target) -> GemmConfig:
    """The tiles to lower with: the Target's tuned choice (runtime.tuning) when it has one."""
    if target.gemm_tiles is not None:
        mr, vw, nv, ls = target.gemm_tiles
        d = default_gemm_config(target)
        return GemmConfig(mr, vw, nv, tuple(ls), d.pfb, d.akb)
    return default_gemm_config(target)


# --- host-side packing (plan time, for constant operands) -----------------------------------------
def pack_a(a: np.ndarray, mr: int) -> np.ndarray:
    """[..., M, K] -> [..., ceil(M/mr), K, mr] (rows zero padded): the A panels of gemm.cl."""
    a = np.asarray(a, dtype=_packed_dtype(a))
    *lead, m, k = a.shape
    mp = max(round_up(m, mr), mr)
    if mp != m:
        a = np.pad(a, [(0, 0)] * len(lead) + [(0, mp - m), (0, 0)])
    # one copy: splitting M into (panel, row) is a view, the transpose happens while copying
    return _nonempty(a.reshape(*lead, mp // mr, mr, k).swapaxes(-1, -2))


def pack_b(b: np.ndarray, nr: int) -> np.ndarray:
    """[..., K, N] -> [..., ceil(N/nr), K, nr] (columns zero padded): the B panels of gemm.cl.
    `b` may be a transposed view (weights W^T): still one copy."""
    b = np.asarray(b, dtype=_packed_dtype(b))
    *lead, k, n = b.shape
    np_ = max(round_up(n, nr), nr)
    if np_ != n:
        b = np.pad(b, [(0, 0)] * len(lead) + [(0, 0), (0, np_ - n)])
    return _nonempty(b.reshape(*lead, k, np_ // nr, nr).swapaxes(-2, -3))


def _packed_dtype(a: np.ndarray) -> np.dtype:
    """Panels keep half storage (gemm.cl A_HALF / B_HALF), anything else packs as float32."""
    return np.dtype(np.float16) if np.asarray(a).dtype == np.float16 else np.dtype(np.float32)


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
    operand: A uses (row stride, k stride); B and C/Z use `ld` as the row stride. `half`: stored
    as half (gemm.cl's A_HALF, B_HALF, C_HALF; a residual is stored as C is).
    """

    arg: Arg
    packed: bool = False
    off: int = 0
    s1: int = 0
    s2: int = 0
    ld: int = 0
    ld2: int = 1
    half: bool = False


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
    half: bool = False  # stored as half (gemm.cl BIAS_HALF)


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
    if cfg.pfb and not b_packed:  # only in-place B loops prefetch: no program of its own otherwise
        defines["PFB"] = cfg.pfb
    if cfg.akb and not a_packed:
        defines["AKB"] = cfg.akb
    if act_code:
        defines["ACT"] = act_code
    if c_trans:
        defines["C_TRANS"] = 1
        if not cfg.pfn:  # PF_NEXT=1 is gemm.cl's default: those programs keep their keys
            defines["PF_NEXT"] = 0
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
    if res is not None and res.half != c.half:
        raise ValueError("gemm.cl reads the residual stored as C is (C_HALF)")
    for name, half in (("A_HALF", a.half), ("B_HALF", b.half), ("C_HALF", c.half),
                       ("BIAS_HALF", bias is not None and bias.half)):
        if half:
            defines[name] = 1
    if a.half and not defines["A_PACKED"] and "AKB" not in defines:
        # a strided half A: 16 k of a row converted as one vector, not a scalar per row per k step
        # (BERT-style d256 seq 128 on pocl, its FusedMatMuls' kernel time 24.8 -> 4.2 ms, under load)
        defines["AKB"] = 16
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
    return replace(cfg, mr=8, nv=3 if cfg.vw >= 16 and cfg.nv == 2 else cfg.nv)


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
    cfg = replace(cfg, nv=2, pfn=transposed_pfn(target))  # conv.py's transposed path takes NR = 2 x VW
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
    return replace(cfg, mr=best[1])


def transposed_pfn(target: Target) -> int:
    """gemm.cl's PF_NEXT for the CPU family's transposed GEMMs: on with 16-float vectors (the 12 x
    32 tiles it was written and measured with), off with narrower ones. Measured on the 2-vCPU
    guest (8-float vectors, 6 x 16 tiles), gemm.cl alone in turns under heavy load, medians of 21-31,
    both pocl devices: 512 x 49 x 2048 C_TRANS 2.79 -> 1.45 ms and 2.77 -> 1.46 ms, 2048 x 49 x 512
    2.93 -> 1.54 and 3.40 -> 2.04, 256 x 196 x 1024 2.65 -> 1.28 and 2.69 -> 1.50; pixel rows read in
    place (flag 8) 512 x 49 x 2048 3.14 -> 2.42 ms. Without it the transposed GEMM beats the plain
    one on packed pixel panels by 10-20% (512 x 49 x 2048: 1.41 vs 1.74 ms)."""
    return 1 if target.preferred_vector_width_float >= 16 else 0


def b_unpacked_ok(cfg: GemmConfig, n: int) -> bool:
    """Read a row-major B in place when N is whole column tiles or at least 4 of them: gemm.cl
    computes a ragged last tile as the last NR columns (overlapping its neighbour) with whole
    vector loads. Narrower ragged B's are packed: in place, each k reads a short row across cache
    lines that no prefetcher follows (SGEMM 512x4608x49: 38 GFLOP/s in place vs 59 packed), and
    below one tile the kernel would read B element by element over all of K (measured on pocl,
    256x512x784 with that path: 0.85 ms in place vs 0.50 ms packed)."""
    return n % cfg.nr == 0 or n >= 4 * cfg.nr


# --- the tunable family (lower/tunable.py): gemm.cl's tiles per GEMM shape ------------------------------
# Shape key: (M, N, K, B layout) with B "inplace" (row-major, read where it lies: a Gemm's or a
# 1x1/implicit conv's pixels) or "packed" (panels: im2col, or a Gemm whose B is packed). A is the
# weights, packed into MR-row panels at plan time, or (a fifth element "strided") a Gemm's live A
# read in place with row pitch K.
GEMM_ROWS = (4, 6, 8, 10, 12, 14, 16)
GEMM_VECTORS = (1, 2, 3, 4)
GPU_GROUPS = ((8, 8, 1), (16, 16, 1), (4, 4, 1), (16, 4, 1))


def gemm_key(m: int, n: int, k: int, b_layout: str, a_layout: str = "packed") -> ShapeKey:
    """The gemm family's shape key (see above); a live A read strided (a_layout "strided", row
    pitch K) adds a fifth element."""
    key = (int(m), int(n), int(k), b_layout)
    return key if a_layout == "packed" else key + (a_layout,)


def config_params(cfg: GemmConfig) -> Params:
    """A config as family parameters; "pfn" only where it is not gemm.cl's default 1 (the points
    and database entries written before it existed keep their spelling)."""
    p = {"mr": cfg.mr, "vw": cfg.vw, "nv": cfg.nv, "lsize": tuple(cfg.lsize), "pfb": cfg.pfb, "akb": cfg.akb}
    if cfg.pfn != 1:
        p["pfn"] = cfg.pfn
    return p


def params_config(p: Params) -> GemmConfig:
    return GemmConfig(int(p["mr"]), int(p["vw"]), int(p["nv"]), tuple(int(x) for x in p["lsize"]),
                      int(p.get("pfb", 0)), int(p.get("akb", 0)), int(p.get("pfn", 1)))


def gemm_space(target: Target, key: ShapeKey = ()) -> List[Params]:
    """gemm.cl's declared space on `target` (the family default first; the same for every key:
    the search measures one set of programs for all of a family's shapes).

    CPU family: one work-item per group; VW the device's preferred float width or half of it
    (gemm.cl: 4, 8 or 16); MR x NV vector accumulators between 4 and 28 (what the register file
    holds is the device's business: the measurement decides), each with the default's pfb/akb;
    then the default tiles with every PFB_VALUES (an in-place B's prefetch distance) and every
    AKB_VALUES (a strided A's k block): one at a time, not their product. GPU family: VW 4, small
    MR x NV, square-ish work-groups fitted to the device's limits; no prefetch, A element-wise."""
    d = config_params(gemm_config(target))
    out: List[Params] = [d]
    if target.is_cpu_family:
        w = target.preferred_vector_width_float
        widths = [v for v in (16, 8, 4) if v <= max(w, 4) and v >= max(w, 4) // 2]
        pts = [dict(d, mr=mr, vw=vw, nv=nv) for vw in widths for mr in GEMM_ROWS for nv in GEMM_VECTORS
               if 4 <= mr * nv <= 28]
        pts += [dict(d, pfb=v) for v in PFB_VALUES] + [dict(d, akb=v) for v in AKB_VALUES]
    else:
        pts = [dict(d, mr=mr, vw=4, nv=nv, lsize=tuple(target.fit_group(ls)))
               for ls in GPU_GROUPS for mr in (2, 4, 8) for nv in (1, 2)]
    for p in pts:
        if p not in out:
            out.append(p)
    return out


def _gemm_default(target: Target, key: ShapeKey) -> Params:
    m, n = key[0], key[1]
    return config_params(fit_rows(target, gemm_config(target), m, n))


def gemm_bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """gemm.cl on shape `key` with tiles `p`: A packed (or row-major, read strided, when the key's
    fifth element says "strided"), B in place (row-major, ld N) or packed as the key says, ReLU
    epilogue (buffers A, B, C; their byte sizes)."""
    from .base import Buf

    m, n, k, layout = key[:4]
    strided = len(key) > 4 and key[4] == "strided"
    cfg = params_config(p)
    mp = round_up(max(m, 1), cfg.mr)
    packed = layout == "packed" or not b_unpacked_ok(cfg, n)
    a = Operand(Buf("A"), ld=k, ld2=1) if strided else Operand(Buf("A"), packed=True)
    b = Operand(Buf("B"), packed=True) if packed else Operand(Buf("B"), ld=n)
    nb = packed_b_bytes(cfg.nr, k, n, 1) if packed else 4 * n * k
    launch = gemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=a, b=b, c=Operand(Buf("C"), ld=n), act="Relu")
    return launch, {"A": 4 * (m if strided else mp) * k, "B": nb, "C": 4 * m * n}


GEMM_FAMILY = register(Family("gemm", "gemm", gemm_space, _gemm_default, gemm_bench,
                              flops=lambda key: 2.0 * key[0] * key[1] * key[2], priority=0, tolerance=1e-4))


def tuned_tiles(target: Target, key: ShapeKey, fallback: GemmConfig, label: str = "",
                valid=None) -> Tuple[GemmConfig, str]:
    """The gemm.cl tiles for this GEMM: the tuning database's for `key` (a valid point of the
    space that `valid(cfg)` accepts: e.g. one that keeps a conv's path), else `fallback` (the
    Target's tiles fitted as the lowering always has). (config, "db" | "default")."""
    def ok(p: Params) -> bool:
        try:
            cfg = params_config(p)
        except (KeyError, TypeError, ValueError):
            return False
        return (cfg.vw in (4, 8, 16) and cfg.mr > 0 and cfg.nv > 0 and cfg.pfb >= 0 and cfg.akb in AKB_VALUES
                and cfg.pfn in (0, 1) and (valid is None or bool(valid(cfg))))

    p, source = choose(target, "gemm", key, valid=ok)
    cfg = params_config(p) if source == "db" else fallback
    if label:
        record_decision(label, "gemm", key, config_params(cfg), source)
    return cfg, source
