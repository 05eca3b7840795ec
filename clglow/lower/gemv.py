"""One-row products with constant weights (a decode step's projections and vocabulary head)
as kernels_cl/gemv.cl launches.

Why a path of its own: with M = 1 each weight is used once per run, so the product is bound by
how fast the weights stream from memory. gemm.cl's register tiles compute MR rows of which one
is real and walk each column tile with MR broadcasts per k; gemv.cl reads the weights packed
in VW-column panels (gemm_kernel.pack_b, once at plan time) front to back, one contiguous
stream per work-item. Measured on pocl (16-float vectors), A/B in one process under load:
see the commit introducing it. Taken under the CPU family (the GPU family keeps xgemm, whose
work-groups read the weights coalesced).

The panel width VW, the unroll KU (independent accumulators), the panels per work-item PP and
the work-group size are the tunable family "gemv" per (K, N): the tuning database's choice,
else the profile's default (the preferred vector width, KU 4, one panel, groups of one).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..errors import InvalidModel
from ..target import Target
from .base import Arg, Buf, Launch, LowerCtx, f32, i32, unaligned
from .common import grid
from .gemm_kernel import Bias, act_params, pack_b
from .tunable import Family, Params, ShapeKey, choose, product, register

# The family's axes besides the panel width (the default's value first)
KU_SPACE = (4, 2, 8)
PP_SPACE = (1, 2, 4)
LS_SPACE = (1, 8)


def gemv_width(target: Target) -> int:
    """The panel width: the device's preferred float vector width (4, 8 or 16 floats)."""
    w = int(target.preferred_vector_width_float or 4)
    return 16 if w >= 16 else 8 if w >= 8 else 4


def widths(target: Target) -> Tuple[int, ...]:
    """The panel widths searched: the preferred one first, then the narrower ones down to 4."""
    w = gemv_width(target)
    return (w,) + tuple(v for v in (8, 4) if v < w)


def gemv_applicable(target: Target, *, m: int, nbatch_b: int, b_const: bool) -> bool:
    """A single row (after folding A's batch into M), one constant B matrix, the CPU family."""
    return target.is_cpu_family and m == 1 and nbatch_b == 1 and b_const


def gemv_launch(ctx: LowerCtx, *, k: int, n: int, bias: Optional[Bias], res: Optional[Arg], alpha: float,
                act: tuple, ln: Optional[tuple] = None, epilogue: str = "") -> Launch:
    """y[0, :] = act(alpha * x @ W + bias + res) with W (input 1, constant [.., K, N]) packed in
    panels of the family's width; `ln` (scale, bias, epsilon): x layer-normalised first;
    `epilogue`: an elementwise expression of X0 (the result) applied before the store."""
    if ln is not None and 4 * ln_kmax(k) > ctx.device.local_mem_size:
        raise InvalidModel(f"a LayerNormalization prologue of {k} features needs {4 * ln_kmax(k)} bytes of local "
                           f"memory; the device has {ctx.device.local_mem_size}", node=ctx.label())
    p = tuned(ctx.device, k, n, ctx.label(), ln=ln is not None)
    vw = int(p["vw"])
    w = ctx.derived(1, f"gemv{vw}", lambda b: pack_b(np.asarray(b, np.float32).reshape(k, n), vw))
    tail = []
    if ln is not None:  # (scale, bias, epsilon): x's LayerNormalization first
        tail = [ln[0], ln[1], f32(ln[2])]
    return _launch(ctx.device, p, k, n, unaligned(ctx.buf(0)), w, ctx.out(0), bias=bias, res=res, alpha=alpha,
                   act=act, ln_args=tail if ln is not None else None, epilogue=epilogue, label=ctx.label())


