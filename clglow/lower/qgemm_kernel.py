"""The qgemm.cl kernel family: 8-bit x 8-bit -> exact int32 GEMM tiles, their declared search
space, host packing, zero-point sums and the launch builders.

Why a module of its own: the integer matmul lowerings (lower/qgemm.py), the integer
convolutions (lower/qconv.py) and the tuner share it; like gemm_kernel.py it registers no op
and imports no other lowering module but base.py and common.py.

The tile parameters are `-D` defines (kernels_cl/qgemm.cl): MR rows x NR = VW * NV columns per
work-item, KU the k-loop unroll, KC the B layout and inner step (1: one k per step, int vectors
of VW columns, int32 products or (fa=1) exact float sums: the CPU family's default; 2: k pairs as
16-bit lanes, two products summed into each int32 lane (a portable expression of a paired
multiply-add); 16: 16 k per step as pairs of 16-bit
products summed into int32 lanes (every lane busy however few columns: the CPU family's choice
for products of at most 4 columns, fit_columns); 4: four k per step as
4-wide dot products: the GPU family, the cl_khr_integer_dot_product builtin where the device
compiler defines that extension, else the same sum written out), and the work-group. `qgemm_space(target)` declares every valid point
(the default first) as parameter dicts for the tuner; the defaults are the Target family's.
The zero points are applied in the epilogue through row sums of A and column sums of B
(constants summed at plan time, live operands by qrowsum / qcolsum), so the inner loop is a
plain integer product of the stored 8-bit values (int8 x int8, uint8 x int8, int8 x uint8 and
uint8 x uint8: every product and sum exact in int32).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Tuple

import numpy as np

from ..target import Target
from .base import Arg, Launch, Scratch, i32, round_up, unaligned
from .common import grid
from .gemm_kernel import Operand
from .tunable import Family, Params, ShapeKey, choose, record_decision, register

INT8 = np.dtype(np.int8)
UINT8 = np.dtype(np.uint8)
QTYPES = {INT8, UINT8}
_CL = {INT8: "char", UINT8: "uchar", np.dtype(np.int32): "int", np.dtype(np.float32): "float"}

# Epilogues (EPI define): raw int32, requantised to 8 bits, float.
EPI_INT, EPI_QUANT, EPI_FLOAT = 0, 1, 2
FLAG_ZA, FLAG_ZB, FLAG_BIAS, FLAG_YZP = 1, 2, 4, 8


@dataclass(frozen=True)
class QGemmConfig:
    """One point of the family: MR x (VW * NV) tiles, k unroll KU, k chunk KC (B layout and inner
    step: 1, 4 or 16), work-group."""

    mr: int
    vw: int
    nv: int
    ku: int = 1
    kc: int = 1
    lsize: tuple = (1, 1, 1)
    fa: int = 0

    @property
    def nr(self) -> int:
        return self.vw * self.nv

    def params(self) -> dict:
        """The point as the tuner's parameter dict."""
        p = {"mr": self.mr, "vw": self.vw, "nv": self.nv, "ku": self.ku, "kc": self.kc,
             "lsize": tuple(self.lsize)}
        if self.fa:
            p["fa"] = self.fa
        return p


def default_qgemm_config(target: Target) -> QGemmConfig:
    """The Target family's default. CPU family: KC=1 tiles of 8 rows x 3 vectors of the float
    vector width with exact float accumulation (QFA: the 8-bit products summed in float32 blocks
    that cannot round, then int32), k unrolled 4 times, one work-item per group: the portable form
    that builds on every compiler and measured at the fp32 GEMM's rate on pocl 3.1 (Zen 5 host,
    under load: 185-209 GOP/s against 118-155 for int32 products at 4 x 16 x 4); the tuner
    measures the KC=2 pair and KC=16 forms per shape (`clglow tune`). GPU family: 4 x 4
    dot-product tiles (KC=4) in 8 x 8 work-groups."""
    if target.is_cpu_family:
        vw = 16 if target.preferred_vector_width_float >= 16 else 8
        return QGemmConfig(8, vw, 3, 4, 1, (1, 1, 1), fa=1)
    return QGemmConfig(4, 4, 1, 1, 4, target.fit_group((8, 8, 1)))


