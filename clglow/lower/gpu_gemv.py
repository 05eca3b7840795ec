"""Skinny GEMMs (M = 1 .. 4) for the GPU family: kernels_cl/gpu_gemv.cl, the small/skinny row of
the GEMM table beside xgemm.cl's tiles.

Why a module of its own: a GEMM of one to four rows (a batch-1 Linear layer, a classifier head,
a decode step's projections) is bound by reading B once; xgemm.cl's 64-row tiles compute
mostly padding there and walk K serially per column block. gpu_gemv.cl gives a work-group a
block of output columns and splits K over its items, combining the partial sums in local
memory, with B read along its contiguous dimension by neighbouring items (row-major [K, N], or
a transposed [N, K] weight).

How it is selected: gpu_gemm.xgemm_launch hands a GEMM to `gemv_launch` when `gemv_applicable`
says so (M <= MAX_ROWS, B unpacked with a contiguous dimension), so Gemm, MatMul and the
convolutions reach it wherever they chose xgemm.cl, with the same operands and epilogue. Its
work-group stays within the xgemm configuration's own local shape (`limits`), which the device
is known to run.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..errors import InvalidModel
from .base import Launch, f32, i32, unaligned
from .gemm_kernel import ACTIVATIONS, Bias, Operand, act_params

MAX_ROWS = 4  # gpu_gemv.cl keeps MR <= 4 partial sums per item (MR rows of A)
COALESCE = 32  # neighbouring items along B's contiguous dimension: 128-byte runs of floats


def gemv_applicable(m: int, b: Operand) -> Optional[str]:
    """None when C = A @ B of `m` rows runs as gpu_gemv.cl, else why not."""
    if not 1 <= m <= MAX_ROWS:
        return f"{m} rows (the skinny kernel takes 1 to {MAX_ROWS})"
    if b.packed:
        return "B in im2col panels (xgemm.cl's B_PANEL)"
    if b.ld2 != 1 and b.ld != 1:
        return "B has no contiguous dimension"
    return None


def storage_defines(a: Operand, b: Operand, c: Operand, bias: Optional[Bias], res: Optional[Operand]) -> dict:
    """The half-storage defines of xgemm.cl and gpu_gemv.cl (kernels_cl/storage.h): one per operand
    stored as half (Operand.half / Bias.half), none for float32 (the programs keep their options)."""
    flags = (("A_HALF", a.half), ("B_HALF", b.half), ("C_HALF", c.half), ("Z_HALF", res is not None and res.half),
             ("BIAS_HALF", bias is not None and bias.half))
    return {name: 1 for name, half in flags if half}


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def gemv_group(n: int, k: int, b_kfast: bool, limits: Tuple[int, int]) -> Tuple[int, int]:
    """The local size (dim 0, dim 1): dim 0 along B's contiguous dimension (K when b_kfast, else N),
    each within `limits` (a work-group shape the device runs) and the product within theirs."""
    threads = max(1, limits[0] * limits[1])
    fast, other = (k, n) if b_kfast else (n, k)
    d0 = min(_pow2_at_most(limits[0]), COALESCE, _pow2_at_least(fast))
    d1 = min(_pow2_at_most(limits[1]), _pow2_at_most(threads // d0), _pow2_at_least(other))
    return d0, max(d1, 1)


def gemv_launch(*, m: int, n: int, k: int, batch: int, d2: int, a: Operand, b: Operand, c: Operand,
                limits: Tuple[int, int], bias: Optional[Bias] = None, res: Optional[Operand] = None,
                alpha: float = 1.0, act: str = "", act_alpha: float = 0.0, act_beta: float = 0.0,
                label: str = "") -> Launch:
    """The gpu_gemv.cl launch for C[z] = act(alpha * A[z] @ B[z] + bias + res): xgemm_launch's
    operands (gemm_kernel.Operand: A at a.ld * m + a.ld2 * k, B at b.ld * k + b.ld2 * n, C rows c.ld
    apart) and epilogue; `limits` bounds the work-group shape (see gemv_group)."""
    why = gemv_applicable(m, b)
    if why is not None:
        raise ValueError(f"gpu_gemv.cl cannot run this GEMM: {why}")
    if act not in ACTIVATIONS:
        raise InvalidModel(f"unsupported fused activation {act!r}", node=label or None)
    act_code, act_p = act_params(act, act_alpha, act_beta)
    b_kfast = b.ld == 1 and b.ld2 != 1
    d0, d1 = gemv_group(n, k, b_kfast, limits)
    defines: dict = {"MR": m, "LS": d0 * d1, "B_KFAST": int(b_kfast), **storage_defines(a, b, c, bias, res)}
    if act_code:
        defines["ACT"] = act_code
    bias_ = bias if bias is not None else Bias(c.arg, sm=0, sn=0, beta=0.0)
    res_ = res if res is not None else Operand(c.arg, ld=c.ld)
    flags = (1 if bias is not None else 0) | (2 if res is not None else 0)
    args = [unaligned(a.arg), i32(a.off), i32(a.s1), i32(a.s2), i32(a.ld), i32(a.ld2),
            unaligned(b.arg), i32(b.off), i32(b.s1), i32(b.s2), i32(b.ld), i32(b.ld2),
            c.arg, i32(c.off), i32(c.s1), i32(c.s2), i32(c.ld),
            bias_.arg, i32(bias_.off), i32(bias_.s1), i32(bias_.s2), i32(bias_.sm), i32(bias_.sn), f32(bias_.beta),
            res_.arg, i32(res_.off), i32(res_.s1), i32(res_.s2), i32(res_.ld),
            i32(m), i32(n), i32(k), i32(max(d2, 1)), f32(alpha), i32(flags)] + [f32(p) for p in act_p]
    blocks = -(-n // (d1 if b_kfast else d0))
    gsize = (d0, blocks * d1, max(batch, 1)) if b_kfast else (blocks * d0, d1, max(batch, 1))
    noop = list(args)
    noop[29] = i32(0)  # M = 0: every item returns after the (uniform) barriers
    return Launch("gpu_gemv", "gemv", gsize, args, (d0, d1, 1), defines, label, noop_args=noop)


__all__ = ["MAX_ROWS", "gemv_applicable", "gemv_group", "gemv_launch", "storage_defines"]
