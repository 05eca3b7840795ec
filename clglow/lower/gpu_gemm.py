"""The xgemm.cl kernel family: GEMM on work-group tiles staged through local memory (GPU family).

kernels_cl/xgemm.cl computes C = act(alpha * A @ B + beta * bias + Z) for a batch of matrices,
like gemm.cl, but as a GPU wants it: a work-group of MDIMC x NDIMC work-items computes an
MWG x NWG tile of C, staging KWG-deep slices of A and B in __local memory between barriers, each
work-item keeping MWI x NWI = (MWG / MDIMC) x (NWG / NDIMC) accumulators. Its parameters are the
space of CLBlast's xgemm (tile sizes, thread shape, vector widths of the local reads, strided or
contiguous thread mapping, padding of the local rows); they are `-D` defines, while shapes,
strides and batch offsets are run-time arguments, so one program serves every layer.

Operands are read where they lie, through their strides (row-major, transposed or any view;
weights need no packing), or B as im2col.cl's panels of NWG columns (a convolution's pixels);
edges are zeros staged in local memory, so any M, N, K work.

When it applies (`xgemm_applicable`): the GPU family on a device with dedicated local memory
(`Target.has_local_memory`: real GPUs, Oclgrind). pocl's local memory is emulated in global
memory (type "global"): there the GPU family keeps gemm.cl's work-group tiles, unless a test
forces a Target with local_mem_type="local". Which configurations a device may run is
`search_space(target)` (work-group size and local memory within its limits); the first one is
the default, and runtime.tuning measures them all on a device where xgemm applies and stores the
fastest (`Target.xgemm_tiles`, which `xgemm_config` returns).

Why a module of its own: gemm_kernel.py owns gemm.cl's family; this one owns xgemm.cl's, and Gemm
(gemm.py), MatMul/FusedMatMul (matmul.py) and the convolutions (conv.py) choose between them.
It imports no other lowering module but base.py, gemm_kernel.py's operand records and gpu_gemv.py
(the skinny GEMMs that `xgemm_launch` hands over: 1 to 4 rows).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..errors import InvalidModel
from ..target import Target
from .base import Launch, f32, i32, unaligned
from .gemm_kernel import ACTIVATIONS, Bias, Operand, act_params
from .gpu_gemv import MAX_ROWS, gemv_applicable, gemv_launch, storage_defines
from .tunable import Family, Params, ShapeKey, choose, register


@dataclass(frozen=True)
class XgemmConfig:
    """One point of xgemm.cl's parameter space (see the module docstring and the kernel's header)."""

    mwg: int = 64
    nwg: int = 64
    kwg: int = 16
    mdimc: int = 16
    ndimc: int = 16
    vwm: int = 4
    vwn: int = 4
    strm: int = 0
    strn: int = 0
    pad: int = 1

    @property
    def mwi(self) -> int:
        return self.mwg // self.mdimc

    @property
    def nwi(self) -> int:
        return self.nwg // self.ndimc

    @property
    def threads(self) -> int:
        return self.mdimc * self.ndimc

    @property
    def local_bytes(self) -> int:
        """Local memory of one work-group: the A and B slices, padded rows included."""
        return 4 * self.kwg * (self.mwg + self.pad + self.nwg + self.pad)

    @property
    def lsize(self) -> tuple:
        return (self.ndimc, self.mdimc, 1)

    def why_not(self, target: Target) -> Optional[str]:
        """None when `target` can run this configuration, else why not (its limits, or the
        parameters themselves)."""
        if self.mwg % self.mdimc or self.nwg % self.ndimc:
            return f"tile {self.mwg}x{self.nwg} is not whole work-items of {self.mdimc}x{self.ndimc}"
        if self.mwi % self.vwm or self.nwi % self.vwn:
            return f"per-work-item {self.mwi}x{self.nwi} is not whole vectors of {self.vwm}x{self.vwn}"
        if self.threads > target.max_work_group_size:
            return f"{self.threads} work-items exceed the device's work-group limit {target.max_work_group_size}"
        sizes = tuple(target.max_work_item_sizes) + (1, 1)
        if self.ndimc > sizes[0] or self.mdimc > sizes[1]:
            return f"local size {self.lsize} exceeds the device's work-item sizes {target.max_work_item_sizes}"
        if self.local_bytes > target.local_mem_size:
            return f"{self.local_bytes} bytes of local memory exceed the device's {target.local_mem_size}"
        return None

    def as_tuple(self) -> tuple:
        """The configuration as plain ints in field order: what `Target.xgemm_tiles` and the
        tuner's JSON hold (a Target stays free of lowering types)."""
        return dataclasses.astuple(self)

    @classmethod
    def from_tuple(cls, values) -> "XgemmConfig":
        """The configuration of `as_tuple`'s ints (ValueError/TypeError when malformed)."""
        values = tuple(int(v) for v in values)
        if len(values) != len(dataclasses.fields(cls)):
            raise ValueError(f"an xgemm configuration has {len(dataclasses.fields(cls))} values, not {len(values)}")
        return cls(*values)

    def label(self) -> str:
        return (f"{self.mwg}x{self.nwg}x{self.kwg}/{self.mdimc}x{self.ndimc}/v{self.vwm}{self.vwn}"
                f"/s{self.strm}{self.strn}/p{self.pad}")


