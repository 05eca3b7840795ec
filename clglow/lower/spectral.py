"""Lowering of DFT (opset 17 and 20) and STFT (opset 17) to OpenCL (kernels_cl/spectral.cl).

Lengths of 64 and more made of the primes 2..13 run as the mixed-radix Stockham FFT of
lower/fft.py (n log n); the others as direct sums, one work-item per output bin, the twiddle
read from a float64-computed table at the exact integer phase (k * t) mod n. Every DFT form
runs: real or complex input ([..., 1] or [..., 2]), forward or inverse, onesided (rfft: the
first n // 2 + 1 bins; irfft: a one-sided spectrum to n real samples), dft_length (zero
padding or truncation), and the axis as an attribute (opset 17) or a constant input (opset 20).
The values that decide the output shape (dft_length, axis, frame_step, frame_length) must be
known when the node is planned; they are whenever shape inference could give the output a
shape at all (graph inputs there become plan constants: runtime.engine.SHAPE_INPUTS).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, Scratch, device_op, i32
from .common import check_dtypes, check_int32_sizes, floats, shape_of, type_defines, work_size
from .fft import fft_launches, twiddles, use_fft


def _scalar(ctx: LowerCtx, i: int, what: str) -> Optional[int]:
    """The integer value of optional scalar input i (None when absent); it decides the output
    shape, so it must be a constant of the plan."""
    if not ctx.has_input(i):
        return None
    c = ctx.const(i)
    if c is None:
        raise InvalidModel(f"{ctx.node.op_type} {what} is computed at run time; the OpenCL kernel needs it when "
                           f"the node is planned", node=ctx.label(), tensor=ctx.node.inputs[i])
    return int(np.asarray(c).reshape(-1)[0])


def _check_last_dim(node: Node, graph: Graph, i: int) -> Optional[str]:
    shape = shape_of(graph, node.input(i))
    if shape is not None and shape and isinstance(shape[-1], int) and shape[-1] not in (1, 2):
        return f"{node.op_type} input {node.input(i)!r} has last dimension {shape[-1]}, not 1 (real) or 2 (complex)"
    return None


def _supports_dft(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return check_dtypes(node, graph, floats(target), inputs=[0], outputs=True) or _check_last_dim(node, graph, 0)


def _expect_shape(ctx: LowerCtx, shape: tuple) -> None:
    out = ctx.outputs[0]
    if tuple(out.shape) != tuple(shape):
        raise InvalidModel(f"{ctx.node.op_type} output has shape {list(out.shape)}; the attributes and inputs give "
                           f"{list(shape)}", node=ctx.label(), tensor=out.name)


def _dft_axis(ctx: LowerCtx, rank: int) -> int:
    axis = int(ctx.attr("axis", 1)) if ctx.opset < 20 else _scalar(ctx, 2, "axis")
    axis = -2 if axis is None else axis
    if not -rank <= axis < rank or axis % rank == rank - 1:
        raise InvalidModel(f"DFT axis {axis} is out of range for an input of rank {rank} (the last dimension "
                           f"holds the real and imaginary parts)", node=ctx.label())
    return axis % rank


@device_op("DFT", supports=_supports_dft)
def lower_dft(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    check_int32_sizes(ctx)
    shape = tuple(int(d) for d in x.shape)
    axis = _dft_axis(ctx, len(shape))
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    l_in, cin = shape[axis], shape[-1]
    n = _scalar(ctx, 1, "dft_length")
    if n is None:
        n = 2 * (l_in - 1) if inverse and onesided else l_in
    if n < 1:
        raise InvalidModel(f"DFT length {n} is not positive", node=ctx.label())
    irfft = inverse and onesided
    l_out = n if inverse else (n // 2 + 1 if onesided else n)
    _expect_shape(ctx, shape[:axis] + (l_out,) + shape[axis + 1:-1] + ((1,) if irfft else (2,)))
    if out.size == 0:
        return []
    inner = int(np.prod(shape[axis + 1:-1], dtype=np.int64))
    lim = min(l_in, n // 2 + 1) if irfft else min(l_in, n)
    if use_fft(n):
        rows = int(np.prod(shape[:axis], dtype=np.int64)) * inner
        return _dft_fft(ctx, rows, (l_in, inner, n, lim), l_out, inverse, irfft)
    defines = type_defines(T=x.dtype)
    defines["CIN"] = cin
    if inverse and not irfft:
        defines["INVERSE"] = None
    n_items = out.size if irfft else out.size // 2
    dims = ctx.const_buffer(np.array([l_in, inner, l_out, n, lim], np.int32))
    g, l = work_size(ctx, n_items, 64)
    tw = ctx.const_buffer(twiddles(n, x.dtype), key=f"fft-twiddles:{np.dtype(x.dtype).str}:{n}")
    return [Launch("spectral", "irfft" if irfft else "dft", g, [ctx.buf(0), tw, ctx.out(0), i32(n_items), dims], l,
                   defines, ctx.label())]


def _store(ctx: LowerCtx, l_out: int, inner: int, n: int, scale: float, real: bool) -> Callable[[Scratch], Launch]:
    """fft_store of the first l_out bins of each row into the output, times `scale`."""
    dt = np.dtype(ctx.outputs[0].dtype)
    items = ctx.outputs[0].size // (1 if real else 2)
    dims = ctx.const_buffer(np.array([l_out, inner, n], np.int32))
    defines = dict(type_defines(T=dt), COUT=1 if real else 2)
    g, l = work_size(ctx, items)
    return lambda rows: Launch("fft", "fft_store", g, [rows, ctx.out(0), i32(items), dt.type(scale), dims], l,
                               defines, ctx.label())


def _dft_fft(ctx: LowerCtx, rows: int, dims: tuple, l_out: int, inverse: bool, irfft: bool) -> list:
    """DFT as load (padding, truncation, irfft's Hermitian extension) + Stockham passes + store."""
    x = ctx.inputs[0]
    l_in, inner, n, lim = dims
    defines = dict(type_defines(T=x.dtype), CIN=int(x.shape[-1]))
    if irfft:
        defines["IRFFT"] = None
    dbuf = ctx.const_buffer(np.array(dims, np.int32))
    g, l = work_size(ctx, rows * n)
    load = lambda buf: Launch("fft", "fft_load", g, [ctx.buf(0), buf, i32(rows * n), dbuf], l, defines,  # noqa: E731
                              ctx.label())
    store = _store(ctx, l_out, inner, n, 1.0 / n if inverse else 1.0, irfft)
    return fft_launches(ctx, load, store, rows, n, x.dtype, inverse)


def _supports_stft(node: Node, graph: Graph, target: Target) -> Optional[str]:
    reason = check_dtypes(node, graph, floats(target), inputs=[0, 2], outputs=True) or _check_last_dim(node, graph, 0)
    shape = shape_of(graph, node.input(0))
    if reason is None and shape is not None and len(shape) != 3:
        reason = f"STFT signal of rank {len(shape)} (the schema's [batch, length, 1 or 2])"
    return reason


@device_op("STFT", supports=_supports_stft)
def lower_stft(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    check_int32_sizes(ctx)
    batch, length, cin = (int(d) for d in x.shape)
    step = _scalar(ctx, 1, "frame_step")
    has_window = ctx.has_input(2)
    n = _scalar(ctx, 3, "frame_length")
    if has_window:
        wlen = int(np.prod(ctx.inputs[2].shape, dtype=np.int64))
        if len(ctx.inputs[2].shape) != 1 or (n is not None and n != wlen):
            raise InvalidModel(f"STFT window of shape {list(ctx.inputs[2].shape)} does not match frame_length {n}",
                               node=ctx.label(), tensor=ctx.node.inputs[2])
        n = wlen if n is None else n
    n = length if n is None else n
    if step is None or step < 1 or n < 1:
        raise InvalidModel(f"STFT frame_step {step} and frame_length {n} must be positive", node=ctx.label())
    if np.dtype(ctx.inputs[2].dtype if has_window else x.dtype) != np.dtype(x.dtype):
        raise InvalidModel("STFT window dtype differs from the signal's", node=ctx.label(), tensor=ctx.node.inputs[2])
    frames = 1 + (length - n) // step
    k = n // 2 + 1 if int(ctx.attr("onesided", 1)) else n  # the schema's default (shapes.py infers it so)
    _expect_shape(ctx, (batch, frames, k, 2))
    if out.size == 0:
        return []
    defines = type_defines(T=x.dtype)
    defines["CIN"] = cin
    if has_window:
        defines["WINDOW"] = None
    win = ctx.buf(2) if has_window else ctx.buf(0)  # unread without WINDOW
    if use_fft(n):
        rows = batch * frames
        dbuf = ctx.const_buffer(np.array([length, frames, n, step], np.int32))
        g, l = work_size(ctx, rows * n)
        load = lambda buf: Launch("fft", "stft_load", g, [ctx.buf(0), win, buf, i32(rows * n), dbuf], l,  # noqa: E731
                                  defines, ctx.label())
        return fft_launches(ctx, load, _store(ctx, k, 1, n, 1.0, False), rows, n, x.dtype, False)
    n_items = out.size // 2
    dims = ctx.const_buffer(np.array([length, frames, k, n, step], np.int32))
    g, l = work_size(ctx, n_items, 64)
    tw = ctx.const_buffer(twiddles(n, x.dtype), key=f"fft-twiddles:{np.dtype(x.dtype).str}:{n}")
    return [Launch("spectral", "stft", g, [ctx.buf(0), win, tw, ctx.out(0), i32(n_items), dims], l, defines,
                   ctx.label())]
