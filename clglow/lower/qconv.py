"""Integer convolutions on OpenCL: QLinearConv and ConvInteger (ai.onnx; 1-D and 2-D, groups,
strides, pads incl. auto_pad, dilations) on the qgemm.cl family (lower/qgemm_kernel.py).

Two paths, first applicable taken (QCONV_PATHS):
  "depthwise"  one input channel per group (qdwconv: direct, exact int32 sums of (x - x_zp) *
               (w - w_zp[c]), taps in the padding add nothing)
  "im2col"     qim2col writes each image's (and group's) columns straight into the GEMM's B
               panels, padding taps as x_zp (real 0), then one qgemm launch over images x groups
               with the weights [cout, cin/g * kh * kw] read in place as A.
Semantics: QLinearConv y = saturate(rint((sum (x - x_zp)(w - w_zp[c]) + B[c]) * (x_scale *
w_scale[c] / y_scale)) + y_zp), w_scale / w_zp per tensor or per output channel, the multiplier
formed in float32 and rounded half to even as onnxruntime does (lower/qgemm.py says why results
may differ by one step from onnx.reference); ConvInteger gives the int32 sums. The QDQ fusion
pass's `qclamp` = [lo, hi] attribute narrows the requantised output's bounds (lower/qgemm.py).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import F32, check_dtypes, grid, resolve_conv, shape_of
from .qgemm import requant_epilogue
from .gemm_kernel import Operand
from .qgemm_kernel import (EPI_INT, QTYPES, QEpilogue, int_bytes, panel_elems, qcolsum_launch,
                           qdefines, qgemm_config, qgemm_launch, im2col_rows, side_defines, tuned_qgemm,
                           widen_a)

INT32 = np.dtype(np.int32)


def _supports(ints: list, floats_: list, int32s: list):
    def supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
        present = [i for i in ints if i < len(node.inputs) and node.inputs[i]]
        why = (check_dtypes(node, graph, QTYPES, inputs=present)
               or check_dtypes(node, graph, {F32}, inputs=[i for i in floats_ if i < len(node.inputs)])
               or check_dtypes(node, graph, {INT32}, inputs=[i for i in int32s if i < len(node.inputs)
                                                             and node.inputs[i]]))
        if why:
            return why
        s = shape_of(graph, node.input(0))
        if s is not None and len(s) not in (3, 4):
            return f"{node.op_type} of rank {len(s)} (1-D and 2-D convolutions run on OpenCL)"
        iw = 3 if node.op_type == "QLinearConv" else 1
        zp = node.input(2) if 2 < len(node.inputs) else ""
        if graph.const(node.input(iw)) is None and zp and (graph.const(zp) is None or np.any(graph.const(zp))):
            ws = shape_of(graph, node.input(iw))
            depthwise = ws is not None and len(ws) >= 2 and ws[1] == 1 and int(node.attrs.get("group", 1)) > 1
            if not depthwise:  # the GEMM path sums constant weights' rows at plan time
                return f"{node.op_type} with a live weight and an input zero point"
        return None
    return supports


class _Geo:
    """A 2-D view of the convolution (a 1-D one has h = kh = 1)."""

    def __init__(self, ctx: LowerCtx, iw: int):
        shim = LowerCtx(ctx.node, ctx.graph, [ctx.inputs[0], ctx.inputs[iw]], ctx.outputs, ctx.device, ctx.options)
        cs = resolve_conv(shim, (1, 2), "1-D and 2-D integer convolutions run on OpenCL")
        two = len(cs.in_sp) == 2
        pick = lambda t, d: (t[0], t[1]) if two else (d, t[0])  # noqa: E731
        self.n_img, self.cin, self.cout, self.g = cs.n_img, cs.cin, cs.cout, cs.groups
        self.h, self.w = pick(cs.in_sp, 1)
        self.oh, self.ow = pick(cs.out_sp, 1)
        self.kh, self.kw = pick(cs.k_sp, 1)
        self.sh, self.sw = pick(cs.strides, 1)
        self.dh, self.dw = pick(cs.dil, 1)
        self.ph, self.pw = pick(cs.begins, 0)
        self.m = self.cout // self.g
        self.kk = self.cin // self.g * self.kh * self.kw
        self.npix = self.oh * self.ow

    @property
    def depthwise(self) -> bool:
        return self.cin // self.g == 1 and self.g > 1


def _weight_params(ctx: LowerCtx, izp: Optional[int], cout: int) -> Optional[tuple]:
    """(arg, stride) of the weights' zero point, None when absent or constant zero."""
    if izp is None or not (ctx.has_input(izp) and ctx.node.input(izp)):
        return None
    c = ctx.const(izp)
    if c is not None and not np.any(c):
        return None
    size = ctx.inputs[izp].size
    if size not in (1, cout):
        raise InvalidModel(f"w_zero_point has {size} values; expected 1 or {cout}", node=ctx.label())
    return (ctx.buf(izp), 0 if size == 1 else 1)