# The declared search space, the default first: what the tuner may measure on a device (each
# filtered by `why_not`). 8x8 outputs per work-item in 16x16 groups is the usual desktop-GPU
# optimum in CLBlast's database; 4x4 in 16x16 or 8x8 groups for devices with fewer registers or
# smaller groups; the 16x16 tile for small work-group limits.
SEARCH_SPACE = (
    XgemmConfig(64, 64, 16, 16, 16, 4, 4, 0, 0, 1),
    XgemmConfig(128, 128, 16, 16, 16, 4, 4, 1, 1, 0),
    XgemmConfig(64, 64, 16, 8, 8, 4, 4, 1, 1, 0),
    XgemmConfig(64, 128, 16, 16, 16, 4, 8, 1, 1, 0),
    XgemmConfig(32, 32, 16, 8, 8, 4, 4, 0, 0, 1),
    XgemmConfig(32, 64, 8, 8, 16, 2, 4, 0, 1, 1),
    XgemmConfig(16, 16, 16, 4, 4, 2, 2, 0, 0, 0),
)


def search_space(target: Target) -> List[XgemmConfig]:
    """The configurations of SEARCH_SPACE this device can run (the default first)."""
    return [c for c in SEARCH_SPACE if c.why_not(target) is None]


def xgemm_config(target: Target) -> Optional[XgemmConfig]:
    """The configuration to lower with on `target`: the tuner's measured choice
    (`Target.xgemm_tiles`, runtime.tuning) when the device can run it, else the first of its
    search space; None when none fits."""
    if target.xgemm_tiles is not None:
        try:
            chosen = XgemmConfig.from_tuple(target.xgemm_tiles)
        except (TypeError, ValueError):
            chosen = None
        if chosen is not None and chosen.why_not(target) is None:
            return chosen
    space = search_space(target)
    return space[0] if space else None


def xgemm_applicable(target: Target) -> Optional[str]:
    """None when GEMMs on `target` run as xgemm.cl, else why not: the GPU family, dedicated local
    memory (not pocl's emulated one), and a configuration that fits the device."""
    if target.is_cpu_family:
        return "the CPU family (register-blocked gemm.cl tiles)"
    if not target.has_local_memory:
        return f"no dedicated local memory (type {target.local_mem_type!r})"
    if xgemm_config(target) is None:
        return "no xgemm configuration fits the device's work-group and local-memory limits"
    return None


@dataclass(frozen=True)
class ConvGather:
    """A convolution's shapes for xgemm.cl's B_CONV mode (implicit GEMM: B's tile gathered from
    X into local memory, the padding by bounds): input h x w, kh x kw taps, strides, begin
    pads, dilations, ow output columns. Run-time arguments: one program serves every conv."""

    h: int
    w: int
    kh: int
    kw: int
    ow: int
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    dh: int = 1
    dw: int = 1

    def args(self) -> list:
        """The kernel's trailing CONV_ARGS, in its order (the divisors' float reciprocals last:
        xgemm.cl's DIV_BY, exact below MAX_GATHER_INDEX)."""
        ints = (self.h, self.w, self.kw, self.kh * self.kw, self.ow, self.sh, self.sw, self.ph, self.pw, self.dh,
                self.dw)
        return [i32(v) for v in ints] + [f32(1.0 / d) for d in (self.kw, self.kh * self.kw, self.ow)]


