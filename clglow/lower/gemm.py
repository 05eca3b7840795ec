"""Gemm on OpenCL: its supports, its lowering, and the operand-path table MatMul shares.

Gemm (Y = alpha * A' @ B' + beta * C) is one gemm.cl launch (lower/gemm_kernel.py builds it),
its operands reaching the kernel by the paths of the table below: weights packed once at plan
time, live operands packed at run time or read in place. MatMul and FusedMatMul (matmul.py)
take their operands by the same table.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import LowerCtx, device_op
from .common import float32_only, shape_of
from .gemm_kernel import (Bias, GemmConfig, Operand, b_unpacked_ok, fit_rows, gemm_config, gemm_key, gemm_launch,
                          pack_a, pack_b, pack_b_launch, pack_rows_launch, packed_b_bytes, tuned_tiles)
from .gpu_gemm import tuned_xgemm, xgemm_applicable, xgemm_launch
from .tunable import Family, Params, ShapeKey, choose, forget, register


# --- supports -----------------------------------------------------------------------------------------
def supports_gemm(node: Node, graph: Graph, target: Target) -> Optional[str]:
    why = float32_only(node, graph)
    if why:
        return why
    for i in (0, 1):
        s = shape_of(graph, node.input(i))
        if s is not None and len(s) != 2:
            return f"Gemm input {i} has rank {len(s)}; Gemm takes matrices"
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
#              "in place"  a live row-major B read where it lies (b_unpacked_ok; not at a
#                          conflicting_pitch)
#              "packed"    a live B packed at run time into NR-column panels (pack_b)
# For an unbatched, untransposed product these rules are the default of the gemm_operands family
# below: a live operand takes the path `clglow tune` measured fastest for its shape where one is stored.
def a_path(target: Target, cfg: GemmConfig, *, const: bool, m: int, k: int, row_pitch: int) -> str:
    """The A operand's path ("constant", "packed" or "strided"; see the table above)."""
    if const:
        return "constant"
    return "packed" if pack_a_at_run_time(target, cfg, m, k, row_pitch) else "strided"


def b_path(cfg: GemmConfig, *, const: bool, n: int, row_major: bool = True) -> str:
    """The B operand's path ("constant", "in place" or "packed"; see the table above)."""
    if const:
        return "constant"
    return "in place" if row_major and b_unpacked_ok(cfg, n) and not conflicting_pitch(n) else "packed"


# --- the tunable family of live operands' paths (lower/tunable.py) -------------------------------
# Whether a live operand is packed at run time or read where it lies depends on the device (its
# caches, its driver's code for the in-place loops) and the shape: packing costs a pass over the
# operand (SGEMM 1024^3 on pocl: 0.35 ms for A, 0.40 ms for B against 7.7 ms of GEMM), an
# in-place read at an unlucky pitch can halve the GEMM's speed. The heuristics above are the
# default; `clglow tune` measures the other paths as one-node MatMul models (all their launches,
# runtime/node_bench.py). Key: (M, N, K, A "live" | "const", B "live" | "const") of an
# unbatched, untransposed product with at least one live operand; params {"a": "packed" |
# "strided"} for a live A, {"b": "packed" | "inplace"} for a live B.
OPERANDS_FAMILY_NAME = "gemm_operands"


def operands_key(m: int, n: int, k: int, a_live: bool, b_live: bool) -> ShapeKey:
    """The gemm_operands family's shape key (see above)."""
    return (int(m), int(n), int(k), "live" if a_live else "const", "live" if b_live else "const")


def _operands_default(target: Target, key: ShapeKey) -> Params:
    """The path table's heuristics (a_path, b_path) with the family's default tiles for the shape."""
    m, n, k, a_src, b_src = key
    cfg = fit_rows(target, gemm_config(target), m, n)
    p: Params = {}
    if a_src == "live":
        p["a"] = a_path(target, cfg, const=False, m=m, k=k, row_pitch=k)
    if b_src == "live":
        p["b"] = "inplace" if b_path(cfg, const=False, n=n) == "in place" else "packed"
    return p


def _operands_space(target: Target, key: ShapeKey) -> List[Params]:
    """Every path of each live operand (the default first); B in place only where gemm.cl reads
    it whole-tile or wide enough (b_unpacked_ok with the default tiles)."""
    m, n, k, a_src, b_src = key
    cfg = fit_rows(target, gemm_config(target), m, n)
    a_opts = ("packed", "strided") if a_src == "live" else (None,)
    b_opts = (("packed", "inplace") if b_unpacked_ok(cfg, n) else ("packed",)) if b_src == "live" else (None,)
    out = [_operands_default(target, key)]
    for a in a_opts:
        for b in b_opts:
            p = {name: v for name, v in (("a", a), ("b", b)) if v is not None}
            if p not in out:
                out.append(p)
    return out


