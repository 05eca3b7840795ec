"""SGEMM through a one-node MatMul model: clglow vs numpy (OpenBLAS) vs onnxruntime.

    python -m benchmarks.gemm [--repeat R] [--warmup W] [--shapes MxKxN ...]

Shapes (M x K x N, Y[M,N] = A[M,K] @ B[K,N]): 1024^3 and ResNet-50's im2col GEMMs, where A is
a convolution's weights [Cout, Cin*kh*kw] and B the unfolded image [Cin*kh*kw, H*W].

Per shape, alternating after a warm-up: numpy ``A @ B``; onnxruntime and clglow with A and B
both graph inputs (a plain SGEMM, host<->device copies included in clglow's time); and both
again with A an initializer (the convolution case: clglow may pack it once at load). "clglow
kernels" is the sum of clglow's kernel times from OpenCL profiling events (no copies, no host
overhead), measured in a separate profiling session.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Optional, Sequence

import numpy as np

from . import models as M
from .runner import alternate, clglow_session, ort_session

SHAPES = [(1024, 1024, 1024), (64, 576, 3136), (128, 1152, 784), (256, 2304, 196), (512, 4608, 49)]


class _Profiled:
    """A profiling clglow session run inside the alternation: per run, its wall time and the
    summed kernel time of the same run (OpenCL profiling events), so that "outside the kernels"
    (binding, enqueue, the driver's start, the wait and return) is measured on the runs that
    are timed, not in a separate session whose kernels ran back to back with warm caches
    (measured: a one-node MatMul's kernel 1.7-1.9x slower right after onnxruntime than back to
    back, under load)."""

    def __init__(self, model, feeds: dict):
        self.sess, self.feeds = clglow_session(model, profiling=True), feeds
        self.wall: list = []
        self.kernels: list = []
        self.split: dict = {}

    def __call__(self) -> None:
        from clglow.runtime.profiler import kernel_times

        t0 = time.perf_counter()
        self.sess.run(None, self.feeds)
        wall = time.perf_counter() - t0
        records = list(self.sess._engine.records)
        self.sess._engine.records.clear()
        times = kernel_times(records[-1:])
        self.wall.append(wall * 1e3)
        self.kernels.append(sum(e - st for _, _, _, st, e in times) / 1e6)
        run_split: dict = {}
        for _, name, _, st, e in times:
            run_split[name] = run_split.get(name, 0.0) + (e - st) / 1e6
        for name, ms in run_split.items():
            self.split.setdefault(name, []).append(ms)

    def summary(self, warmup: int) -> tuple:
        """(median kernel ms, median ms outside the kernels, {kernel: median ms}) of the timed runs."""
        k, w = self.kernels[warmup:] or self.kernels, self.wall[warmup:] or self.wall
        if not k:
            return None, None, {}
        outside = statistics.median(wi - ki for wi, ki in zip(w, k))
        return (statistics.median(k), outside,
                {name: statistics.median(v[warmup:] or v) for name, v in self.split.items()})


def bench_shape(m: int, k: int, n: int, repeat: int, warmup: int) -> dict:
    rng = np.random.default_rng([m, k, n])
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    ref = a @ b
    both = M.matmul_model(m, k, n)
    const = M.matmul_model(m, k, n, const_a=a)
    feeds_both, feeds_const = {"A": a, "B": b}, {"B": b}

    ours = clglow_session(both)
    ours_c = clglow_session(const)
    ort = ort_session(both.SerializeToString())
    ort_c = ort_session(const.SerializeToString())
    scale = float(np.max(np.abs(ref)))
    diff = max(float(np.max(np.abs(ours.run(None, feeds_both)[0] - ref))),
               float(np.max(np.abs(ours_c.run(None, feeds_const)[0] - ref))))
    prof = _Profiled(both, feeds_both)
    timings = alternate({
        "onnxruntime": lambda: ort.run(None, feeds_both),
        "clglow": lambda: ours.run(None, feeds_both),
        "clglow_profiled": prof,
        "onnxruntime_const_a": lambda: ort_c.run(None, feeds_const),
        "clglow_const_a": lambda: ours_c.run(None, feeds_const),
    }, repeat, warmup)
    ours.release()
    ours_c.release()
    prof.sess.release()
    kernel, outside, split = prof.summary(warmup)
    # numpy on its own, after the others: OpenBLAS's worker threads busy-wait for a while after
    # each call (OPENBLAS_THREAD_TIMEOUT, ~0.1 s by default), which would take the cores from
    # whatever ran next in an alternation (measured: clglow's 1024^3 kernels 490 GFLOP/s alone,
    # 180-260 right after numpy; the kernel times above were 25% longer when taken after it).
    timings.update(alternate({"numpy": lambda: a @ b}, repeat, warmup))
    return {"shape": (m, k, n), "flops": 2.0 * m * k * n,
            "median_s": {name: t.median for name, t in timings.items()},
            "min_s": {name: t.min for name, t in timings.items()},
            "max_s": {name: t.max for name, t in timings.items()},
            "clglow_kernel_ms": kernel, "clglow_outside_ms": outside, "clglow_kernel_split_ms": split,
            "max_rel_diff": diff / max(scale, 1e-30)}


def bench(repeat: int = 10, warmup: int = 3, shapes: Sequence[tuple] = SHAPES, log=print) -> list:
    rows = []
    for m, k, n in shapes:
        rows.append(bench_shape(m, k, n, repeat, warmup))
        med = rows[-1]["median_s"]
        split = ", ".join(f"{name} {ms:.3f}" for name, ms in rows[-1]["clglow_kernel_split_ms"].items())
        log(f"  {m}x{k}x{n}: numpy {med['numpy'] * 1e3:.2f} ms, onnxruntime {med['onnxruntime'] * 1e3:.2f} ms, "
            f"clglow {med['clglow'] * 1e3:.2f} ms (profiled runs: kernels {split or '-'} ms, "
            f"outside them {_ms(rows[-1]['clglow_outside_ms'])} ms)")
    return rows


def _ms(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def table(rows: list) -> str:
    lines = ["| M x K x N | GFLOP | numpy GFLOP/s | ORT GFLOP/s | clglow GFLOP/s | clglow kernels GFLOP/s | "
             "ORT (A const) GFLOP/s | clglow (A const) GFLOP/s | clglow % of numpy | clglow % of ORT | "
             "clglow (A const) % of ORT (A const) | clglow outside kernels (ms) | max rel. diff |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f, med = r["flops"], r["median_s"]
        gf = {k: f / v / 1e9 for k, v in med.items()}
        km = r["clglow_kernel_ms"]
        kern = f"{f / (km / 1e3) / 1e9:.0f}" if km else "-"
        m, k, n = r["shape"]
        flag = "" if r["max_rel_diff"] < 1e-4 else " **WRONG**"
        lines.append(f"| {m}x{k}x{n} | {f / 1e9:.2f} | {gf['numpy']:.0f} | {gf['onnxruntime']:.0f} | "
                     f"{gf['clglow']:.0f} | {kern} | {gf['onnxruntime_const_a']:.0f} | {gf['clglow_const_a']:.0f} | "
                     f"**{100 * gf['clglow'] / gf['numpy']:.0f}%** | {100 * gf['clglow'] / gf['onnxruntime']:.0f}% | "
                     f"{100 * gf['clglow_const_a'] / gf['onnxruntime_const_a']:.0f}% | {_ms(r.get('clglow_outside_ms'))} | "
                     f"{r['max_rel_diff']:.1e}{flag} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gemm", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--shapes", nargs="*", metavar="MxKxN", help="default: 1024^3 and ResNet-50's im2col shapes")
    args = p.parse_args(argv)
    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes] if args.shapes else SHAPES
    rows = bench(args.repeat, args.warmup, shapes, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(table(rows))
    return 0 if all(r["max_rel_diff"] < 1e-4 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
