"""MatMul and clglow.FusedMatMul on OpenCL: numpy matmul semantics as gemm.cl launches.

Leading dims broadcast and are walked as the kernel's two batch levels (adjacent dims merged
where every operand is contiguous over them, outer ones looped with offsets); a broadcast B
folds A's batch into M. FusedMatMul (passes/fuse_matmul.py) adds the epilogue (alpha, a
per-column bias, a residual, an activation) and transposed operand/result views. The operands
take the paths of gemm.py's table (a_path / b_path). Half storage (SessionOptions.precision):
gemm.cl reads and writes it on the paths without run-time packing, xgemm.cl and gpu_gemv.cl on
every path (transposed views too); the others (the CPU family's GEMV, live operands packed,
gemm.cl's transposed views) run on float32 copies (lower/half.py).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Arg, HalfIO, LowerCtx, device_op, round_up
from .common import F16, F32, attr_str, check_dtypes, shape_of
from .gemm import a_path, b_path, pack_live_a, tuned_operands
from .gemm_kernel import (ACTIVATIONS, Bias, Operand, gemm_config, gemm_launch, pack_a, pack_b, pack_b_launch,
                          packed_b_bytes)
from .fused import check_expr
from .gemv import gemv_applicable, gemv_launch
from .gpu_gemm import xgemm_applicable, xgemm_config, xgemm_launch
from .half import has_half, lower_as_float
from .tunable import forget


class _NeedsFloat(Exception):
    """The chosen path reads or writes float32 only: lower on float32 copies (lower/half.py)."""


def _half_or_float(ctx: LowerCtx, lower) -> list:
    """`lower(ctx)` on the tensors as stored, or on float32 copies where its path needs them."""
    try:
        return lower(ctx)
    except _NeedsFloat:
        return lower_as_float(ctx, lower)


def _is_half(ctx: LowerCtx, i: int) -> bool:
    return ctx.has_input(i) and bool(ctx.node.input(i)) and ctx.inputs[i].dtype == F16


# --- supports -----------------------------------------------------------------------------------------
def supports_matmul(node: Node, graph: Graph, target: Target) -> Optional[str]:
    why = check_dtypes(node, graph, {F32, F16}, outputs=True)
    if why:
        return why
    for i in (0, 1):
        s = shape_of(graph, node.input(i))
        if s is not None and len(s) == 0:
            return "MatMul of a scalar is undefined"
    return None


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
    why = supports_matmul(node, graph, target) or check_dtypes(node, graph, {F32}, [4, 5])
    if why:
        return why
    for i in (0, 1):
        s = shape_of(graph, node.input(i))
        if s is not None and len(s) < 2:
            return "a fused MatMul takes 2-D or batched operands"
    act = node.attrs.get("activation", "")
    act = attr_str(act)
    if act not in ACTIVATIONS:
        return f"fused activation {act!r} is not one of {sorted(a for a in ACTIVATIONS if a)}"
    if any(k in node.attrs for k in GEMV_ONLY) and (not target.is_cpu_family or graph.const(node.input(1)) is None):
        return "a LayerNormalization prologue or an elementwise epilogue is the CPU family's GEMV only"
    if "epilogue" in node.attrs:
        return check_expr(attr_str(node.attrs["epilogue"]), 1)
    return None


@device_op("MatMul", supports=supports_matmul, half=HalfIO((0, 1), (0,)))
def lower_matmul(ctx: LowerCtx) -> list:
    """numpy matmul: 1-D operands promoted then squeezed, leading dims broadcast."""
    return _half_or_float(ctx, _lower_matmul)


@device_op("FusedMatMul", domain="clglow", supports=supports_fused_matmul, half=HalfIO((0, 1, 2, 3), (0,)))
def lower_fused_matmul(ctx: LowerCtx) -> list:
    """See _lower_fused_matmul; half storage as _half_or_float says."""
    return _half_or_float(ctx, _lower_fused_matmul)


def _lower_fused_matmul(ctx: LowerCtx) -> list:
    """Y = act(alpha * A @ B + bias + residual): inputs A, B, bias (per column: [N] or
    [1, .., 1, N], may be absent) and residual (Y's shape, may be absent), all in the epilogue;
    with attribute ln_epsilon A is first layer-normalised (inputs 4 and 5: scale and bias)."""
    out_shape = tuple(ctx.outputs[0].shape)
    bias = None
    if ctx.has_input(2) and ctx.node.input(2):
        bs = tuple(ctx.inputs[2].shape)
        n = out_shape[-1] if out_shape else 1
        if bs and (bs[-1] not in (n, 1) or any(d != 1 for d in bs[:-1])):
            raise InvalidModel(f"FusedMatMul bias of shape {bs} is not a per-column vector of {n}",
                               node=ctx.label())
        bias = Bias(ctx.buf(2), sm=0, sn=1 if bs and bs[-1] == n and n != 1 else 0, half=_is_half(ctx, 2))
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
    if has_half(ctx) and ((any(perms) and xgemm_applicable(ctx.device) is not None)
                          or any(k in ctx.node.attrs for k in GEMV_ONLY)):
        raise _NeedsFloat  # views on half storage: xgemm.cl's strided reads only
    if any(k in ctx.node.attrs for k in GEMV_ONLY):
        return [_gemv_only(ctx, bias, res, float(ctx.attr("alpha", 1.0)), act_t)]
    if any(perms):
        return _lower_matmul_views(ctx, perms, bias=bias, res=res, alpha=float(ctx.attr("alpha", 1.0)), act=act_t)
    return _lower_matmul(ctx, bias=bias, res=res, alpha=float(ctx.attr("alpha", 1.0)), act=act_t)


# FusedMatMul attributes only the GEMV implements (passes/fuse_norm_matmul.py): a LayerNormalization
# prologue (inputs 4 and 5 its scale and bias) and an elementwise epilogue expression of X0
GEMV_ONLY = ("ln_epsilon", "epilogue")


def _gemv_only(ctx: LowerCtx, bias: Optional[Bias], res: Optional[Arg], alpha: float, act: tuple):
    """The GEMV of a FusedMatMul with a prologue or epilogue of GEMV_ONLY: one row, constant
    weights, else an InvalidModel, on which the session runs the original nodes instead."""
    sa, sb = tuple(ctx.inputs[0].shape), tuple(ctx.inputs[1].shape)
    k = int(sa[-1]) if sa else 0
    rows = int(np.prod(sa[:-1], dtype=np.int64)) if len(sa) > 1 else 1
    if (rows != 1 or len(sb) != 2 or int(sb[0]) != k or ctx.const(1) is None
            or not gemv_applicable(ctx.device, m=1, nbatch_b=1, b_const=True)):
        raise InvalidModel(f"FusedMatMul with a prologue or epilogue expression runs one row by constant "
                           f"weights on the CPU family's GEMV, not {sa} x {sb}", node=ctx.label())

    def param(i: int, default: float) -> Arg:
        if not (ctx.has_input(i) and ctx.node.input(i)):
            return ctx.const_buffer(np.full(k, default, np.float32))
        if ctx.inputs[i].size == k:
            return ctx.buf(i)
        c = ctx.const(i)
        if c is None:
            raise InvalidModel(f"LayerNormalization input of shape {ctx.inputs[i].shape} for {k} features",
                               node=ctx.label(), tensor=ctx.node.input(i))
        return ctx.const_buffer(np.broadcast_to(np.asarray(c, np.float32), (k,)).copy())

    ln = (param(4, 1.0), param(5, 0.0), float(ctx.attr("ln_epsilon"))) if "ln_epsilon" in ctx.node.attrs else None
    epi = attr_str(ctx.attr("epilogue", ""), "")
    if epi and check_expr(epi, 1):
        raise InvalidModel(check_expr(epi, 1), node=ctx.label())
    return gemv_launch(ctx, k=k, n=int(sb[1]), bias=bias, res=res, alpha=alpha, act=act, ln=ln, epilogue=epi)


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

    xcfg = xgemm_config(ctx.device) if xgemm_applicable(ctx.device) is None else None
    # A: MR-row panels packed at run time, or read strided (xgemm: always strided)
    if xcfg is None and a_path(ctx.device, cfg, const=False, m=m, k=k, row_pitch=sta[-2]) == "packed":
        a, a_mat = pack(0, cfg.mr, k, m, sta[-1], sta[-2], sa, sta)
        a_st = _batch_strides(tuple(d for d in sa[:-2]), out_batch, a_mat)
    else:
        a = Operand(ctx.buf(0), ld=sta[-2], ld2=sta[-1])
        a_st = bstrides(sa, sta)
    # B: rows in place when they are contiguous, else packed (xgemm: in place through both strides)
    if xcfg is not None:
        b = Operand(ctx.buf(1), ld=stb[-2], ld2=stb[-1])
        b_st = bstrides(sb, stb)
    elif b_path(cfg, const=False, n=n, row_major=stb[-1] == 1) == "in place":
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
    aa = Operand(a.arg, a.packed, 0, st[0][0], st[0][1], a.ld, a.ld2, half=_is_half(ctx, 0))
    bo = Operand(b.arg, b.packed, 0, st[1][0], st[1][1], b.ld, b.ld2, half=_is_half(ctx, 1))
    co = Operand(ctx.out(0), False, 0, st[2][0], st[2][1], stc[-2], half=ctx.outputs[0].dtype == F16)
    zo = None if res is None else Operand(res, False, 0, st[2][0], st[2][1], stc[-2], half=_is_half(ctx, 3))
    if xcfg is not None:
        launches.append(xgemm_launch(xcfg, m=m, n=n, k=k, batch=batch, d2=d2, a=aa, b=bo, c=co, bias=bias, res=zo,
                                     alpha=alpha, act=act[0], act_alpha=act[1], act_beta=act[2], label=label))
        return launches
    launches.append(gemm_launch(cfg, m=m, n=n, k=k, batch=batch, d2=d2, a=aa, b=bo, c=co, bias=bias, res=zo,
                                alpha=alpha, act=act[0], act_alpha=act[1], act_beta=act[2], label=label))
    return launches


def _matmul_dims(ctx: LowerCtx) -> tuple:
    """(m, k, n, A's batch dims, B's batch dims, the output's batch dims) of a MatMul, numpy's
    rules (a 1-D operand gains a unit row / column); InvalidModel for shapes that do not match."""
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
    return m, k, n, ba, bb, out_batch


def _lower_matmul(ctx: LowerCtx, bias: Optional[Bias] = None, res: Optional[Arg] = None, alpha: float = 1.0,
                  act: tuple = ("", 0.0, 0.0)) -> list:
    cfg = gemm_config(ctx.device)
    m, k, n, ba, bb, out_batch = _matmul_dims(ctx)
    nbatch = int(np.prod(out_batch, dtype=np.int64))
    if m == 0 or n == 0 or nbatch == 0:
        return []
    launches: list = []
    label = ctx.label()

    # A broadcast B matrix and a batched A: fold A's batch into M (one big GEMM, no batch loop).
    if int(np.prod(bb, dtype=np.int64)) == 1 and ctx.const(0) is None:
        m, out_batch, nbatch, ba = m * nbatch, (), 1, ()
    xcfg = xgemm_config(ctx.device) if xgemm_applicable(ctx.device) is None else None
    gemv = xcfg is None and nbatch == 1 and gemv_applicable(ctx.device, m=m, nbatch_b=int(np.prod(bb, dtype=np.int64)),
                                                            b_const=ctx.const(1) is not None)
    if has_half(ctx) and gemv:
        raise _NeedsFloat
    if gemv:
        return [gemv_launch(ctx, k=k, n=n, bias=bias, res=res, alpha=alpha, act=act)]
    # xgemm reads both operands in place (weights too); gemm.cl takes them by the path table, an
    # unbatched product by the gemm_operands family's choice for a live operand (gemm.py)
    if xcfg is not None:
        a_kind, b_kind = "strided", "in place"
    elif nbatch == 1:
        forget(label)  # the profiler's record of this node's tuned choices starts again
        cfg, a_kind, b_kind = tuned_operands(ctx, cfg, m, n, k)
    else:
        a_kind = a_path(ctx.device, cfg, const=ctx.const(0) is not None, m=m, k=k, row_pitch=k)
        b_kind = b_path(cfg, const=ctx.const(1) is not None, n=n)
    ha, hb, hc = _is_half(ctx, 0), _is_half(ctx, 1), ctx.outputs[0].dtype == F16
    hz = res is not None and _is_half(ctx, 3)
    if (ha and a_kind == "packed") or (hb and b_kind == "packed") or (res is not None and hz != hc and xcfg is None):
        raise _NeedsFloat  # the run-time pack kernels read float32; gemm.cl stores Z as C

    # A
    if a_kind == "constant":
        mp = max(round_up(m, cfg.mr), cfg.mr)
        a = Operand(ctx.derived(0, f"packA{cfg.mr}mm",
                                lambda w: pack_a(np.asarray(w).reshape(*ba, m, k), cfg.mr)), packed=True, half=ha)
        a_mat = mp * k
    elif a_kind == "packed":
        na = int(np.prod(ba, dtype=np.int64))
        a = pack_live_a(ctx, cfg, 0, m, k, False, na, launches)
        a_mat = max(round_up(m, cfg.mr), cfg.mr) * k
    else:
        a = Operand(ctx.buf(0), ld=k, ld2=1, half=ha)
        a_mat = m * k
    # B
    np_ = max(round_up(n, cfg.nr), cfg.nr)
    if b_kind == "constant":
        b = Operand(ctx.derived(1, f"packB{cfg.nr}mm",
                                lambda w: pack_b(np.asarray(w).reshape(*bb, k, n), cfg.nr)), packed=True, half=hb)
        b_mat = np_ * k
    elif b_kind == "in place":
        b = Operand(ctx.buf(1), ld=n, half=hb)
        b_mat = k * n
    else:
        nb = int(np.prod(bb, dtype=np.int64))
        dst = ctx.scratch(packed_b_bytes(cfg.nr, k, n, nb))
        launches.append(pack_b_launch(ctx.device, cfg.nr, src=ctx.buf(1), off=0, s1=0, s2=k * n, s_k=n, s_n=1, k=k,
                                      n=n, batch=nb, d2=nb, dst=dst, label=label))
        b = Operand(dst, packed=True)
        b_mat = np_ * k
    c = Operand(ctx.out(0), ld=n, half=hc)

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
        aa = Operand(a.arg, a.packed, offs[0], ins[0][0], ins[0][1], a.ld, a.ld2, half=a.half)
        bo = Operand(b.arg, b.packed, offs[1], ins[1][0], ins[1][1], b.ld, half=b.half)
        co = Operand(c.arg, False, offs[2], ins[2][0], ins[2][1], c.ld, half=c.half)
        zo = None if res is None else Operand(res, False, offs[2], ins[2][0], ins[2][1], c.ld, half=hz)
        launch, tiles = (xgemm_launch, xcfg) if xcfg is not None else (gemm_launch, cfg)
        launches.append(launch(tiles, m=m, n=n, k=k, batch=batch, d2=d2, a=aa, b=bo, c=co, bias=bias, res=zo,
                               alpha=alpha, act=act[0], act_alpha=act[1], act_beta=act[2], label=label))
    return launches