def _x_zp(ctx: LowerCtx, izp: int) -> Optional[tuple]:
    if not (ctx.has_input(izp) and ctx.node.input(izp)):
        return None
    if ctx.inputs[izp].size != 1:
        raise InvalidModel("x_zero_point must be a scalar", node=ctx.label())
    c = ctx.const(izp)
    return None if c is not None and not np.any(c) else (ctx.buf(izp), 0)


def _depthwise(ctx: LowerCtx, geo: _Geo, iw: int, epi: QEpilogue) -> list:
    """qdwconv: one launch, the output channel as the epilogue's row."""
    xdt, wdt, odt = (np.dtype(ctx.inputs[0].dtype), np.dtype(ctx.inputs[iw].dtype), np.dtype(ctx.outputs[0].dtype))
    cfg = qgemm_config(ctx.device)
    gsize, ls = grid(ctx.device, (-(-geo.ow // 16), geo.oh, geo.cout * geo.n_img), (1, 8, 1))
    args = [ctx.buf(0), ctx.buf(iw), ctx.out(0), i32(geo.cin), i32(geo.h), i32(geo.w), i32(geo.cout // geo.cin),
            i32(geo.kh), i32(geo.kw), i32(geo.sh), i32(geo.sw), i32(geo.ph), i32(geo.pw), i32(geo.dh), i32(geo.dw),
            i32(geo.oh), i32(geo.ow), i32(geo.n_img * geo.cin * geo.h * geo.w)] + epi.args(ctx.out(0))
    defines = qdefines(cfg, wdt, xdt, odt, epi)
    if geo.kh == geo.kw and geo.kh in (3, 5, 7):  # the common sizes: tap loops unrolled
        defines["DW_K"] = geo.kh
    return [Launch("qgemm", "qdwconv", gsize, args, ls, defines, ctx.label())]


def _im2col_gemm(ctx: LowerCtx, geo: _Geo, iw: int, epi: QEpilogue) -> list:
    """qim2col into B panels per (image, group), then one qgemm over them; a 1x1 stride-1
    unpadded convolution reads its input in place instead (no im2col pass; KC=1 and KC=2 tiles)."""
    xdt, wdt = np.dtype(ctx.inputs[0].dtype), np.dtype(ctx.inputs[iw].dtype)
    cfg = tuned_qgemm(ctx.device, geo.m, geo.npix, geo.kk, ctx.label())
    nb = geo.n_img * geo.g
    if _in_place(geo, cfg, epi):
        b = Operand(ctx.buf(0), s1=geo.cin * geo.npix, s2=geo.kk * geo.npix, ld=geo.npix)
        return _qgemm(ctx, geo, iw, epi, cfg, b, [], b_direct=True)
    panels = panel_elems(cfg, geo.kk, geo.npix)
    cols = ctx.scratch(panels * nb)
    xz = epi.zpb
    gsize, ls = grid(ctx.device, (-(-geo.npix // cfg.nr), im2col_rows(cfg, geo.kk), nb), (1, 64, 1))
    launches = [Launch("qgemm", "qim2col", gsize,
                       [ctx.buf(0), i32(0), i32(geo.cin * geo.h * geo.w), i32(geo.g), i32(geo.cin // geo.g),
                        i32(geo.h), i32(geo.w), i32(geo.kh), i32(geo.kw), i32(geo.sh), i32(geo.sw), i32(geo.ph),
                        i32(geo.pw), i32(geo.dh), i32(geo.dw), i32(geo.ow), xz[0] if xz else cols,
                        i32(1 if xz else 0), cols, i32(panels), i32(geo.kk), i32(geo.npix)], ls,
                       side_defines(cfg, wdt, xdt), ctx.label())]
    if epi.zpa is not None:  # the weights' zero point times the columns' sums
        epi.colsum = ctx.scratch(int_bytes(geo.npix * nb))
        launches.append(qcolsum_launch(ctx.device, cfg, xdt, panels_arg=cols, k=geo.kk, n=geo.npix, batch=nb,
                                       dst=epi.colsum, label=ctx.label()))
    return _qgemm(ctx, geo, iw, epi, cfg, Operand(cols, s1=geo.g * panels, s2=panels), launches)


def _in_place(geo: _Geo, cfg, epi: QEpilogue) -> bool:
    """Whether the GEMM can read the input itself as B [cin/g, H*W] (qgemm.cl's B_DIRECT): a 1x1,
    stride-1, unpadded convolution, KC=1 tiles of 4, 8 or 16 columns a vector or KC=2 tiles of 8 or
    16, and no weight zero point (whose column sums would need the panels)."""
    pointwise = ((geo.kh, geo.kw, geo.sh, geo.sw, geo.ph, geo.pw) == (1, 1, 1, 1, 0, 0)
                 and (geo.oh, geo.ow) == (geo.h, geo.w))
    tiles = (cfg.kc == 1 and cfg.vw in (4, 8, 16)) or (cfg.kc == 2 and cfg.vw in (8, 16))
    return pointwise and tiles and epi.zpa is None


def _qgemm(ctx: LowerCtx, geo: _Geo, iw: int, epi: QEpilogue, cfg, b: Operand, launches: list,
           b_direct: bool = False) -> list:
    """The qgemm launch over B (panels, or the input in place), appended to `launches`."""
    xdt, wdt, odt = (np.dtype(ctx.inputs[0].dtype), np.dtype(ctx.inputs[iw].dtype), np.dtype(ctx.outputs[0].dtype))
    nb = geo.n_img * geo.g
    if epi.zpb is not None:  # the input's zero point times the weights' row sums
        w = ctx.const(iw)
        if w is None:
            raise InvalidModel("a live weight with an input zero point is not supported on OpenCL", node=ctx.label())
        epi.rowsum = ctx.const_buffer(np.asarray(w).reshape(geo.cout, -1).astype(np.int64).sum(1).astype(np.int32))
    epi.rs, epi.cs = (0, geo.m), (geo.g * geo.npix, geo.npix)
    w = ctx.const(iw)
    w16 = widen_a(cfg, np.asarray(w).reshape(-1)) if w is not None else None
    a = Operand(ctx.buf(iw) if w16 is None else ctx.const_buffer(w16), s1=0, s2=geo.m * geo.kk, ld=geo.kk)
    c = Operand(ctx.out(0), s1=geo.cout * geo.npix, s2=geo.m * geo.npix, ld=geo.npix)
    launches.append(qgemm_launch(cfg, (wdt, xdt, odt), m=geo.m, n=geo.npix, k=geo.kk, batch=nb, d2=geo.g,
                                 a=a, b=b, c=c, epi=epi, label=ctx.label(), a16=w16 is not None, b_direct=b_direct))
    return launches


# The integer convolution paths, first applicable taken: (name, applicable(geo), lower).
QCONV_PATHS = (
    ("depthwise", lambda geo: geo.depthwise, _depthwise),
    ("im2col", lambda geo: True, _im2col_gemm),
)


def _lower(ctx: LowerCtx, iw: int, epi: QEpilogue, x_zp: int, w_zp: int) -> list:
    geo = _Geo(ctx, iw)
    if ctx.outputs[0].size == 0:
        return []
    epi.zpa = _weight_params(ctx, w_zp, geo.cout)
    epi.zpb = _x_zp(ctx, x_zp)
    lower = next(fn for _name, ok, fn in QCONV_PATHS if ok(geo))
    return lower(ctx, geo, iw, epi)


@device_op("QLinearConv", supports=_supports([0, 2, 3, 5, 7], [1, 4, 6], [8]))
def lower_qlinear_conv(ctx: LowerCtx) -> list:
    """Inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32, optional)."""
    cout = int(ctx.inputs[3].shape[0])
    ws = ctx.inputs[4].size
    if ws not in (1, cout):
        raise InvalidModel(f"w_scale has {ws} values; expected 1 or {cout}", node=ctx.label())
    epi = requant_epilogue(ctx, ctx.outputs[0].dtype, (ctx.buf(4), 0 if ws == 1 else 1), (ctx.buf(1), 0), 6, 7)
    if len(ctx.inputs) > 8 and ctx.has_input(8) and ctx.node.input(8):
        epi.bias = (ctx.buf(8), 1, 0)
    return _lower(ctx, 3, epi, 2, 5)


@device_op("ConvInteger", supports=_supports([0, 1, 2, 3], [], []))
def lower_conv_integer(ctx: LowerCtx) -> list:
    """Inputs x, w, x_zp, w_zp; int32 output."""
    return _lower(ctx, 1, QEpilogue(epi=EPI_INT), 2, 3)


__all__ = ["QCONV_PATHS"]
