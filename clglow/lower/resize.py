"""Lowering of Resize (opset 10+; constant scales or sizes) to OpenCL (see lower/base.py).

Resize is separable: one launch per resized axis, in onnx.reference's order, each reading K taps per
output coordinate. The taps (clamped indices, weights, tf_crop_and_resize extrapolation flags) are
computed here, once per plan, with onnx.reference's own coordinate transformation and coefficient
functions (nearest modes, linear, cubic with cubic_coeff_a, exclude_outside, antialias, roi,
keep_aspect_ratio_policy, axes), so the device follows the reference's rules exactly.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, i32
from .common import (attr_str, check_dtypes, check_int32_sizes, floats, grid, norm_axis, plan_constants,
                     type_defines, work_size)
from .movement import copy_launches


def _consts(node: Node, graph: Graph) -> Optional[tuple]:
    """(roi, scales, sizes) as arrays or None; None overall when a needed input is not constant."""
    opset = graph.opset(node.domain)
    if opset < 11:
        scales = graph.const(node.input(1))
        return None if scales is None else (None, scales, None)
    out = []
    for i in (1, 2, 3):
        name = node.input(i)
        if not name:
            out.append(None)
            continue
        c = graph.const(name)
        if c is None:
            return None
        out.append(c if np.asarray(c).size else None)
    if out[1] is None and out[2] is None:
        return None
    return tuple(out)


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    if _consts(node, graph) is None and not plan_constants(node, graph, (1, 2, 3)):
        return "Resize with computed roi, scales or sizes runs on the host"
    try:
        from onnx.reference.ops import op_resize  # noqa: F401
    except ImportError:  # pragma: no cover
        return "Resize needs onnx.reference's coefficient functions"
    return check_dtypes(node, graph, floats(target), inputs=[0])


def _coeff_fn(ctx: LowerCtx):
    from onnx.reference.ops import op_resize as R

    mode = attr_str(ctx.attr("mode"), "nearest")
    antialias = int(ctx.attr("antialias", 0) or 0)
    if mode == "nearest":
        nm = attr_str(ctx.attr("nearest_mode"), "round_prefer_floor" if ctx.opset >= 11 else "floor")
        return lambda x, s: R._nearest_coeffs(x, mode=nm)
    if mode == "cubic":
        a = float(ctx.attr("cubic_coeff_a", -0.75))
        f = R._cubic_coeffs_antialias if antialias else R._cubic_coeffs
        return lambda x, s: f(x, s, A=a)
    if mode == "linear":
        return R._linear_coeffs_antialias if antialias else R._linear_coeffs
    raise ValueError(f"{ctx.node.name}: Resize mode {mode!r}")


def _taps(get_coeffs, in_w: int, scale: float, out_w: int, roi, ctm: str, exclude_outside: bool) -> tuple:
    """Mirror of onnx.reference's _interpolate_1d_along_axis: (clamped idx, coeffs, extrapolated)."""
    from onnx.reference.ops import op_resize as R

    y = np.arange(out_w, dtype=np.float64)
    x_ori, ext = R._compute_x_ori(ctm, y, scale, in_w, scale * in_w, out_w, roi)
    x_ori = np.asarray(x_ori, np.float64)
    x_int = np.floor(x_ori).astype(np.int64)
    ratios = np.where(x_ori == x_int, 1.0, x_ori - x_int)
    coeffs = np.array([np.asarray(get_coeffs(float(r), scale), np.float64) for r in ratios])
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x_ori + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        off = np.where(frac <= 0.5, base, base + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_w), 0.0, coeffs)
        s = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(s == 0, 1.0, s)
    ext = np.zeros(out_w, bool) if ext is None else np.asarray(ext, bool)
    return np.clip(idx, 0, in_w - 1).astype(np.int32), coeffs, ext


