"""Lowering of DeformConv (opset 19+, 2-D) to OpenCL (see lower/base.py).

A deformable im2col (deform_conv.cl) samples every (input channel, kernel tap, output position)
bilinearly at its offset position, times its mask, into scratch columns, once for all output
channels; the product of each group's weights with its columns, plus the bias, is one batched
gemm.cl GEMM for float32 (weights packed at plan time when constant; the columns read in place
or packed), deform_conv.cl's own product for float64.
Attributes: dilations, group, kernel_shape, offset_group, pads, strides; optional B and mask.
Other ranks than 2 spatial dims fall back to the host (as onnx.reference, which does 2-D only).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, Scratch, device_op, round_up
from .common import F32, check_dtypes, check_int32_sizes, floats, grid, shape_of, type_defines
from .gemm_kernel import (Bias, Operand, b_unpacked_ok, fit_rows, gemm_config, gemm_launch, pack_a, pack_b_launch,
                          packed_b_bytes)
from .spatial import check_out_type

_OCB = 4  # output channels per work-item of deform_gemm (each column load serves them all)


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    shp = shape_of(graph, node.input(0))
    if shp is not None and len(shp) != 4:
        return f"DeformConv of {len(shp) - 2} spatial dims (the kernel does 2)"
    return check_dtypes(node, graph, floats(target))


def _dims(ctx: LowerCtx) -> list:
    """The kernels' dims table, after checking the shapes against each other."""
    x, w, off, out = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]
    n, ic, ih, iw = (int(d) for d in x.shape)
    oc = int(w.shape[0])
    ks = [int(k) for k in ctx.attr("kernel_shape", w.shape[2:])]
    kh, kw = ks
    g, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    st = [int(s) for s in ctx.attr("strides", [1, 1])]
    pads = [int(p) for p in ctx.attr("pads", [0, 0, 0, 0])]
    dil = [int(d) for d in ctx.attr("dilations", [1, 1])]
    oh, ow = (int(d) for d in out.shape[2:])
    bad = []
    if g < 1 or og < 1 or ic != int(w.shape[1]) * g or oc % g or ic % og:
        bad.append(f"X {x.shape}, W {w.shape}, group {g}, offset_group {og}")
    if tuple(w.shape[2:]) != (kh, kw):
        bad.append(f"kernel_shape {ks} for W {w.shape}")
    if tuple(off.shape) != (n, og * kh * kw * 2, oh, ow):
        bad.append(f"offset {off.shape} (expected {(n, og * kh * kw * 2, oh, ow)})")
    if ctx.has_input(4) and ctx.inputs[4].size != n * og * kh * kw * oh * ow:
        bad.append(f"mask {ctx.inputs[4].shape}")
    if ctx.has_input(3) and ctx.inputs[3].size != oc:
        bad.append(f"B {ctx.inputs[3].shape}")
    for d, (i_d, o_d) in enumerate(((ih, oh), (iw, ow))):
        if o_d != (i_d + pads[d] + pads[d + 2] - ((ks[d] - 1) * dil[d] + 1)) // st[d] + 1:
            bad.append(f"output {out.shape} for pads {pads}, strides {st}, dilations {dil}")
            break
    if bad:
        raise InvalidModel("DeformConv shapes disagree: " + "; ".join(bad), node=ctx.label())
    return [n, ic, ih, iw, oh, ow, kh, kw, st[0], st[1], pads[0], pads[1], dil[0], dil[1], og, g, oc]


@device_op("DeformConv", supports=_supports)
def lower_deform_conv(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    check_out_type(ctx)
    dims = _dims(ctx)
    n, ic, _, _, oh, ow, kh, kw = dims[:8]
    ncols = n * ic * kh * kw * oh * ow
    defines = type_defines(T=x.dtype)
    if ctx.has_input(4):
        defines["HAS_MASK"] = None
    if ctx.has_input(3):
        defines["HAS_BIAS"] = None
    item = np.dtype(x.dtype).itemsize
    cols = ctx.scratch(ncols * item)
    meta = ctx.const_buffer(np.array(dims, np.int32))
    mask = ctx.buf(4) if ctx.has_input(4) else ctx.buf(0)
    bias = ctx.buf(3) if ctx.has_input(3) else ctx.buf(0)
    p = oh * ow
    g1, l1 = grid(ctx.device, (ow, oh, n * ic), (64, 1, 1))
    oc, groups = dims[16], dims[15]
    blocks = groups * -(-(oc // groups) // _OCB)
    im2col = Launch("deform_conv", "deform_im2col", g1, [ctx.buf(0), ctx.buf(2), mask, cols, meta], l1, defines,
                    ctx.label())
    if np.dtype(x.dtype) == F32:
        return [im2col] + _gemm(ctx, dims, cols)
    g2, l2 = grid(ctx.device, (p, blocks, n), (64, 1, 1))
    defines2 = dict(defines, OCB=_OCB)
    return [im2col, Launch("deform_conv", "deform_gemm", g2, [cols, ctx.buf(1), bias, ctx.out(0), meta], l2,
                           defines2, ctx.label())]


def _gemm(ctx: LowerCtx, dims: list, cols: Scratch) -> list:
    """Y[n, g] = W[g] @ cols[n, g] + B[g] as one gemm.cl launch over images x groups (d2 = groups)."""
    n, ic, _, _, oh, ow, kh, kw = dims[:8]
    g, oc = dims[15], dims[16]
    p, k, ocg = oh * ow, ic // g * kh * kw, oc // g
    cfg = fit_rows(ctx.device, gemm_config(ctx.device), ocg, p)
    if ctx.const(1) is not None:
        packed = ctx.derived(1, f"deform_conv_a{cfg.mr}", lambda w: pack_a(np.asarray(w).reshape(g, ocg, k), cfg.mr))
        a = Operand(packed, packed=True, s2=max(round_up(ocg, cfg.mr), cfg.mr) * k)
    else:
        a = Operand(ctx.buf(1), s2=ocg * k, ld=k, ld2=1)
    launches = []
    if b_unpacked_ok(cfg, p):
        b = Operand(cols, s1=ic * kh * kw * p, s2=k * p, ld=p)
    else:
        panels = ctx.scratch(packed_b_bytes(cfg.nr, k, p, n * g))
        launches.append(pack_b_launch(ctx.device, cfg.nr, src=cols, off=0, s1=ic * kh * kw * p, s2=k * p, s_k=p,
                                      s_n=1, k=k, n=p, batch=n * g, d2=g, dst=panels, label=ctx.label()))
        per = max(round_up(p, cfg.nr), cfg.nr) * k
        b = Operand(panels, packed=True, s1=g * per, s2=per)
    c = Operand(ctx.out(0), s1=oc * p, s2=ocg * p, ld=p)
    bias = Bias(ctx.buf(3), sm=1, sn=0, s2=ocg) if ctx.has_input(3) else None
    launches.append(gemm_launch(cfg, m=ocg, n=p, k=k, batch=n * g, d2=g, a=a, b=b, c=c, bias=bias,
                                label=ctx.label()))
    return launches