def qgemm_space(target: Target) -> list:
    """Every valid QGemmConfig on this Target, the default first: MR, VW, NV, KU and KC of the
    Target's family (constraints from its vector width and work-group limit only)."""
    default = default_qgemm_config(target)
    out = [default]
    for cfg in _space_points(target):
        if cfg not in out:
            out.append(cfg)
    return out


def _space_points(target: Target) -> Iterator[QGemmConfig]:
    if target.is_cpu_family:
        for mr in (2, 3, 4, 6, 8):  # KC=16: MR x NR int8 accumulators (fit_columns' GEMV tiles too)
            for nr in (1, 2, 3, 4, 6):
                if mr * nr <= 24:
                    for ku in (1, 2):
                        yield QGemmConfig(mr, nr, 1, ku, 16, (1, 1, 1))
        widths = [w for w in (4, 8, 16) if w <= max(4, target.preferred_vector_width_float)]
        for vw in widths:  # KC=1: MR x NV vectors of VW int lanes
            for nv in (1, 2, 3, 4):
                for mr in (4, 6, 8, 12):
                    if mr * nv <= 24:  # accumulators within the vector registers
                        for ku in (1, 4):
                            for fa in (0, 1):  # int32 products, or exact float sums (QFA)
                                yield QGemmConfig(mr, vw, nv, ku, 1, (1, 1, 1), fa=fa)
        for vw in (w for w in widths if w >= 8):  # KC=2: pairs of k as 16-bit lanes
            for nv in (1, 2, 3, 4):
                for mr in (4, 6, 8):
                    if mr * nv <= 24:
                        for ku in (1, 2):
                            yield QGemmConfig(mr, vw, nv, ku, 2, (1, 1, 1))
        return
    for mr in (2, 4, 8):
        for vw in (2, 4, 8):
            for ls in ((8, 8, 1), (16, 4, 1), (4, 16, 1), (16, 16, 1)):
                if ls[0] * ls[1] <= target.max_work_group_size:
                    yield QGemmConfig(mr, vw, 1, 1, 4, target.fit_group(ls))


def qgemm_config(target: Target) -> QGemmConfig:
    """The Target family's default config (tuned_qgemm gives the one for a shape)."""
    return default_qgemm_config(target)


# --- the tunable family (lower/tunable.py): qgemm.cl's tiles per integer GEMM shape -----------------
# Shape key: (M, N, K): A row-major in place, B in panels, int32 out (the epilogue costs the same
# for every point, so the raw product is what is measured).
def _params_config(p: Params) -> QGemmConfig:
    return QGemmConfig(int(p["mr"]), int(p["vw"]), int(p["nv"]), int(p["ku"]), int(p["kc"]),
                       tuple(int(x) for x in p["lsize"]), int(p.get("fa", 0)))


def _valid(p: Params) -> bool:
    try:
        c = _params_config(p)
    except (KeyError, TypeError, ValueError):
        return False
    ok_vw = c.vw in (2, 3, 4, 8, 16) if c.kc == 1 else (c.vw in (4, 8, 16) if c.kc == 2 else c.vw >= 1)
    forms = c.fa == 0 or c.kc == 1
    return (c.kc in (1, 2, 4, 16) and c.mr > 0 and c.nv > 0 and c.ku > 0 and ok_vw and forms
            and (c.kc in (1, 2, 4) or c.nv == 1))


def _q_space(target: Target, key: ShapeKey = ()) -> List[Params]:
    return [c.params() for c in qgemm_space(target)]


def _q_default(target: Target, key: ShapeKey) -> Params:
    n = int(key[1]) if len(key) > 1 else 1 << 30
    m = int(key[0]) if key else 1
    return fit_columns(default_qgemm_config(target), n, m).params()


