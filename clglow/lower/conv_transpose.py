"""Lowering of ConvTranspose (1-3 spatial dims, groups, strides, dilations, pads/auto_pad,
output_padding/output_shape) to OpenCL (see lower/base.py).

Constant weights: a GEMM (gemm.cl) computes every input pixel's products with every output
channel and tap, cols[m * K + k, i] = sum_c W[c, m, k] * X[c, i], then a gather sums each output's
taps from cols (col2im: col2im_2d with host tables of the taps per output row and column for 2-D,
the COLS variant of the gather kernel otherwise). Measured on pocl (AVX-512), a 2x2/2
ConvTranspose 64 -> 32 channels at 56x56: 16.4 ms with the gather kernel alone, 0.14 ms GEMM +
0.22 ms col2im now (onnxruntime 0.19-0.26 ms). Live weights: the gather kernel alone,
one work-item per output element over the taps and input channels. The output shape comes from
shape inference, the begin padding from pads or (auto_pad SAME_*) from the total padding as
onnx.reference computes it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32, round_up
from .common import F32, attr_str, check_dtypes, check_int32_sizes, grid, work_size
from .gemm_kernel import Operand, b_unpacked_ok, gemm_config, gemm_launch, pack_a, pack_b_launch, packed_b_bytes


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    v = graph.values.get(node.input(0))
    if v is not None and v.shape is not None and not 3 <= len(v.shape) <= 5:
        return f"ConvTranspose of rank {len(v.shape)}"
    return check_dtypes(node, graph, {F32})


@device_op("ConvTranspose", supports=_supports)
def lower_conv_transpose(ctx: LowerCtx) -> list:
    x, w, out = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    sd = len(x.shape) - 2
    ins = [int(d) for d in x.shape[2:]]
    outs = [int(d) for d in out.shape[2:]]
    k = [int(d) for d in w.shape[2:]]
    s = [int(v) for v in (ctx.attr("strides") or [1] * sd)]
    d = [int(v) for v in (ctx.attr("dilations") or [1] * sd)]
    group = int(ctx.attr("group", 1))
    C, M = int(x.shape[1]), int(w.shape[1]) * group
    auto = attr_str(ctx.attr("auto_pad"), "NOTSET")
    pads = ctx.attr("pads")
    if pads is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        op = [int(v) for v in (ctx.attr("output_padding") or [0] * sd)]
        want = [int(v) for v in (ctx.attr("output_shape") or [ins[a] * s[a] for a in range(sd)])][-sd:]
        # the total padding as onnx.reference computes it (it may be negative: never clipped)
        begin = [(t // 2 if auto == "SAME_UPPER" else t - t // 2)
                 for t in (s[a] * (ins[a] - 1) + op[a] + (k[a] - 1) * d[a] + 1 - want[a] for a in range(sd))]
    else:
        begin = [int(v) for v in (pads or [0] * (2 * sd))[:sd]]
    geo = ctx.const_buffer(np.array(ins + outs + k + s + d + begin, np.int32))
    launches: list = []
    if ctx.const(1) is not None and sd == 2:
        cols = _products_gemm(ctx, C, M, group, int(np.prod(k)), int(np.prod(ins)), launches)
        ty, tx = (_taps(ins[a], outs[a], k[a], s[a], d[a], begin[a]) for a in range(2))
        tab = ctx.const_buffer(np.concatenate([ty.ravel(), tx.ravel()]).astype(np.int32))
        args = [cols] + ([ctx.buf(2)] if ctx.has_input(2) else []) + [ctx.out(0)]
        args += [i32(v) for v in (outs[0], outs[1], M, group, k[0], k[1], ins[0], ins[1], ty.shape[1], tx.shape[1])]
        n_img = int(x.shape[0])
        gsize, ls = grid(ctx.device, (-(-outs[1] // 16), outs[0], n_img * M), (1, 8, 1))
        defines = {"SD": 2, **({"HAS_BIAS": None} if ctx.has_input(2) else {})}
        if k[1] == s[1] == 2 and d[1] == 1 and begin[1] == 0:
            defines["CT_S2"] = None  # the row as interleaved cols rows (kernel = stride = 2)
        launches.append(Launch("conv_transpose", "col2im_2d", gsize, args + [tab], ls, defines, ctx.label()))
        return launches
    if ctx.const(1) is not None:
        cols = _products_gemm(ctx, C, M, group, int(np.prod(k)), int(np.prod(ins)), launches)
        args = [cols, cols]  # the gather reads cols; its weight argument is unused
    else:
        args = [ctx.buf(0), ctx.buf(1)]
    defines: dict = {"SD": sd}
    if launches:
        defines["COLS"] = None
    if ctx.has_input(2):
        args.append(ctx.buf(2))
        defines["HAS_BIAS"] = None
    g, l = work_size(ctx, out.size)
    launches.append(Launch("conv_transpose", "conv_transpose", g, args + [ctx.out(0), i32(out.size), i32(C), i32(M),
                                                                         i32(group), geo], l, defines, ctx.label()))
    return launches


def _taps(n_in: int, n_out: int, k: int, s: int, d: int, pad: int) -> np.ndarray:
    """[n_out, T, 2] int32: for output o along one axis, the (tap, input index) pairs with
    o = i * s - pad + tap * d (tap -1 where fewer than T reach o)."""
    per: list = [[] for _ in range(n_out)]
    for i in range(n_in):
        for t in range(k):
            o = i * s - pad + t * d
            if 0 <= o < n_out:
                per[o].append((t, i))
    width = max(1, max(len(p) for p in per))
    tab = np.full((n_out, width, 2), -1, np.int32)
    for o, p in enumerate(per):
        if p:
            tab[o, :len(p)] = p
    return tab


def _products_gemm(ctx: LowerCtx, C: int, M: int, group: int, ksz: int, isz: int, launches: list):
    """cols[(n * group + g)][m * ksz + k][i] = sum_c W[g * cg + c, m, k] * X[n, g * cg + c, i] as one
    batched GEMM (A: W^T per group, packed once; B: X per image and group, in place or packed).
    """
    cfg = gemm_config(ctx.device)
    n_img = int(ctx.inputs[0].shape[0])
    cg, mg = C // group, M // group
    rows = mg * ksz

    def wt(w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, np.float32).reshape(group, cg, rows)
        return pack_a(np.ascontiguousarray(w.swapaxes(-1, -2)), cfg.mr)

    a = Operand(ctx.derived(1, f"convTA{cfg.mr}", wt), packed=True, s2=max(round_up(rows, cfg.mr), cfg.mr) * cg)
    if b_unpacked_ok(cfg, isz):
        b = Operand(ctx.buf(0), ld=isz, s1=C * isz, s2=cg * isz)
    else:
        per = packed_b_bytes(cfg.nr, cg, isz, 1) // 4
        dst = ctx.scratch(4 * per * n_img * group)
        launches.append(pack_b_launch(ctx.device, cfg.nr, src=ctx.buf(0), off=0, s1=C * isz, s2=cg * isz,
                                      s_k=isz, s_n=1, k=cg, n=isz, batch=n_img * group, d2=group, dst=dst, label=ctx.label()))
        b = Operand(dst, packed=True, s1=group * per, s2=per)
    cols = ctx.scratch(4 * n_img * group * rows * isz)
    launches.append(gemm_launch(cfg, m=rows, n=isz, k=cg, batch=n_img * group, d2=group, a=a, b=b,
                                c=Operand(cols, ld=isz, s1=group * rows * isz, s2=rows * isz), label=ctx.label()))
    return cols