OPERANDS_FAMILY = register(Family(OPERANDS_FAMILY_NAME, "gemm", _operands_space, _operands_default,
                                  lambda target, key, p: None,  # whole-node points: runtime/node_bench.py
                                  flops=lambda key: 2.0 * key[0] * key[1] * key[2],
                                  applies=lambda target: xgemm_applicable(target) is not None,  # gemm.cl's GEMMs
                                  priority=1, tolerance=1e-4))


def operand_paths(ctx: LowerCtx, cfg: GemmConfig, m: int, n: int, k: int) -> tuple:
    """(A path, B path) of an unbatched, untransposed product (the table's names: "constant",
    "packed", "strided" / "constant", "in place", "packed"): constants packed at plan time, live
    operands by the gemm_operands family's stored choice for this shape, else the heuristics."""
    a_const, b_const = ctx.const(0) is not None, ctx.const(1) is not None
    a = a_path(ctx.device, cfg, const=a_const, m=m, k=k, row_pitch=k)
    b = b_path(cfg, const=b_const, n=n)
    if (a_const and b_const) or not OPERANDS_FAMILY.applies(ctx.device):
        return a, b
    ok = {"a": ("packed", "strided"), "b": ("packed", "inplace")}

    def valid(p: Params) -> bool:
        return (set(p) == {name for name, live in (("a", not a_const), ("b", not b_const)) if live}
                and all(p[name] in ok[name] for name in p) and (p.get("b") != "inplace" or b_unpacked_ok(cfg, n)))
    p, source = choose(ctx.device, OPERANDS_FAMILY_NAME, operands_key(m, n, k, not a_const, not b_const),
                       ctx.label(), valid=valid)
    if source == "db":
        a = p.get("a", a)
        b = {"inplace": "in place", "packed": "packed"}.get(p.get("b", ""), b)
    return a, b


def tuned_operands(ctx: LowerCtx, cfg: GemmConfig, m: int, n: int, k: int) -> tuple:
    """(tiles, A path, B path) of an unbatched, untransposed product: the operand paths first
    (operand_paths, with the tiles that pad less), then the gemm family's tiles stored for
    that layout (key: B "inplace" or "packed", A "packed" or "strided"), else those tiles. A
    stored tile under which gemm.cl cannot read this B in place is not taken."""
    cfg = fit_rows(ctx.device, cfg, m, n)
    a_kind, b_kind = operand_paths(ctx, cfg, m, n, k)
    layout = "inplace" if b_kind == "in place" else "packed"

    def keeps(c: GemmConfig) -> bool:
        return b_kind != "in place" or b_unpacked_ok(c, n)
    key = gemm_key(m, n, k, layout, "strided" if a_kind == "strided" else "packed")
    cfg, _ = tuned_tiles(ctx.device, key, cfg, ctx.label(), valid=keeps)
    return cfg, a_kind, b_kind


def conflicting_pitch(pitch: int) -> bool:
    """Whether rows `pitch` floats apart fall on at most two line offsets of a 4 KiB page (the
    pitch a multiple of 2 KiB): a column tile's K rows then share the few cache sets those
    offsets index (the L1's, and most of a physically indexed L2's), its panel no longer stays
    in L2 for the next row tiles, and every row is a new page for the prefetchers. A live B
    read in place there is packed instead (pack_b: contiguous panels). Measured on pocl (16-float
    vectors, 48 KiB L1, 2 MiB L2), gemm.cl alone, 1024^3 with the 12 x 32 tiles, in turns in one
    process: B in place at pitch 1024 135 GFLOP/s, at 1536 and 2048 as slow, at 1040 and 1280
    251, packed 281."""
    return (4 * pitch) % 2048 == 0


def pack_live_a(ctx: LowerCtx, cfg: GemmConfig, i: int, m: int, k: int, trans: bool, batch: int,
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
               launches: list, path: Optional[str] = None) -> Operand:
    """A as packed constant panels (weights), panels packed at run time, or a strided read
    (`path`: chosen by the caller, else the table's)."""
    if path is None:
        path = a_path(ctx.device, cfg, const=ctx.const(i) is not None, m=m, k=k, row_pitch=1 if trans else k)
    if path == "constant":
        def fn(w: np.ndarray) -> np.ndarray:
            w2 = np.asarray(w, np.float32).reshape(-1, w.shape[-1]) if w.ndim >= 2 else w.reshape(1, -1)
            return pack_a(w2.T if trans else w2, cfg.mr)
        return Operand(ctx.derived(i, f"packA{cfg.mr}t{int(trans)}", fn), packed=True)
    if path == "packed":
        return pack_live_a(ctx, cfg, i, m, k, trans, 1, launches)
    # A'[m, k] = A[k, m] when transposed.
    return Operand(ctx.buf(i), ld=1 if trans else k, ld2=m if trans else 1)


def _b_operand(ctx: LowerCtx, cfg: GemmConfig, i: int, k: int, n: int, trans: bool,
               launches: list, path: Optional[str] = None) -> Operand:
    """B as packed constant panels, an in-place row-major read, or panels packed at run time
    (`path`: chosen by the caller, else the table's)."""
    if path is None:
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