def qgemm_bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """qgemm.cl on shape `key` = (M, N, K) with tiles `p`: uint8 A in place, int8 B panels, int32 C
    (buffers A, B, C; their byte sizes)."""
    from .base import Buf

    m, n, k = (int(v) for v in key[:3])
    cfg = _params_config(p)
    launch = qgemm_launch(cfg, (UINT8, INT8, np.dtype(np.int32)), m=m, n=n, k=k, batch=1, d2=1,
                          a=Operand(Buf("A"), ld=k), b=Operand(Buf("B")), c=Operand(Buf("C"), ld=n),
                          epi=QEpilogue(epi=EPI_INT))
    return launch, {"A": round_up(max(m * k, 1), 4), "B": round_up(panel_elems(cfg, k, n), 4), "C": 4 * max(m * n, 1)}


QGEMM_FAMILY = register(Family("qgemm", "qgemm", _q_space, _q_default, qgemm_bench,
                               flops=lambda key: 2.0 * key[0] * key[1] * key[2], priority=1, tolerance=0.0))


def tuned_qgemm(target: Target, m: int, n: int, k: int, label: str = "") -> QGemmConfig:
    """The tiles for this integer GEMM: the tuning database's for (M, N, K) when it holds a valid
    point, else the family default narrowed to the shape (fit_columns)."""
    key = (int(m), int(n), int(k))
    p, source = choose(target, "qgemm", key, valid=_valid)
    cfg = _params_config(p) if source == "db" else fit_columns(default_qgemm_config(target), n, m)
    if label:
        record_decision(label, "qgemm", key, cfg.params(), source)
    return cfg