# xgemm.cl's B_CONV divides K and N indices by float reciprocals (DIV_BY): exact below 2^22.
MAX_GATHER_INDEX = 1 << 22


def xgemm_defines(cfg: XgemmConfig, *, a_kfast: bool, b_nfast: bool, b_panel: bool, act_code: int = 0,
                  b_conv: bool = False) -> dict:
    """The -D defines of one xgemm.cl program: the configuration and the operands' fast dimensions
    (B_CONV only where set: the plain GEMM's programs keep their options)."""
    d = {"MWG": cfg.mwg, "NWG": cfg.nwg, "KWG": cfg.kwg, "MDIMC": cfg.mdimc, "NDIMC": cfg.ndimc,
         "VWM": cfg.vwm, "VWN": cfg.vwn, "STRM": cfg.strm, "STRN": cfg.strn, "PADA": cfg.pad, "PADB": cfg.pad,
         "A_KFAST": int(a_kfast), "B_NFAST": int(b_nfast), "B_PANEL": int(b_panel)}
    if b_conv:
        d["B_CONV"] = 1
    if act_code:
        d["ACT"] = act_code
    return d


def xgemm_launch(cfg: XgemmConfig, *, m: int, n: int, k: int, batch: int, d2: int, a: Operand, b: Operand,
                 c: Operand, bias: Optional[Bias] = None, res: Optional[Operand] = None, alpha: float = 1.0,
                 act: str = "", act_alpha: float = 0.0, act_beta: float = 0.0, label: str = "") -> Launch:
    """The GPU family's GEMM launch for C[z] = act(alpha * A[z] @ B[z] + bias + res) over `batch` z's:
    xgemm.cl's tiles, or for a skinny GEMM (1 to 4 rows, B unpacked) gpu_gemv.cl (lower/gpu_gemv.py)
    within the work-group shape of `cfg`, which the device runs.

    Operands as gemm_kernel.Operand: A at a.ld * m + a.ld2 * k; B at b.ld * k + b.ld2 * n, or, packed,
    im2col panels of cfg.nwg columns; C (and res) rows c.ld apart. A packed A is not read here."""
    if gemv_applicable(m, b) is None and not a.packed:
        return gemv_launch(m=m, n=n, k=k, batch=batch, d2=d2, a=a, b=b, c=c, limits=(cfg.ndimc, cfg.mdimc),
                           bias=bias, res=res, alpha=alpha, act=act, act_alpha=act_alpha, act_beta=act_beta,
                           label=label)
    return tiled_launch(cfg, m=m, n=n, k=k, batch=batch, d2=d2, a=a, b=b, c=c, bias=bias, res=res, alpha=alpha,
                        act=act, act_alpha=act_alpha, act_beta=act_beta, label=label)