def _gemm_bias(ctx: LowerCtx, m: int, n: int) -> Optional[Bias]:
    """C as the epilogue's bias (beta * C broadcast to [M, N]), None when absent or beta is 0."""
    beta = float(ctx.attr("beta", 1.0))
    if not (ctx.has_input(2) and ctx.node.input(2) and beta != 0.0):
        return None
    cs = tuple(ctx.inputs[2].shape)
    if len(cs) > 2:
        raise InvalidModel(f"Gemm C of shape {cs} does not broadcast to {(m, n)}", node=ctx.label())
    c2 = (1,) * (2 - len(cs)) + cs
    if c2[0] not in (1, m) or c2[1] not in (1, n):
        raise InvalidModel(f"Gemm C of shape {cs} does not broadcast to {(m, n)}", node=ctx.label())
    return Bias(ctx.buf(2), sm=c2[1] if c2[0] != 1 else 0, sn=1 if c2[1] != 1 else 0, beta=beta)


def _lower_gemm_tiles(ctx: LowerCtx, m: int, n: int, k: int, ta: bool, tb: bool, bias: Optional[Bias]) -> list:
    """gemm.cl: operands by the path table above (panels packed at plan or run time, or in place)."""
    # the tiles that pad less (fit_rows: the family's default for the key, as conv lowering takes)
    cfg = fit_rows(ctx.device, gemm_config(ctx.device), m, n)
    layout = "packed" if ctx.const(1) is not None or tb or conflicting_pitch(n) else "inplace"
    paths: tuple = (None, None)
    if not ta and not tb and (ctx.const(0) is None or ctx.const(1) is None):
        # a live operand, untransposed: its path and the tiles for it as MatMul takes them
        cfg, *paths = tuned_operands(ctx, cfg, m, n, k)
    elif ctx.const(0) is not None:  # weights as A, packed: the gemm family's benchmark layout (lower/tunable.py)
        cfg, _ = tuned_tiles(ctx.device, gemm_key(m, n, k, layout), cfg, ctx.label())
    elif not ta and a_path(ctx.device, cfg, const=False, m=m, k=k, row_pitch=k) == "strided":
        # a live row-major A read in place: the family's "strided" keys (its k block, AKB, is
        # searched there); a stored point that would pack A instead is not taken
        def keeps(c: GemmConfig) -> bool:
            return a_path(ctx.device, c, const=False, m=m, k=k, row_pitch=k) == "strided"
        cfg, _ = tuned_tiles(ctx.device, gemm_key(m, n, k, layout, "strided"), cfg, ctx.label(), valid=keeps)
    launches: list = []
    a = _a_operand(ctx, cfg, 0, m, k, ta, launches, paths[0])
    b = _b_operand(ctx, cfg, 1, k, n, tb, launches, paths[1])
    c = Operand(ctx.out(0), ld=n)
    launches.append(gemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=a, b=b, c=c, bias=bias,
                                alpha=float(ctx.attr("alpha", 1.0)), label=ctx.label()))
    return launches


def _lower_gemm_xgemm(ctx: LowerCtx, m: int, n: int, k: int, ta: bool, tb: bool, bias: Optional[Bias]) -> list:
    """xgemm.cl (lower/gpu_gemm.py): both operands read in place through their strides, weights too
    (A' = A^T: A'[m, k] at k*M + m; B' = B^T: B'[k, n] at n*K + k)."""
    a = Operand(ctx.buf(0), ld=1 if ta else k, ld2=m if ta else 1)
    b = Operand(ctx.buf(1), ld=1 if tb else n, ld2=k if tb else 1)
    cfg = tuned_xgemm(ctx.device, gemm_key(m, n, k, "inplace"), ctx.label())
    return [xgemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=a, b=b, c=Operand(ctx.out(0), ld=n),
                         bias=bias, alpha=float(ctx.attr("alpha", 1.0)), label=ctx.label())]


# The GEMM kernel families, best first: (name, applicable(target) -> None or why not, lower). The GPU
# family's local-memory tiles where the device has local memory, else gemm.cl (always applicable).
GEMM_KERNELS = (
    ("xgemm", xgemm_applicable, _lower_gemm_xgemm),
    ("gemm", lambda target: None, _lower_gemm_tiles),
)


@device_op("Gemm", supports=supports_gemm)
def lower_gemm(ctx: LowerCtx) -> list:
    """Y = alpha * A' @ B' + beta * C with C unidirectionally broadcast to [M, N]."""
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
    bias = _gemm_bias(ctx, m, n)
    forget(ctx.label())  # the profiler's record of this node's tuned choices starts again
    lower = next(fn for _name, applicable, fn in GEMM_KERNELS if applicable(ctx.device) is None)
    return lower(ctx, m, n, k, ta, tb, bias)