def _launch(target: Target, p: Params, k: int, n: int, x: Arg, w: Arg, y: Arg, *, bias: Optional[Bias],
            res: Optional[Arg], alpha: float, act: tuple, ln_args: Optional[list], epilogue: str,
            label: str) -> Launch:
    """The gemv.cl launch of point `p` (vw, ku, pp, ls) for x [K] @ W (packed) -> y [N]."""
    vw, pp = int(p["vw"]), int(p["pp"])
    act_code, act_p = act_params(act[0], act[1], act[2])
    flags = (1 if bias is not None else 0) | (2 if res is not None else 0)
    args = [x, i32(0), w, y, i32(0),
            unaligned(bias.arg) if bias is not None else y, i32(bias.off if bias is not None else 0),
            i32(bias.sn if bias is not None else 0), f32(bias.beta if bias is not None else 0.0),
            unaligned(res) if res is not None else y, i32(0)]
    tail = [f32(alpha), i32(flags)] + [f32(v) for v in act_p] + (ln_args or [])
    defines = {"VW": vw, "KU": int(p["ku"]), "PP": pp}
    if act_code:
        defines["ACT"] = act_code
    if epilogue:  # a FusedElementwise expression of X0, checked by lower/fused.check_expr
        defines["EPI_EXPR"] = epilogue
    if ln_args is not None:
        defines["LN_PRO"] = None
        defines["LN_KMAX"] = ln_kmax(k)
    items = -(-(-(-n // vw)) // pp)
    gsize, ls = grid(target, (items,), (int(p["ls"]),))
    return Launch("gemv", "gemv", gsize, args + [i32(n), i32(k)] + tail, ls, defines, label,
                  noop_args=args + [i32(0), i32(k)] + tail)


def ln_kmax(k: int) -> int:
    """The local buffer of an LN prologue (gemv.cl LN_KMAX): k rounded up to a power of two (at
    least 64), so that the hidden sizes of a model share one program."""
    return max(64, 1 << (int(k) - 1).bit_length())


# --- the tunable family: gemv.cl's parameters per (K, N) or (K, N, 1) -----------------------------
# Shape key: (K, N), and (K, N, 1) for a product with a LayerNormalization prologue (its groups
# normalise x once each, so fewer and larger groups pay there). Parameters: vw (panel width), ku
# (unroll), pp (panels per work-item), ls (work-group size).
def _space(target: Target, key: ShapeKey) -> List[Params]:
    return list(product({"vw": widths(target), "ku": KU_SPACE, "pp": PP_SPACE, "ls": LS_SPACE}))


def _has_ln(key: ShapeKey) -> bool:
    return len(key) > 2 and bool(key[2])


def _default(target: Target, key: ShapeKey) -> Params:
    """One panel per group of one; with a prologue, the largest groups of the space (the
    prologue is paid once per group)."""
    if _has_ln(key):
        return {"vw": gemv_width(target), "ku": KU_SPACE[0], "pp": max(PP_SPACE), "ls": max(LS_SPACE)}
    return {"vw": gemv_width(target), "ku": KU_SPACE[0], "pp": PP_SPACE[0], "ls": LS_SPACE[0]}


def _valid(target: Target, p: Params) -> bool:
    return (p.get("vw") in widths(target) and p.get("ku") in KU_SPACE and p.get("pp") in PP_SPACE
            and p.get("ls") in LS_SPACE)


def _bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """x [K] @ W [K, N] with `p` (buffers X, W, B, Y: a bias as the projections have; LS and
    LB, the LayerNormalization's scale and bias, for a prologue key)."""
    k, n = int(key[0]), int(key[1])
    if not _valid(target, p):
        raise ValueError(f"gemv does not run {p}")
    vw = int(p["vw"])
    ln_args = [Buf("LS"), Buf("LB"), f32(1e-5)] if _has_ln(key) else None
    launch = _launch(target, p, k, n, Buf("X"), Buf("W"), Buf("Y"), bias=Bias(Buf("B"), 0, 1), res=None,
                     alpha=1.0, act=("", 0.0, 0.0), ln_args=ln_args, epilogue="", label="")
    sizes = {"X": 4 * k, "W": 4 * k * vw * -(-n // vw), "B": 4 * n, "Y": 4 * n}
    if ln_args is not None:
        sizes.update(LS=4 * k, LB=4 * k)
    return launch, sizes


def _flops(key: ShapeKey) -> float:
    return 2.0 * int(key[0]) * int(key[1])


# Timed cold: in a model every weight is read once a run, from beyond the caches (cold_bytes).
GEMV_FAMILY = register(Family("gemv", "gemv", _space, _default, _bench, flops=_flops,
                              applies=lambda target: target.is_cpu_family, priority=2, cold_bytes=32 << 20))


def tuned(target: Target, k: int, n: int, label: str = "", ln: bool = False) -> Params:
    """This product's gemv parameters: the database's when a point of the space, else the default."""
    key = (int(k), int(n), 1) if ln else (int(k), int(n))
    p, _ = choose(target, "gemv", key, label, valid=lambda q: _valid(target, q))
    return p


__all__ = ["GEMV_FAMILY", "gemv_applicable", "gemv_launch", "gemv_width", "ln_kmax", "tuned", "widths"]