def _compact(idx: np.ndarray, w: np.ndarray) -> tuple:
    """The taps with a nonzero weight only, as narrow [n, m] tables (m = the most any output
    has; the rest index 0 with weight 0): nearest modes come with their unused second tap."""
    keep = w != 0
    m = max(1, int(keep.sum(axis=1).max()))
    if m == w.shape[1]:
        return idx, w
    ci, cw = np.zeros((len(w), m), idx.dtype), np.zeros((len(w), m), w.dtype)
    for o in range(len(w)):
        k = np.flatnonzero(keep[o])
        ci[o, :len(k)], cw[o, :len(k)] = idx[o, k], w[o, k]
    return ci, cw


RS_ROWS = 8  # output rows per work-item of resize_2d_win


def _tile_bases(ix: np.ndarray, in_w: int) -> np.ndarray:
    """Per 16-output tile of a row (resize_2d), the first of 16 input columns holding all of its
    column taps ix [OW, KX], within the row; -1 where they span more (downscaling, a tile at
    the row's end of a row narrower than 16)."""
    ow = ix.shape[0]
    tiles = -(-ow // 16)
    out = np.full(tiles, -1, np.int32)
    for t in range(tiles):
        taps = ix[16 * t:16 * t + 16]
        lo = min(int(taps.min()), in_w - 16)
        if lo >= 0 and int(taps.max()) < lo + 16:
            out[t] = lo
    return out


def _image_launch(ctx: LowerCtx, taps: list, in_shape: list, out_shape: list, ev: float) -> Launch:
    """The one-pass resize of the last two axes (resize_2d, or resize_2d_win when most tiles'
    column taps lie within 16 input columns) from the (index, weight, extrapolated) taps of the
    rows and of the columns."""
    (iy, wy, ey), (ix, wx, ex) = (_compact(i, w) + (e,) for i, w, e in taps)
    planes = int(np.prod(in_shape[:-2], dtype=np.int64))
    oh, ow = out_shape[-2:]

    def cols(t: np.ndarray, dtype) -> np.ndarray:  # [OW, KX] -> [KX, OW + 16], zero padded
        out_t = np.zeros((t.shape[1], ow + 16), dtype)
        out_t[:, :ow] = t.T
        return out_t

    ext_pad = np.zeros(ow + 16, np.uint8)
    ext_pad[:ow] = ex
    args = [ctx.buf(0), ctx.out(0)] + [i32(v) for v in (in_shape[-2], in_shape[-1], oh, ow, iy.shape[1])]
    args += [ctx.const_buffer(iy.astype(np.int32)), ctx.const_buffer(wy.astype(np.float32)),
             ctx.const_buffer(ey.astype(np.uint8)), ctx.const_buffer(cols(ix, np.int32)),
             ctx.const_buffer(cols(wx, np.float32)), ctx.const_buffer(ext_pad), np.float32(ev)]
    bases = _tile_bases(ix, in_shape[-1])
    args.append(ctx.const_buffer(bases))
    defines = {"RS_KX": int(ix.shape[1])}
    if (ix.shape[1] == 1 and np.array_equal(ix[:, 0], np.arange(ow) // 2) and np.all(wx == 1.0)
            and not ex.any()):
        defines["RS_DUP2"] = None  # YOLO's nearest 2x upsampling: a shuffle per 16 outputs
    elif (bases >= 0).mean() >= 0.5:
        # most tiles' taps within 16 columns (upsampling): RS_R rows per work-item, each input
        # row loaded and interpolated along the row once for the output rows that read it
        gsize, ls = grid(ctx.device, (-(-ow // 16), -(-oh // RS_ROWS), planes), (1, 1, 1))
        return Launch("resize", "resize_2d_win", gsize, args, ls, dict(defines, RS_R=RS_ROWS), ctx.label())
    gsize, ls = grid(ctx.device, (-(-ow // 16), oh, planes), (1, 8, 1))
    return Launch("resize", "resize_2d", gsize, args, ls, defines, ctx.label())


@device_op("Resize", supports=_supports)
def lower_resize(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    consts = _consts(ctx.node, ctx.graph)
    if consts is None:
        raise ValueError(f"{ctx.node.name}: Resize parameters are not constant")
    roi, scales, sizes = consts
    r = len(x.shape)
    in_shape = [int(d) for d in x.shape]
    out_shape = [int(d) for d in out.shape]
    axes = ctx.attr("axes")
    axes = list(range(r)) if axes is None else [norm_axis(a, r) for a in axes]
    full_roi = None
    if roi is not None:
        roi = np.asarray(roi, np.float64).reshape(-1)
        full_roi = [0.0] * r + [1.0] * r
        for k, a in enumerate(axes):
            full_roi[a], full_roi[r + a] = roi[k], roi[len(axes) + k]
    scale = [1.0] * r
    if scales is not None:
        sc = np.asarray(scales, np.float64).reshape(-1)
        for k, a in enumerate(axes):
            scale[a] = float(sc[k])
    else:
        for a in axes:
            scale[a] = out_shape[a] / in_shape[a]  # the sizes (after any aspect policy) over the input
        pol = attr_str(ctx.attr("keep_aspect_ratio_policy"), "stretch")
        if pol != "stretch":
            sz = np.asarray(sizes, np.float64).reshape(-1)
            req = [sz[k] / in_shape[a] for k, a in enumerate(axes)]
            s = min(req) if pol == "not_larger" else max(req)
            for a in axes:
                scale[a] = s
    ctm = attr_str(ctx.attr("coordinate_transformation_mode"), "half_pixel" if ctx.opset >= 11 else "asymmetric")
    excl = bool(int(ctx.attr("exclude_outside", 0) or 0))
    ev = float(ctx.attr("extrapolation_value", 0.0) or 0.0)
    fn = _coeff_fn(ctx)
    dt = np.dtype(x.dtype)
    cur_shape = list(in_shape)
    steps = []
    for a in axes:
        a_roi = None if full_roi is None else [full_roi[a], full_roi[a + r]]
        if (np.isclose(scale[a], 1.0) and out_shape[a] == cur_shape[a]
                and (a_roi is None or (np.isclose(a_roi[0], 0.0) and np.isclose(a_roi[1], 1.0)))):
            continue
        steps.append((a, a_roi))
        cur_shape = cur_shape[:a] + [out_shape[a]] + cur_shape[a + 1:]
    if not steps:
        return copy_launches(ctx, ctx.buf(0), ctx.out(0), dt, [x.size], [1], [1])
    if r >= 3 and dt == np.float32 and {a for a, _ in steps} <= {r - 2, r - 1}:
        # the last two axes (an image resize; one of them may stay): one pass, tabulated taps
        taps = []
        for a in (r - 2, r - 1):
            a_roi = None if full_roi is None else [full_roi[a], full_roi[a + r]]
            if a in {b for b, _ in steps}:
                taps.append(_taps(fn, in_shape[a], scale[a], out_shape[a], a_roi, ctm, excl))
            else:  # unchanged axis: the identity tap
                taps.append((np.arange(in_shape[a], dtype=np.int32)[:, None], np.ones((in_shape[a], 1)),
                             np.zeros(in_shape[a], bool)))
        return [_image_launch(ctx, taps, in_shape, out_shape, ev)]
    launches = []
    src, cur_shape = ctx.buf(0), list(in_shape)
    for k, (a, a_roi) in enumerate(steps):
        idx, w, ext = _taps(fn, cur_shape[a], scale[a], out_shape[a], a_roi, ctm, excl)
        nxt = cur_shape[:a] + [out_shape[a]] + cur_shape[a + 1:]
        n = int(np.prod(nxt, dtype=np.int64))
        dst = ctx.out(0) if k == len(steps) - 1 else ctx.scratch(n * dt.itemsize)
        inner = int(np.prod(cur_shape[a + 1:], dtype=np.int64))
        g, l = work_size(ctx, n)
        launches.append(Launch("resize", "resize_axis", g, [
            src, dst, i32(n), i32(cur_shape[a]), i32(out_shape[a]), i32(inner), i32(idx.shape[1]),
            ctx.const_buffer(idx), ctx.const_buffer(w.astype(dt)), ctx.const_buffer(ext.astype(np.uint8)),
            dt.type(ev)], l, type_defines(T=dt), ctx.label()))
        src, cur_shape = dst, nxt
    return launches
