"""Run one node's launches with pyopencl for the GEMM/Conv tests.

Builds on run_launches.py (device, program cache, lowering context, buffer binding) and adds
what these tests need: caller-supplied expected outputs, an explicit DeviceInfo (to exercise
other tile configurations) and the GEMM benchmark.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
import pyopencl as cl

from clglow.lower.base import DeviceInfo

try:  # tests/kernels may or may not be a package
    from .run_launches import context, device_info, execute, lower_ctx, reference
except ImportError:  # pragma: no cover
    from run_launches import context, device_info, execute, lower_ctx, reference  # type: ignore


def lower(node: onnx.NodeProto, feeds: dict, consts: dict, out_shapes: dict, opset: int = 17,
          device: Optional[DeviceInfo] = None) -> list:
    """The node's launches for these shapes (consts become graph constants)."""
    op, lctx = lower_ctx(node, feeds, consts, out_shapes, opset, device)
    return op.lower(lctx)


def run(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
        expected: Optional[list] = None, device: Optional[DeviceInfo] = None) -> tuple:
    """(got, expected) output lists; expected from onnx.reference unless given."""
    consts = consts or {}
    if expected is None:
        expected = reference(node, feeds, consts, opset)
    expected = [np.asarray(e) for e in expected]
    outs = [o for o in node.output if o]
    launches = lower(node, feeds, consts, {o: (e.shape, e.dtype) for o, e in zip(outs, expected)},
                     opset, device)
    got = execute(launches, {**feeds, **consts}, dict(zip(outs, expected)))
    return [got[o] for o in outs], expected


def check(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
          expected: Optional[list] = None, rtol: float = 1e-4, device: Optional[DeviceInfo] = None) -> None:
    """Assert the device result matches within rtol and atol = rtol * max|expected|."""
    got, exp = run(node, feeds, consts, opset, expected, device)
    for g, e in zip(got, exp):
        assert g.shape == e.shape, (g.shape, e.shape)
        atol = rtol * float(np.abs(e).max()) if e.size else 0.0
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


# --- benchmark: python tests/kernels/harness.py [reps] -------------------------------------------
def _bench_launches(launches: list, arrays: dict, out: tuple, reps: int) -> float:
    """Best wall time of enqueuing `launches` (buffers bound once, programs built before)."""
    import time

    try:
        from .run_launches import kernel
    except ImportError:  # pragma: no cover
        from run_launches import kernel  # type: ignore
    from clglow.lower.base import Buf, ConstBuf, Scratch

    ctx, q = context()
    mf = cl.mem_flags
    bufs: dict = {}

    def mem(arg):
        if isinstance(arg, Buf):
            if arg.name not in bufs:
                a = arrays.get(arg.name)
                bufs[arg.name] = (cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a) if a is not None
                                  else cl.Buffer(ctx, mf.READ_WRITE, int(np.prod(out)) * 4))
            return bufs[arg.name]
        if isinstance(arg, Scratch):
            return bufs.setdefault(("s", arg.slot), cl.Buffer(ctx, mf.READ_WRITE, arg.nbytes))
        if isinstance(arg, ConstBuf):
            return bufs.setdefault(("c", arg.key), cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                                             hostbuf=np.ascontiguousarray(arg.array)))
        return arg

    ks = []
    for ln in launches:
        k = kernel(ln.program, ln.build_options(), ln.kernel)
        ks.append((k, [mem(a) for a in ln.args], ln))
    best = float("inf")
    for _ in range(reps + 1):
        t = time.perf_counter()
        for k, args, ln in ks:
            k.set_args(*args)
            cl.enqueue_nd_range_kernel(q, k, tuple(ln.gsize), ln.lsize)
        q.finish()
        best = min(best, time.perf_counter() - t)
    return best


def bench(reps: int = 7) -> None:
    """GFLOP/s of the GEMM kernel (both operands packed, as after im2col), of whole 3x3 Conv
    layers with the same M x K x N (im2col + GEMM), of MatMul on live operands, and numpy."""
    import time

    from onnx import helper

    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    print(f"device: {device_info().name}")
    print(f"{'M x K x N':>18} {'gemm':>8} {'conv3x3':>8} {'matmul':>8} {'numpy':>8}   GFLOP/s")
    for m, k, n, hw in [(64, 576, 3136, 56), (128, 1152, 784, 28), (256, 2304, 196, 14),
                        (512, 4608, 49, 7), (1024, 1024, 1024, 0)]:
        flop = 2.0 * m * k * n
        a, b = f(m, k), f(k, n)
        # GEMM alone: MatMul with both operands constant (both packed at plan time).
        ln = lower(helper.make_node("MatMul", ["a", "b"], ["y"]), {}, {"a": a, "b": b},
                   {"y": ((m, n), np.float32)})
        t_gemm = _bench_launches(ln, {}, (m, n), reps)
        # MatMul on live operands: A strided, B row-major in place or packed at run time.
        ln = lower(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": a, "b": b}, {},
                   {"y": ((m, n), np.float32)})
        t_mm = _bench_launches(ln, {"a": a, "b": b}, (m, n), reps)
        t_conv = float("nan")
        if hw:
            cin = k // 9
            x, w = f(1, cin, hw, hw), f(m, cin, 3, 3)
            ln = lower(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), {"x": x}, {"w": w},
                       {"y": ((1, m, hw, hw), np.float32)})
            t_conv = _bench_launches(ln, {"x": x}, (1, m, hw, hw), reps)
        t_np = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            t_np = min(t_np, time.perf_counter() - t)
        print(f"{m:>5}x{k:>5}x{n:>5} " + " ".join(f"{flop / t / 1e9:8.1f}" for t in (t_gemm, t_conv, t_mm, t_np)))


if __name__ == "__main__":
    import sys

    bench(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
