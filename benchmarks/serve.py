"""`python -m benchmarks serve`: clglow served by Ray Serve (Open Inference Protocol over HTTP,
binary tensors as tritonclient sends them) with dynamic batching on and off, next to a single
in-process InferenceSession, at 1, 8 and 32 concurrent closed-loop clients.

    python -m benchmarks serve                      # ResNet-18, 64x64 input, symbolic batch
    python -m benchmarks serve --model m.onnx --clients 1 8 32 --requests 320 --replicas 1

Each client sends one-row requests one after another; the table gives answered requests per
second and the p50/p99 latency. The server, its Ray instance and the clients share this
machine's CPUs (on a CPU OpenCL device, the device too), so the HTTP and Ray overhead is part
of every figure; the in-process rows have none of it.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Sequence

import numpy as np


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or "unknown CPU"


def _in_process(sess, feeds_list: list, clients: int, total: int):
    """Closed-loop threads calling one session directly: the in-process reference rows."""
    from clglow.serve.loadgen import LoadReport

    rep, lock = LoadReport(), threading.Lock()
    per = max(1, total // clients)

    def worker(c: int) -> None:
        for i in range(per):
            t = time.perf_counter()
            sess.run(None, feeds_list[(c + i) % len(feeds_list)])
            with lock:
                rep.latencies_s.append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rep.wall_s = time.perf_counter() - t0
    return rep


def _model_file(path: Optional[str], folder: str) -> str:
    if path:
        return os.path.abspath(path)
    import onnx

    from clglow.models.resnet import resnet

    out = os.path.join(folder, "resnet18_64.onnx")
    onnx.save(resnet(18, batch="N", image_size=64, num_classes=10, seed=0), out)
    return out


def _feeds(sess, n: int) -> list:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        feeds = {}
        for a in sess.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in a.shape]
            feeds[a.name] = (rng.standard_normal(shape).astype(a.dtype) if np.dtype(a.dtype).kind == "f"
                             else np.zeros(shape, a.dtype))
        out.append(feeds)
    return out


def _row(clients: int, setup: str, rep) -> str:
    return (f"| {clients} | {setup} | {rep.throughput():.1f} | {rep.percentile_ms(50):.1f} | "
            f"{rep.percentile_ms(99):.1f} |")


def run(args: argparse.Namespace) -> str:
    """Measure and return the markdown table (with its header line)."""
    import ray

    import clglow
    from clglow.serve.app import ModelSpec, ServeConfig, start, stop
    from clglow.serve.loadgen import run_load
    from clglow.serve.protocol import encode_request

    folder = tempfile.mkdtemp(prefix="clglow-bench-serve-")
    path = _model_file(args.model, folder)
    sess = clglow.InferenceSession(path)
    feeds_list = _feeds(sess, 8)
    bodies = [encode_request(f, binary=True) for f in feeds_list]
    config = ServeConfig(models=(ModelSpec("on", path, max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms),
                                 ModelSpec("off", path, max_batch_size=0)), replicas=args.replicas, num_cpus=0.5)
    url = start(config, port=args.port, num_cpus=os.cpu_count())
    rows = []
    try:
        run_load(url, "on", bodies, clients=4, requests_per_client=8)  # warm-up
        run_load(url, "off", bodies, clients=4, requests_per_client=8)
        for c in args.clients:
            per = max(1, args.requests // c)
            print(f"{c} client(s) ...", file=sys.stderr, flush=True)
            on = run_load(url, "on", bodies, clients=c, requests_per_client=per)
            off = run_load(url, "off", bodies, clients=c, requests_per_client=per)
            local = _in_process(sess, feeds_list, c, per * c)
            for rep in (on, off):
                if rep.wrong or rep.failed:
                    raise RuntimeError(f"requests failed: {(rep.wrong + rep.failed)[:3]}")
            rows += [_row(c, "Ray Serve, dynamic batching on", on), _row(c, "Ray Serve, batching off", off),
                     _row(c, "in-process InferenceSession", local)]
    finally:
        stop(own_ray=True)
    head = (f"clglow {clglow.__version__}, Ray {ray.__version__}, on {sess.device.name} ({_cpu_model()}, "
            f"{os.cpu_count()} CPUs); model {os.path.basename(path)}, one-row requests; {args.replicas} replica(s); "
            f"max batch {args.max_batch_size}, wait {args.batch_wait_ms} ms; {args.requests} requests per row")
    return "\n".join([head, "", "| clients | setup | requests/s | p50 ms | p99 ms |", "|---|---|---|---|---|", *rows])


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help=".onnx file with a symbolic first dimension (default: ResNet-18 at 64x64)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--requests", type=int, default=320, help="requests per table row")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--batch-wait-ms", type=float, default=5.0)
    p.add_argument("--port", type=int, default=8765)
    args = p.parse_args(argv)
    print(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