def fit_columns(cfg: QGemmConfig, n: int, m: int = 1) -> QGemmConfig:
    """A KC=1 config fitted to the GEMM's shape. With few columns (a conv's last layers: 16, 4
    or 1 pixels; a GEMV): fewer column vectors, or narrower ones, so that the tile computes few
    padded columns, with taller tiles where that frees accumulators (at most 16 vectors). Without
    it a 1-pixel layer computes 64 columns for 1 (ResNet-18 at 32x32: QOperator 25 ms against
    5.5 ms for its float run, on a loaded pocl). Otherwise the tile of the same accumulator count
    (MR x NV) that computes the fewest padded rows and columns (fit_tile). Other configs are
    returned as they are."""
    if cfg.kc != 1:
        return cfg
    if n >= cfg.nr:
        return fit_tile(cfg, n, m)
    if n <= 4:  # a GEMV-like product: dot products along k (KC=16) use every lane, columns don't
        # (measured on pocl, 512 x 4608 x 1: 0.19 ms against 0.84 with 4-lane columns;
        # 256 x 2304 x 4: 0.15 against 0.24; at 16 columns the column vectors win again)
        return QGemmConfig(8 if n == 1 else 4, max(n, 1), 1, 1, 16, cfg.lsize)
    vw, nv = cfg.vw, -(-n // cfg.vw)
    while nv == 1 and vw > 4 and n <= vw // 2:
        vw //= 2
    mr = min(12, max(cfg.mr, 16 // nv))
    return QGemmConfig(mr, vw, nv, cfg.ku, 1, cfg.lsize, fa=cfg.fa)


def fit_tile(cfg: QGemmConfig, n: int, m: int = 1) -> QGemmConfig:
    """Among the tiles with cfg's accumulator count (MR x NV the same, NV 1-4, MR 4-12: the same
    registers and about the same loads per product), the one whose padded M x N product is at
    least 1/16 smaller than cfg's, the smallest (more column vectors first on a tie: fewer row
    broadcasts per product); cfg where none is. ResNet-50's 7x7 layers (49 pixels) computed 96
    columns with 8 x 48 tiles, 64 with 6 x 64: a third fewer products, the same kernel."""
    def padded(c: QGemmConfig) -> int:
        return round_up(max(m, 1), c.mr) * round_up(max(n, 1), c.nr)

    best = cfg
    for nv in range(4, 0, -1):
        mr, rem = divmod(cfg.mr * cfg.nv, nv)
        if rem or not 4 <= mr <= 12 or mr % 2:
            continue
        c = QGemmConfig(mr, cfg.vw, nv, cfg.ku, cfg.kc, cfg.lsize, fa=cfg.fa)
        if padded(c) < padded(best) and 16 * padded(c) <= 15 * padded(cfg):
            best = c
    return best


# --- host side ----------------------------------------------------------------------------------
def kpad(cfg: QGemmConfig, k: int) -> int:
    """K as the panels store it (a multiple of KC)."""
    return round_up(k, cfg.kc)


def im2col_rows(cfg: QGemmConfig, k: int) -> int:
    """qim2col's work-items along k: one per k pair where KC=2 panels are 16-column multiples
    (qgemm.cl's QIM_PAIRS), else one per padded k."""
    return -(-k // 2) if cfg.kc == 2 and cfg.nr % 16 == 0 else kpad(cfg, k)


def panel_elems(cfg: QGemmConfig, k: int, n: int) -> int:
    """Elements of one [K, N] matrix in panels (at least one: OpenCL buffers are never empty)."""
    return max(round_up(max(n, 1), cfg.nr) * max(kpad(cfg, k), 1), 1)


def pack_b_host(b: np.ndarray, cfg: QGemmConfig) -> np.ndarray:
    """[..., K, N] 8-bit -> the panels qgemm.cl reads, zero padded, per leading matrix."""
    b = np.asarray(b)
    *lead, k, n = b.shape
    npad, kp = round_up(max(n, 1), cfg.nr), kpad(cfg, k)
    b = np.pad(b, [(0, 0)] * len(lead) + [(0, kp - k), (0, npad - n)])
    if cfg.kc > 1:  # [..., KQ, KC, P, NR] -> [..., P, KQ, NR, KC]
        t = b.reshape(*lead, kp // cfg.kc, cfg.kc, npad // cfg.nr, cfg.nr)
        t = np.moveaxis(t, -2, -4).swapaxes(-1, -2)
    else:  # [..., K, P, NR] -> [..., P, K, NR]
        t = np.moveaxis(b.reshape(*lead, kp, npad // cfg.nr, cfg.nr), -2, -3)
    out = np.ascontiguousarray(t).reshape(-1)
    return out if out.size else np.zeros(1, b.dtype)


@dataclass
class QEpilogue:
    """What qgemm.cl does with each int32 sum (see its header): EPI, the zero points (buffer and
    stride per row / column, None when absent or known zero), the sums they need, the bias
    (buffer, row / column strides; float: added after scaling), the scales (row, column, output)
    and the output zero point with the clamp bounds [qlo, qhi]."""

    epi: int = EPI_INT
    zpa: Optional[tuple] = None  # (arg, stride)
    zpb: Optional[tuple] = None
    rowsum: Optional[Arg] = None
    colsum: Optional[Arg] = None
    bias: Optional[tuple] = None  # (arg, row stride, column stride)
    bias_float: bool = False
    s_row: Optional[tuple] = None  # (arg, stride)
    s_col: Optional[tuple] = None
    s_y: Optional[Arg] = None
    y_zp: Optional[Arg] = None
    qlo: int = 0
    qhi: int = 0
    rs: tuple = (0, 0)  # global row index = z1*rs[0] + z2*rs[1] + m
    cs: tuple = (0, 0)
    extra: dict = field(default_factory=dict)

    def args(self, dummy: Arg) -> list:
        """The EPI_PARAMS arguments (absent buffers: `dummy`, never read)."""
        d = dummy
        flags = ((FLAG_ZA if self.zpa else 0) | (FLAG_ZB if self.zpb else 0) | (FLAG_BIAS if self.bias else 0)
                 | (FLAG_YZP if self.y_zp is not None else 0))
        zpa, zpa_s = self.zpa or (d, 0)
        zpb, zpb_s = self.zpb or (d, 0)
        bias, brs, bcs = self.bias or (d, 0, 0)
        sr, sr_s = self.s_row or (d, 0)
        sc, sc_s = self.s_col or (d, 0)
        return [unaligned(self.rowsum or d), unaligned(self.colsum or d), unaligned(zpa), i32(zpa_s),
                unaligned(zpb), i32(zpb_s), unaligned(bias), i32(brs), i32(bcs), unaligned(sr), i32(sr_s),
                unaligned(sc), i32(sc_s), unaligned(self.s_y or d), unaligned(self.y_zp if self.y_zp is not None else d),
                i32(self.qlo), i32(self.qhi), i32(flags)]


def qdefines(cfg: QGemmConfig, ta: np.dtype, tb: np.dtype, tc: np.dtype, epi: QEpilogue) -> dict:
    """The -D defines of one qgemm.cl program."""
    d = {"TA": _CL[np.dtype(ta)], "TB": _CL[np.dtype(tb)], "TC": _CL[np.dtype(tc)], "EPI": epi.epi, "MR": cfg.mr,
         "VW": cfg.vw, "NV": cfg.nv, "KU": cfg.ku, "KC": cfg.kc}
    if epi.bias_float:
        d["BIAS_FLOAT"] = 1
    if cfg.fa:
        d["QFA"] = 1
        d["QFB"] = exact_float_block(ta, tb)
    return d


def exact_float_block(ta: np.dtype, tb: np.dtype) -> int:
    """The most k whose products of these 8-bit types a float32 sum holds exactly (|sum| <= 2^24):
    256 for uint8 x uint8 (products up to 65025), 512 with one signed side, 1024 for int8 x int8."""
    big = max(abs(int(x) * int(y)) for x in (np.iinfo(ta).min, np.iinfo(ta).max)
              for y in (np.iinfo(tb).min, np.iinfo(tb).max))
    block = 1
    while block * 2 * big <= 1 << 24:
        block *= 2
    return block


def qgemm_launch(cfg: QGemmConfig, types: tuple, *, m: int, n: int, k: int, batch: int, d2: int,
                 a: Operand, b: Operand, c: Operand, epi: QEpilogue, label: str = "", a16: bool = False,
                 b_direct: bool = False) -> Launch:
    """C[z] = epilogue(A[z] @ B[z]) over `batch` z's; `types` = (A, B, C) numpy dtypes; `a16`: A holds
    the 8-bit values widened to int16 (widen_a; KC=2 only). B is in panels, or (`b_direct`, KC=1
    or 2 tiles) row-major [K, N] rows `b.ld` apart, read in place (B_DIRECT)."""
    if a16 and cfg.kc != 2:
        raise ValueError("int16 A (A16) is a KC=2 layout")
    if b_direct and cfg.kc not in (1, 2):
        raise ValueError("B read in place (B_DIRECT) is a KC=1 or KC=2 layout")
    barg = unaligned(b.arg) if b_direct else b.arg
    head = [unaligned(a.arg), i32(a.off), i32(a.s1), i32(a.s2), i32(a.ld), barg, i32(b.off), i32(b.s1), i32(b.s2),
            i32(b.ld), c.arg, i32(c.off), i32(c.s1), i32(c.s2), i32(c.ld)]
    tail = [i32(max(d2, 1)), i32(epi.rs[0]), i32(epi.rs[1]), i32(epi.cs[0]), i32(epi.cs[1])] + epi.args(c.arg)
    ls = cfg.lsize
    gsize = (round_up(-(-m // cfg.mr), ls[0]), round_up(-(-n // cfg.nr), ls[1]), round_up(max(batch, 1), ls[2]))
    defines = qdefines(cfg, *types, epi)
    if a16:
        defines["A16"] = 1
    if b_direct:
        defines["B_DIRECT"] = 1
    return Launch("qgemm", "qgemm", gsize, head + [i32(m), i32(n), i32(k)] + tail, ls,
                  defines, label, noop_args=head + [i32(0), i32(0), i32(0)] + tail)


def widen_a(cfg: QGemmConfig, a: np.ndarray) -> Optional[np.ndarray]:
    """Constant 8-bit A as int16 for KC=2 tiles (each row's k pair then one 32-bit broadcast load:
    4 instructions fewer per row and pair on x86), None for other tiles."""
    return np.ascontiguousarray(a, np.int16) if cfg.kc == 2 else None


def side_defines(cfg: QGemmConfig, ta: np.dtype, tb: np.dtype) -> dict:
    """Defines of the helper kernels (packing, sums, im2col: the panel layout and the types)."""
    return {"TA": _CL[np.dtype(ta)], "TB": _CL[np.dtype(tb)], "VW": cfg.vw, "NV": cfg.nv, "KC": cfg.kc}


def qpack_launch(target: Target, cfg: QGemmConfig, tb: np.dtype, *, src: Arg, off: int, s1: int, s2: int,
                 s_k: int, s_n: int, k: int, n: int, batch: int, d2: int, dst: Scratch, label: str = "") -> Launch:
    """Pack `batch` strided 8-bit [K, N] matrices into panels (panel_elems(cfg, k, n) apart)."""
    panels = panel_elems(cfg, k, n)
    gsize, ls = grid(target, (round_up(max(n, 1), cfg.nr), kpad(cfg, k), max(batch, 1)), (cfg.nr, 4, 1))
    args = [unaligned(src), i32(off), i32(s1), i32(s2), i32(s_k), i32(s_n), dst, i32(panels), i32(k), i32(n),
            i32(max(d2, 1))]
    return Launch("qgemm", "qpack_b", gsize, args, ls, side_defines(cfg, tb, tb), label)


def qcolsum_launch(target: Target, cfg: QGemmConfig, tb: np.dtype, *, panels_arg: Arg, k: int, n: int,
                   batch: int, dst: Arg, label: str = "") -> Launch:
    """colsum[z*N + n] of `batch` packed B matrices."""
    gsize, ls = grid(target, (max(n, 1), max(batch, 1)), (64, 1))
    return Launch("qgemm", "qcolsum", gsize, [panels_arg, i32(panel_elems(cfg, k, n)), i32(k), i32(n), dst], ls,
                  side_defines(cfg, tb, tb), label)


def qrowsum_launch(target: Target, cfg: QGemmConfig, ta: np.dtype, *, a: Operand, m: int, k: int, batch: int,
                   d2: int, dst: Arg, label: str = "") -> Launch:
    """rowsum[z*M + m] of `batch` row-major A matrices (as qgemm reads them)."""
    gsize, ls = grid(target, (max(m, 1), max(batch, 1)), (64, 1))
    return Launch("qgemm", "qrowsum", gsize, [unaligned(a.arg), i32(a.off), i32(a.s1), i32(a.s2), i32(a.ld), i32(m),
                                             i32(k), i32(max(d2, 1)), dst], ls, side_defines(cfg, ta, ta), label)


def int_bytes(n: int) -> int:
    """Bytes of n int32 values (at least one)."""
    return 4 * max(int(n), 1)


__all__ = ["INT8", "UINT8", "QTYPES", "EPI_INT", "EPI_QUANT", "EPI_FLOAT", "QGemmConfig", "default_qgemm_config",
           "qgemm_space", "qgemm_config", "fit_columns", "fit_tile", "qgemm_bench", "QGEMM_FAMILY", "tuned_qgemm", "kpad",
           "im2col_rows", "panel_elems", "pack_b_host", "QEpilogue", "qdefines", "exact_float_block",
           "qgemm_launch", "widen_a", "side_defines", "qpack_launch", "qcolsum_launch", "qrowsum_launch", "int_bytes"]
