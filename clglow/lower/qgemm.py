"""Integer matrix products on OpenCL: MatMulInteger and QLinearMatMul (ai.onnx), QGemm,
MatMulIntegerToFloat and DynamicQuantizeMatMul (com.microsoft), as qgemm.cl launches
(lower/qgemm_kernel.py: exact int32 accumulation of the stored 8-bit values, zero points applied
through row / column sums in the epilogue).

Semantics (the ONNX and onnxruntime schemas):
  MatMulInteger          Y(int32) = (A - a_zp) @ (B - b_zp); a_zp per tensor or per row of A (2-D
                         A), b_zp per tensor or per column of B.
  QLinearMatMul          Y = saturate(rint((A - a_zp) @ (B - b_zp) * (a_scale * b_scale / y_scale))
                         + y_zp); b_scale / b_zp per tensor or per column.
  QGemm                  the same for Gemm's A' @ B' (transA only for a constant A), alpha folded
                         into a_scale, the int32 C (bias in accumulator units) added before scaling;
                         without y_scale the output is float: (acc + C) * (alpha * a_scale * b_scale).
  MatMulIntegerToFloat   Y = (A - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias (float).
  DynamicQuantizeMatMul  A (float) quantised per tensor to uint8 as DynamicQuantizeLinear does
                         (kernels_cl/quant.cl), then MatMulIntegerToFloat.
The float32 multiplier is formed as onnxruntime forms it (a_scale * b_scale, then / y_scale) and
rint rounds half to even, so results match onnxruntime except where its float rounding of the
product differs (at most one quantisation step; onnx.reference computes the product in float64).

A node attribute `qclamp` = [lo, hi] (ints), set by the QDQ fusion pass for a fused Relu/Clip,
narrows the requantised output's saturation bounds (absent: the output type's range); honoured by
QLinearMatMul and QGemm here and QLinearConv in qconv.py.

Batches: A [..., M, K] with a 2-D B folds A's batch into M (one GEMM); an N-D B takes the
kernel's batch dimension, each operand's batch either the output's or all ones (broadcast).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Arg, Launch, LowerCtx, device_op, i32
from .common import F16, F32, check_dtypes, dtype_of, shape_of, work_size
from .gemm_kernel import Operand
from .half import has_half, lower_as_float
from .qgemm_kernel import (EPI_FLOAT, EPI_INT, EPI_QUANT, QTYPES, UINT8, QEpilogue, int_bytes,
                           pack_b_host, panel_elems, qcolsum_launch, qgemm_launch, qpack_launch, qrowsum_launch,
                           tuned_qgemm)

MS = "com.microsoft"
INT32 = np.dtype(np.int32)


# --- supports -----------------------------------------------------------------------------------------
def _check(node: Node, graph: Graph, ints: list, floats_: list, int32s: tuple = (),
           float_types: frozenset = frozenset({F32})) -> Optional[str]:
    """8-bit inputs at `ints`, `float_types` at `floats_`, int32 at `int32s` (absent ones skipped);
    no scalar matrices; no B batch that neither matches nor broadcasts as the kernel walks it."""
    present = lambda idx: [i for i in idx if i < len(node.inputs) and node.inputs[i]]  # noqa: E731
    why = (check_dtypes(node, graph, QTYPES, inputs=present(ints))
           or check_dtypes(node, graph, set(float_types), inputs=present(floats_))
           or check_dtypes(node, graph, {INT32}, inputs=present(int32s)))
    if why:
        return why
    for i in present([0] + [j for j in ints if j in (1, 3)][:1]):
        s = shape_of(graph, node.input(i))
        if s is not None and len(s) == 0:
            return f"{node.op_type} of a scalar is undefined"
    return None


def _per_index_live(node: Node, graph: Graph, matrix: int, params: tuple) -> Optional[str]:
    """What the lowering cannot take, known before shapes are concrete: a per-row / per-column
    zero point or scale that is live (or per row of an N-D A) while its matrix is batched (it
    would be tiled over the batch at plan time)."""
    ms = shape_of(graph, node.input(matrix))
    if ms is None or len(ms) <= 2:
        return None
    for i in params:
        if i < len(node.inputs) and node.inputs[i]:
            ps = shape_of(graph, node.input(i))
            if ps is not None and int(np.prod(ps, dtype=np.int64)) > 1 and (graph.const(node.input(i)) is None
                                                                        or matrix == 0):
                return f"{node.op_type}: a per-index input {i} with a batched input {matrix}"
    return None


def _supports_mmi(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return (_check(node, graph, [0, 1, 2, 3], []) or _per_index_live(node, graph, 0, (2,))
            or _per_index_live(node, graph, 1, (3,)))


def _supports_qlmm(node: Node, graph: Graph, target: Target) -> Optional[str]:
    # float16 scales (opset 21) are read as float32 copies (lower_as_float)
    return (_check(node, graph, [0, 2, 3, 5, 7], [1, 4, 6], float_types=frozenset({F32, F16}))
            or _per_index_live(node, graph, 3, (4, 5)))


def _supports_mmi2f(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return _check(node, graph, [0, 1, 4, 5], [2, 3, 6]) or _per_index_live(node, graph, 1, (3, 5))


def _supports_dqmm(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return _check(node, graph, [1, 3], [0, 2, 4]) or _per_index_live(node, graph, 1, (2, 3))


def _supports_qgemm(node: Node, graph: Graph, target: Target) -> Optional[str]:
    why = _check(node, graph, [0, 2, 3, 5, 8], [1, 4, 7], (6,))
    if why:
        return why
    if node.attrs.get("transA", 0) and graph.const(node.input(0)) is None:
        return "QGemm with transA=1 on a live A"
    if float(node.attrs.get("alpha", 1.0)) != 1.0 and graph.const(node.input(1)) is None:
        return "QGemm with alpha != 1 and a live a_scale"
    return None


# --- the shared core ----------------------------------------------------------------------------------
def _const_or_none(ctx: LowerCtx, i: int) -> Optional[np.ndarray]:
    return ctx.const(i) if ctx.has_input(i) and ctx.node.input(i) else None


def _present(ctx: LowerCtx, i: int) -> bool:
    return ctx.has_input(i) and bool(ctx.node.input(i))


def _zero_point(ctx: LowerCtx, i: int, per: int, batch: int, what: str) -> Optional[tuple]:
    """(arg, stride) of a zero point input (per tensor, or per row / column of `per`), None when
    absent or constant zero; a per-index constant is tiled over `batch` matrices."""
    if not _present(ctx, i):
        return None
    c = _const_or_none(ctx, i)
    if c is not None and not np.any(c):
        return None
    return _indexed(ctx, i, c, per, batch, what)


def _indexed(ctx: LowerCtx, i: int, c: Optional[np.ndarray], per: int, batch: int, what: str,
             dtype: Optional[type] = None) -> tuple:
    """(arg, stride) of input i holding one value or one per row / column (`per`), its constant
    value `c` (None: live); over `batch` matrices a per-index constant is tiled, a live one refused."""
    size = ctx.inputs[i].size
    if size == 1:
        return (ctx.buf(i), 0)
    if size != per:
        raise InvalidModel(f"{what} has {size} values; expected 1 or {per}", node=ctx.label(), tensor=ctx.node.input(i))
    if batch == 1:
        return (ctx.buf(i), 1)
    if c is None:
        raise InvalidModel(f"a live per-index {what} with a batched operand is not supported on OpenCL",
                           node=ctx.label(), tensor=ctx.node.input(i))
    return (ctx.const_buffer(np.tile(np.asarray(c, dtype).reshape(-1), batch)), 1)


def _scale(ctx: LowerCtx, i: int, per: int, batch: int, what: str, factor: float = 1.0) -> tuple:
    """(arg, stride) of a float32 scale input (see _zero_point); `factor` (QGemm's alpha) multiplies
    a constant scale in float32 before anything else, as onnxruntime does."""
    size = ctx.inputs[i].size
    c = _const_or_none(ctx, i)
    if factor != 1.0:
        if c is None or size != 1:
            raise InvalidModel(f"alpha != 1 with a live or per-column {what}", node=ctx.label())
        return (ctx.const_buffer(np.float32(factor) * np.asarray(c, np.float32).reshape(1)), 0)
    return _indexed(ctx, i, c, per, batch, what, np.float32)


class _Mat:
    """The problem's shapes: M, K, N, the kernel batch and each operand's batch strides."""

    def __init__(self, ctx: LowerCtx, ia: int, ib: int, ta: bool = False, tb: bool = False):
        sa, sb = tuple(ctx.inputs[ia].shape), tuple(ctx.inputs[ib].shape)
        label = ctx.label()
        if len(sa) == 1:
            sa = (1,) + sa
        squeeze_n = len(sb) == 1
        if squeeze_n:
            sb = sb + (1,)
        self.m, self.k = (sa[-1], sa[-2]) if ta else sa[-2:]
        kb, self.n = (sb[-1], sb[-2]) if tb else sb[-2:]
        if kb != self.k:
            raise InvalidModel(f"{ctx.node.op_type} inner dimensions differ: {sa} x {sb}", node=label)
        ba, bb = sa[:-2], sb[:-2]
        self.fold = int(np.prod(bb, dtype=np.int64)) == 1  # a 2-D B: A's batch folds into M
        if self.fold:
            self.batch = 1
            self.m *= int(np.prod(ba, dtype=np.int64))
            self.sa = self.sb = 0
            return
        out_b = tuple(np.broadcast_shapes(ba, bb))
        self.batch = int(np.prod(out_b, dtype=np.int64))
        ok = lambda b: b == out_b or int(np.prod(b, dtype=np.int64)) == 1  # noqa: E731
        if not (ok(tuple((1,) * (len(out_b) - len(ba)) + ba)) and ok(tuple((1,) * (len(out_b) - len(bb)) + bb))):
            raise InvalidModel(f"{ctx.node.op_type} batch dims {ba} and {bb}: only equal or broadcast-all batches "
                               "run on OpenCL", node=label)
        self.sa = self.m * self.k if int(np.prod(ba, dtype=np.int64)) > 1 else 0
        self.sb = self.k * self.n if int(np.prod(bb, dtype=np.int64)) > 1 else 0


def _a_operand(ctx: LowerCtx, ia: int, mat: _Mat, ta: bool) -> tuple:
    """(Operand, constant A as [batch, M, K] or None): A row-major in place, a constant
    transposed A transposed at plan time."""
    c = _const_or_none(ctx, ia)
    if ta:
        at = np.ascontiguousarray(np.asarray(c).T)
        return Operand(ctx.const_buffer(at), ld=mat.k), at.reshape(1, mat.m, mat.k)
    op = Operand(ctx.buf(ia), s1=mat.sa, ld=mat.k)
    if c is None:
        return op, None
    return op, np.asarray(c).reshape(-1, mat.m, mat.k)


def _b_operand(ctx: LowerCtx, ib: int, mat: _Mat, tb: bool, cfg, launches: list) -> tuple:
    """(Operand of B's panels, constant B as [batch, K, N] or None): weights packed at plan
    time, a live B packed by qpack_b (strides give B^T)."""
    c = _const_or_none(ctx, ib)
    nb = max(mat.batch if mat.sb else 1, 1)
    panels = panel_elems(cfg, mat.k, mat.n)
    if c is not None:
        b3 = np.asarray(c).reshape(-1, *(np.asarray(c).shape[-2:] if np.asarray(c).ndim >= 2 else (mat.k, 1)))
        if tb:
            b3 = b3.swapaxes(-1, -2)
        arg = ctx.derived(ib, f"qpackB{cfg.nr}k{cfg.kc}t{int(tb)}",
                          lambda w: pack_b_host(b3, cfg))
        return Operand(arg, s1=panels if mat.sb else 0), b3
    dst = ctx.scratch(panels * nb)
    tb_dt = np.dtype(ctx.inputs[ib].dtype)
    launches.append(qpack_launch(ctx.device, cfg, tb_dt, src=ctx.buf(ib), off=0, s1=mat.sb, s2=0,
                                 s_k=1 if tb else mat.n, s_n=mat.k if tb else 1, k=mat.k, n=mat.n, batch=nb, d2=1,
                                 dst=dst, label=ctx.label()))
    return Operand(dst, s1=panels if mat.sb else 0), None


def qmatmul_launches(ctx: LowerCtx, *, ia: int, ib: int, za: Optional[int], zb: Optional[int], epi: QEpilogue,
                     ta: bool = False, tb: bool = False, a_override: Optional[tuple] = None) -> list:
    """The launches of one integer matrix product with the epilogue `epi` (scales, bias, output
    zero point already filled by the caller); zero points of A (input za) and B (input zb) are
    applied through sums here. a_override: (arg, dtype, za (arg, stride)) for an A produced by an
    earlier launch (DynamicQuantizeMatMul)."""
    mat = _Mat(ctx, ia, ib, ta, tb)
    out = ctx.outputs[0]
    if out.size == 0:
        return []
    cfg = tuned_qgemm(ctx.device, mat.m, mat.n, mat.k, ctx.label())
    launches: list = []
    nb = max(mat.batch, 1)
    if a_override is not None:
        a_arg, a_dt, zpa = a_override
        a, a_const = Operand(a_arg, s1=mat.sa, ld=mat.k), None
    else:
        a, a_const = _a_operand(ctx, ia, mat, ta)
        a_dt = np.dtype(ctx.inputs[ia].dtype)
        per_row = mat.m if not mat.fold or len(ctx.inputs[ia].shape) <= 2 else -1
        zpa = None if za is None else _zero_point(ctx, za, per_row, nb, "a_zero_point")
    b, b_const = _b_operand(ctx, ib, mat, tb, cfg, launches)
    b_dt = np.dtype(ctx.inputs[ib].dtype)
    zpb = None if zb is None else _zero_point(ctx, zb, mat.n, nb if mat.sb else 1, "b_zero_point")
    rs = (mat.m, 0) if not mat.fold else (0, 0)
    cs = (mat.n, 0) if mat.sb else (0, 0)
    epi.zpa, epi.zpb, epi.rs, epi.cs = zpa, zpb, rs, cs
    if zpa is not None:  # A's zero point times B's column sums
        if b_const is not None:
            cols = b_const.astype(np.int64).sum(axis=-2).astype(np.int32).reshape(-1)
            epi.colsum = ctx.const_buffer(cols)
        else:
            epi.colsum = ctx.scratch(int_bytes(mat.n * (nb if mat.sb else 1)))
            launches.append(qcolsum_launch(ctx.device, cfg, b_dt, panels_arg=b.arg, k=mat.k, n=mat.n,
                                           batch=nb if mat.sb else 1, dst=epi.colsum, label=ctx.label()))
    if zpb is not None:  # B's zero point times A's row sums
        if a_const is not None and (mat.sa or nb == 1):
            epi.rowsum = ctx.const_buffer(a_const.astype(np.int64).sum(axis=-1).astype(np.int32).reshape(-1))
        else:
            rows = mat.m * (nb if not mat.fold else 1)
            epi.rowsum = ctx.scratch(int_bytes(rows))
            launches.append(qrowsum_launch(ctx.device, cfg, a_dt, a=a, m=mat.m, k=mat.k,
                                           batch=nb if not mat.fold else 1, d2=1, dst=epi.rowsum, label=ctx.label()))
            if not mat.fold and not mat.sa:  # one A for every batch: its sums repeat (rows z*M + m)
                epi.rs = (0, 0)
    c = Operand(ctx.out(0), s1=mat.m * mat.n if not mat.fold else 0, ld=mat.n)
    launches.append(qgemm_launch(cfg, (a_dt, b_dt, np.dtype(out.dtype)), m=mat.m, n=mat.n, k=mat.k, batch=nb,
                                 d2=1, a=a, b=b, c=c, epi=epi, label=ctx.label()))
    return launches


def _qbounds(ctx: LowerCtx, dt: np.dtype) -> tuple:
    """The requantised output's clamp bounds: the QDQ pass's `qclamp` within the type's range."""
    info = np.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    qc = ctx.attr("qclamp")
    if qc is not None:
        qc = [int(v) for v in qc]
        if len(qc) != 2 or qc[0] > qc[1]:
            raise InvalidModel(f"qclamp {qc} is not [lo, hi]", node=ctx.label())
        lo, hi = max(lo, qc[0]), min(hi, qc[1])
    return lo, hi


def requant_epilogue(ctx: LowerCtx, out_dt: np.dtype, s_row: tuple, s_col: tuple, sy: int,
                     yzp: Optional[int]) -> QEpilogue:
    """EPI_QUANT with the scales, output zero point (input yzp) and clamp bounds."""
    lo, hi = _qbounds(ctx, np.dtype(out_dt))
    return QEpilogue(epi=EPI_QUANT, s_row=s_row, s_col=s_col, s_y=ctx.buf(sy),
                     y_zp=ctx.buf(yzp) if yzp is not None and _present(ctx, yzp) else None, qlo=lo, qhi=hi)


# --- the ops ------------------------------------------------------------------------------------------
@device_op("MatMulInteger", supports=_supports_mmi)
def lower_matmul_integer(ctx: LowerCtx) -> list:
    """int32 (A - a_zp) @ (B - b_zp)."""
    return qmatmul_launches(ctx, ia=0, ib=1, za=2, zb=3, epi=QEpilogue(epi=EPI_INT))


@device_op("QLinearMatMul", supports=_supports_qlmm)
def lower_qlinear_matmul(ctx: LowerCtx) -> list:
    """Requantised product (inputs a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)."""
    if has_half(ctx):  # float16 scales: converted to float32 first
        return lower_as_float(ctx, _lower_qlinear_matmul)
    return _lower_qlinear_matmul(ctx)


def _lower_qlinear_matmul(ctx: LowerCtx) -> list:
    mat = _Mat(ctx, 0, 3)
    nb = mat.batch if mat.sb else 1
    epi = requant_epilogue(ctx, ctx.outputs[0].dtype, _scale(ctx, 1, 1, 1, "a_scale"),
                           _scale(ctx, 4, mat.n, nb, "b_scale"), 6, 7)
    return qmatmul_launches(ctx, ia=0, ib=3, za=2, zb=5, epi=epi)


@device_op("MatMulIntegerToFloat", supports=_supports_mmi2f, domain=MS)
def lower_matmul_integer_to_float(ctx: LowerCtx) -> list:
    """(A - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias (inputs A, B, a_scale, b_scale, a_zp,
    b_zp, bias)."""
    mat = _Mat(ctx, 0, 1)
    nb = mat.batch if mat.sb else 1
    epi = QEpilogue(epi=EPI_FLOAT, s_row=_scale(ctx, 2, 1, 1, "a_scale"), s_col=_scale(ctx, 3, mat.n, nb, "b_scale"),
                    bias=(ctx.buf(6), 0, 1) if _present(ctx, 6) else None, bias_float=True)
    return qmatmul_launches(ctx, ia=0, ib=1, za=4, zb=5, epi=epi)


@device_op("DynamicQuantizeMatMul", supports=_supports_dqmm, domain=MS)
def lower_dynamic_quantize_matmul(ctx: LowerCtx) -> list:
    """A quantised per tensor to uint8 on the device (DynamicQuantizeLinear's kernels), then the
    float epilogue (inputs A, B, b_scale, b_zp, bias)."""
    x = ctx.inputs[0]
    mat = _Mat(ctx, 0, 1)
    nb = mat.batch if mat.sb else 1
    qa, scale, zp = ctx.scratch(max(x.size, 1)), ctx.scratch(4), ctx.scratch(4)
    defines = {"TX": "float", "TY": "uchar", "TS": "float"}
    launches = [Launch("quant", "dyn_qparams", (1,), [ctx.buf(0), scale, zp, i32(x.size)], (1,), defines, ctx.label())]
    if x.size:
        g, l = work_size(ctx, x.size)
        launches.append(Launch("quant", "quantize", g, [ctx.buf(0), scale, zp, qa, i32(x.size), i32(0), i32(1), i32(1),
                                                        i32(1), i32(1), np.float32(0), np.float32(255)], l,
                               dict(defines, HAS_ZP=None), ctx.label()))
    epi = QEpilogue(epi=EPI_FLOAT, s_row=(scale, 0), s_col=_scale(ctx, 2, mat.n, nb, "b_scale"),
                    bias=(ctx.buf(4), 0, 1) if _present(ctx, 4) else None, bias_float=True)
    return launches + qmatmul_launches(ctx, ia=0, ib=1, za=None, zb=3, epi=epi, a_override=(qa, UINT8, (zp, 0)))


def _qgemm_bias(ctx: LowerCtx, m: int, n: int) -> Optional[tuple]:
    """QGemm's int32 C as (arg, row stride, column stride), broadcast to [M, N]."""
    if not _present(ctx, 6):
        return None
    cs = tuple(ctx.inputs[6].shape)
    c2 = (1,) * (2 - len(cs)) + cs if len(cs) <= 2 else None
    if c2 is None or c2[0] not in (1, m) or c2[1] not in (1, n):
        raise InvalidModel(f"QGemm C of shape {cs} does not broadcast to {(m, n)}", node=ctx.label())
    return (ctx.buf(6), c2[1] if c2[0] != 1 else 0, 1 if c2[1] != 1 else 0)


@device_op("QGemm", supports=_supports_qgemm, domain=MS)
def lower_qgemm(ctx: LowerCtx) -> list:
    """alpha * A' @ B' + C, requantised with y_scale / y_zp, or float without them (inputs A,
    a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp)."""
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    mat = _Mat(ctx, 0, 3, ta, tb)
    alpha = float(ctx.attr("alpha", 1.0))
    s_row, s_col = _scale(ctx, 1, 1, 1, "a_scale", alpha), _scale(ctx, 4, mat.n, 1, "b_scale")
    bias = _qgemm_bias(ctx, mat.m, mat.n)
    if _present(ctx, 7):
        epi = requant_epilogue(ctx, ctx.outputs[0].dtype, s_row, s_col, 7, 8)
        epi.bias = bias
    else:
        epi = QEpilogue(epi=EPI_FLOAT, s_row=s_row, s_col=s_col, bias=bias)
    return qmatmul_launches(ctx, ia=0, ib=3, za=2, zb=5, epi=epi, ta=ta, tb=tb)


__all__ = ["qmatmul_launches", "requant_epilogue", "MS"]
