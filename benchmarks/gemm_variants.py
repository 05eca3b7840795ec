"""gemm.cl variants side by side: single-kernel GFLOP/s from OpenCL profiling events, in turns.

    python -m benchmarks.gemm_variants MxKxN NAME:KEY=VALUE,... [NAME:...] [--rounds R]

Each variant is one gemm.cl program and operand layout on the same A and B (M x K @ K x N, ReLU
epilogue, one launch): KEY is a -D define (MR, VW, NV, PFB, AKB, ...) or A_PACKED / B_PACKED
(1: panels as the lowering packs them, 0: read in place) or LDA / LDB (the in-place row pitch,
to see a pitch's effect). The variants run in turns, `--rounds` times, then numpy on its own
(OpenBLAS's spinning threads would slow whatever ran next); every result is checked against
numpy. On a busy machine compare variants within one run (medians and bests), not across runs.

Example (the in-place B pitch and the prefetch distance, CLGLOW_DEVICE selects the device)::

    python -m benchmarks.gemm_variants 1024x1024x1024 packed: inplace:B_PACKED=0 \\
        pitch1040:B_PACKED=0,LDB=1040 pfb8:B_PACKED=0,PFB=8
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import List, Optional, Sequence

import numpy as np
import pyopencl as cl

from clglow.lower.gemm_kernel import pack_a, pack_b
from clglow.runtime.device import select_device


def _variant(dev, spec: str, a: np.ndarray, b: np.ndarray, c_buf) -> tuple:
    """(name, kernel, gsize, buffers kept alive) of one NAME:KEY=VALUE,... spec."""
    name, _, kv = spec.partition(":")
    opts = dict(x.split("=", 1) for x in kv.split(",") if x)
    mr, vw, nv = int(opts.pop("MR", 12)), int(opts.pop("VW", 16)), int(opts.pop("NV", 2))
    ap, bp = int(opts.pop("A_PACKED", 1)), int(opts.pop("B_PACKED", 1))
    (m, k), n = a.shape, b.shape[1]
    lda, ldb = int(opts.pop("LDA", k)), int(opts.pop("LDB", n))
    defines = {"MR": mr, "VW": vw, "NV": nv, "A_PACKED": ap, "B_PACKED": bp, **opts}
    prg = dev.program("gemm", tuple(f"-D{key}={val}" for key, val in sorted(defines.items())))
    ha = pack_a(a, mr) if ap else np.ascontiguousarray(np.pad(a, ((0, 0), (0, lda - k))))
    hb = pack_b(b, vw * nv) if bp else np.ascontiguousarray(np.pad(b, ((0, 0), (0, ldb - n))))
    mf = cl.mem_flags
    bufs = [cl.Buffer(dev.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h) for h in (ha, hb)]
    i, f = np.int32, np.float32
    kern = cl.Kernel(prg, "gemm")
    kern.set_args(bufs[0], i(0), i(0), i(0), i(lda), i(1), bufs[1], i(0), i(0), i(0), i(ldb),
                  c_buf, i(0), i(0), i(0), i(n), c_buf, i(0), i(0), i(0), i(0), i(0), f(0), c_buf, i(0), i(0), i(0),
                  i(m), i(n), i(k), i(1), f(1), i(0), f(1), f(0), f(np.inf), c_buf, i(1), i(1), i(1), i(0))
    return name, kern, (-(-m // mr), -(-n // (vw * nv)), 1), bufs


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gemm_variants", description=__doc__.split("\n\n")[0])
    p.add_argument("shape", metavar="MxKxN")
    p.add_argument("variants", nargs="+", metavar="NAME:KEY=VALUE,...")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    m, k, n = (int(x) for x in args.shape.lower().split("x"))
    dev = select_device()
    queue = cl.CommandQueue(dev.context, dev.cl_device, properties=cl.command_queue_properties.PROFILING_ENABLE)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    want = np.maximum(a @ b, 0)
    c_buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, 4 * m * n)
    runs = [_variant(dev, spec, a, b, c_buf) for spec in args.variants]
    times: List[List[float]] = [[] for _ in runs]
    ok = True
    for name, kern, gsize, _bufs in runs:  # warm-up and check
        cl.enqueue_nd_range_kernel(queue, kern, gsize, (1, 1, 1)).wait()
        got = np.empty((m, n), np.float32)
        cl.enqueue_copy(queue, got, c_buf).wait()
        err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))
        if err > 1e-4:
            print(f"{name}: WRONG (max rel. diff {err:.1e})", file=sys.stderr)
            ok = False
    for _ in range(args.rounds):
        for t, (_name, kern, gsize, _bufs) in zip(times, runs):
            ev = cl.enqueue_nd_range_kernel(queue, kern, gsize, (1, 1, 1))
            ev.wait()
            t.append((ev.profile.end - ev.profile.start) * 1e-9)
    t_np = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        a @ b
        t_np.append(time.perf_counter() - t0)
    flop = 2.0 * m * n * k
    print(f"{dev.name.strip()}: {m}x{k}x{n}, GFLOP/s median / best of {args.rounds}")
    print(f"  {'numpy':24s} {flop / statistics.median(t_np) / 1e9:6.0f} / {flop / min(t_np) / 1e9:6.0f}")
    for t, (name, *_rest) in zip(times, runs):
        print(f"  {name:24s} {flop / statistics.median(t) / 1e9:6.0f} / {flop / min(t) / 1e9:6.0f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