def tiled_launch(cfg: XgemmConfig, *, m: int, n: int, k: int, batch: int, d2: int, a: Operand, b: Operand,
                 c: Operand, bias: Optional[Bias] = None, res: Optional[Operand] = None, alpha: float = 1.0,
                 act: str = "", act_alpha: float = 0.0, act_beta: float = 0.0, label: str = "",
                 conv: Optional[ConvGather] = None) -> Launch:
    """The xgemm.cl launch itself (any M; what the tuner times for a configuration). With `conv`,
    B is the convolution's input X gathered per tile (B_CONV: b.arg is X, b.s1 / b.s2 its image
    and group offsets; b.ld, b.ld2 unused)."""
    if act not in ACTIVATIONS:
        raise InvalidModel(f"unsupported fused activation {act!r}", node=label or None)
    if a.packed:
        raise ValueError("xgemm reads A through its strides (no packed panels)")
    if conv is not None and b.packed:
        raise ValueError("xgemm's conv mode gathers B from X (no packed panels)")
    act_code, act_p = act_params(act, act_alpha, act_beta)
    defines = xgemm_defines(cfg, a_kfast=a.ld2 == 1, b_nfast=b.ld2 == 1 or conv is not None, b_panel=b.packed,
                            act_code=act_code, b_conv=conv is not None)
    defines.update(storage_defines(a, b, c, bias, res))
    bias_ = bias if bias is not None else Bias(c.arg, sm=0, sn=0, beta=0.0)
    res_ = res if res is not None else Operand(c.arg, ld=c.ld)
    flags = (1 if bias is not None else 0) | (2 if res is not None else 0)
    head = [unaligned(a.arg), i32(a.off), i32(a.s1), i32(a.s2), i32(a.ld), i32(a.ld2),
            b.arg if b.packed else unaligned(b.arg), i32(b.off), i32(b.s1), i32(b.s2), i32(b.ld if not b.packed else 0),
            i32(b.ld2 if not b.packed else 0),
            c.arg, i32(c.off), i32(c.s1), i32(c.s2), i32(c.ld),
            bias_.arg, i32(bias_.off), i32(bias_.s1), i32(bias_.s2), i32(bias_.sm), i32(bias_.sn), f32(bias_.beta),
            res_.arg, i32(res_.off), i32(res_.s1), i32(res_.s2), i32(res_.ld)]
    tail = [i32(max(d2, 1)), f32(alpha), i32(flags)] + [f32(p) for p in act_p] + (conv.args() if conv else [])
    gsize = (-(-n // cfg.nwg) * cfg.ndimc, -(-m // cfg.mwg) * cfg.mdimc, max(batch, 1))
    return Launch("xgemm", "xgemm", gsize, head + [i32(m), i32(n), i32(k)] + tail, cfg.lsize, defines, label,
                  noop_args=head + [i32(0), i32(0), i32(0)] + tail)  # M = N = 0: returns at once


# --- the tunable family (lower/tunable.py): xgemm.cl's configuration per GEMM shape ---------------------
# Shape key: gemm_kernel.gemm_key (M, N, K, B layout); the parameter is the configuration's
# as_tuple() under "cfg". The benchmark reads row-major A (weights, ld K) and B (ld N, or NWG
# panels when the key says "packed").
def _xgemm_space(target: Target, key: ShapeKey = ()) -> List[Params]:
    first = xgemm_config(target)
    out = [{"cfg": first.as_tuple()}] if first is not None else []
    for c in search_space(target):
        if {"cfg": c.as_tuple()} not in out:
            out.append({"cfg": c.as_tuple()})
    return out


def _xgemm_default(target: Target, key: ShapeKey) -> Params:
    cfg = xgemm_config(target)
    return {"cfg": cfg.as_tuple() if cfg is not None else SEARCH_SPACE[0].as_tuple()}


def xgemm_bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """xgemm.cl on shape `key` with configuration `p` (buffers A, B, C and their byte sizes)."""
    from .base import Buf

    m, n, k, layout = key
    cfg = XgemmConfig.from_tuple(p["cfg"])
    packed = layout == "packed"
    nb = 4 * k * (-(-n // cfg.nwg) * cfg.nwg) if packed else 4 * k * n
    b = Operand(Buf("B"), packed=True) if packed else Operand(Buf("B"), ld=n)
    launch = tiled_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=Operand(Buf("A"), ld=k), b=b,
                          c=Operand(Buf("C"), ld=n), act="Relu")
    return launch, {"A": 4 * m * k, "B": nb, "C": 4 * m * n}


XGEMM_FAMILY = register(Family("xgemm", "xgemm", _xgemm_space, _xgemm_default, xgemm_bench,
                               flops=lambda key: 2.0 * key[0] * key[1] * key[2],
                               applies=lambda target: xgemm_applicable(target) is None, priority=0))


def tuned_xgemm(target: Target, key: ShapeKey, label: str = "") -> Optional[XgemmConfig]:
    """xgemm.cl's configuration for this GEMM: the tuning database's for `key` when the device can
    run it, else `xgemm_config(target)`."""
    def ok(p: Params) -> bool:
        try:
            return XgemmConfig.from_tuple(p["cfg"]).why_not(target) is None
        except (KeyError, TypeError, ValueError):
            return False

    if xgemm_config(target) is None:
        return None
    if int(key[0]) <= MAX_ROWS and key[3] != "packed":
        # xgemm_launch runs it as gpu_gemv.cl, within the default's work-group shape: no tile to
        # tune, and no request for the search to spend time on
        return xgemm_config(target)
    p, _ = choose(target, "xgemm", key, label, valid=ok)
    return XgemmConfig.from_tuple(p["cfg"])


__all__ = ["ConvGather", "MAX_GATHER_INDEX", "XgemmConfig", "tuned_xgemm", "XGEMM_FAMILY", "SEARCH_SPACE",
           "search_space", "xgemm_config", "xgemm_applicable", "xgemm_defines", "xgemm_launch", "tiled_launch"]
