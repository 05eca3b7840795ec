"""Side-by-side benchmark runner: clglow vs onnxruntime (CPU) on the same model and inputs.

    python -m benchmarks                       # the default set, cold/warm start, GEMMs
    python -m benchmarks resnet50 --batch 8    # one model (a builtin name or a path to .onnx)
    clglow bench resnet50                      # the same through the CLI (source checkout)

In one process, after a warm-up, the backends run ALTERNATELY (one run each per round, the
order flipped every round) so that noise from other jobs on the machine hits both alike; the
tables give median/min/max latency, throughput, GFLOP/s (Conv/Gemm/MatMul FLOPs counted from
shapes), the clglow/onnxruntime ratio (below 1 means clglow is faster) and the largest
absolute difference between clglow's outputs and onnxruntime's (a fast wrong answer is
flagged). Cold start (empty clglow and pocl caches) and warm start (filled caches) are measured
in fresh subprocesses; peak device memory comes from the session's plan.

The device is the one CLGLOW_DEVICE selects (clglow's default otherwise).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from . import models as M

# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------


@dataclass
class Timing:
    name: str
    times: list = field(default_factory=list)  # seconds

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)


def alternate(backends: dict[str, Callable[[], object]], repeat: int, warmup: int) -> dict[str, Timing]:
    """Warm every backend up, then time `repeat` rounds of one call each, alternating (the order
    is reversed every other round)."""
    for fn in backends.values():
        for _ in range(warmup):
            fn()
    timings = {k: Timing(k) for k in backends}
    names = list(backends)
    for r in range(repeat):
        for k in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            backends[k]()
            timings[k].times.append(time.perf_counter() - t0)
    return timings


def ort_session(model_bytes: bytes):
    import onnxruntime as ort

    return ort.InferenceSession(model_bytes, ort_options(), providers=["CPUExecutionProvider"])


def ort_options():
    """onnxruntime's CPU provider with one intra-op thread per core and spin-waiting off: its
    spinning threads would otherwise steal the cores from whatever runs next (clglow, numpy) and,
    on a machine shared with other jobs, slow onnxruntime itself (measured here: ResNet-50 74 ms
    with spinning, 38 ms without, while another job held one core)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def clglow_session(model, profiling: bool = False):
    import clglow

    return clglow.InferenceSession(model, clglow.SessionOptions(enable_profiling=profiling))


def device_name(sess) -> str:
    """'<device name> (<platform version>)' of a clglow session's device."""
    dev = getattr(sess, "device", None)
    try:
        return f"{dev.name} ({dev.cl_device.platform.version})"
    except Exception:
        return str(getattr(dev, "name", dev))


def compare(ours: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> tuple[float, bool]:
    """(max abs diff over all outputs, ok) with ok = diff <= 1e-3 * max(1, max |ref|)."""
    worst, ok = 0.0, True
    for a, b in zip(ours, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return float("inf"), False
        if a.dtype.kind in "biu":
            d = float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))) if a.size else 0.0
            ok &= d == 0
        else:
            d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
            ok &= bool(np.isfinite(d)) and d <= 1e-3 * scale
        worst = max(worst, d)
    return worst, ok


# ------------------------------------------------------------------------------------------------
# one model
# ------------------------------------------------------------------------------------------------


@dataclass
class ModelResult:
    name: str
    batch: int
    unit: str
    flops: float
    flops_complete: bool
    timings: dict
    max_diff: float
    ok: bool
    memory: dict
    launches: Optional[int] = None
    load_s: dict = field(default_factory=dict)
    device: str = ""


def _plan_memory(sess) -> dict:
    eng = sess._engine
    plans = list(eng._plans.values())
    arena = scratch = 0
    launches = 0
    stack = list(plans)
    while stack:
        p = stack.pop()
        arena = max(arena, p.arena_bytes)  # a session holds one plan per signature; one runs at a time
        scratch = max(scratch, p.scratch_bytes)
        launches = max(launches, p.n_launches)
        stack.extend(p.next_stages.values())
    return {"arena": arena, "scratch": scratch, "weights_on_device": eng.weights.nbytes, "launches": launches}


def bench_model(spec: str, batch: int, repeat: int, warmup: int, log=print) -> ModelResult:
    model, name, unit = M.load(spec, batch)
    feeds = M.feeds(model, seed=0)
    flops, complete = M.count_flops(model)
    data = model.SerializeToString()

    t0 = time.perf_counter()
    ours = clglow_session(model)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ort = ort_session(data)
    t_ort = time.perf_counter() - t0

    ref = ort.run(None, feeds)
    got = ours.run(None, feeds)
    diff, ok = compare(got, ref)

    timings = alternate({"clglow": lambda: ours.run(None, feeds), "onnxruntime": lambda: ort.run(None, feeds)},
                        repeat, warmup)
    mem = _plan_memory(ours)
    mem["weights"] = M.weight_bytes(model)
    live, live_complete = M.peak_live_activations(model)
    mem["live"] = live
    mem["live_complete"] = live_complete
    launches = mem.pop("launches")
    dev = device_name(ours)
    ours.release()
    del ours, ort
    M._shape_memo.clear()
    gc.collect()
    res = ModelResult(name, batch, unit, flops, complete, timings, diff, ok, mem, launches,
                      {"clglow": t_ours, "onnxruntime": t_ort}, dev)
    log(f"  {name} batch {batch}: clglow {timings['clglow'].median * 1e3:.1f} ms, "
        f"onnxruntime {timings['onnxruntime'].median * 1e3:.1f} ms, max |diff| {diff:.2e}")
    return res


def model_table(results: list) -> str:
    lines = ["| model | batch | backend | median ms | min ms | max ms | items/s | GFLOP/s | clglow/ORT | max abs diff |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ort_med = r.timings["onnxruntime"].median
        for k in ("clglow", "onnxruntime"):
            t = r.timings[k]
            gf = f"{r.flops / t.median / 1e9:.1f}" + ("" if r.flops_complete else "*")
            ratio = f"**{t.median / ort_med:.2f}**" if k == "clglow" else "1.00"
            if k == "clglow":
                diff = f"{r.max_diff:.1e}" + ("" if r.ok else " **WRONG**")
            else:
                diff = "(reference)"
            lines.append(f"| {r.name} | {r.batch} | {k} | {t.median * 1e3:.1f} | {t.min * 1e3:.1f} | "
                         f"{t.max * 1e3:.1f} | {r.batch / t.median:.1f} | {gf} | {ratio} | {diff} |")
    return "\n".join(lines)


def memory_table(results: list) -> str:
    mb = 1e6
    lines = ["| model | batch | weights MB | live act. MB | clglow weights on device MB | arena MB "
             "(activations + scratch) | of which scratch buffers MB (summed) | "
             "clglow total MB | weights + 1.5 x live MB | total / (weights + live) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        m = r.memory
        total = m["weights_on_device"] + m["arena"]  # scratch buffers are planned inside the arena
        budget = m["weights"] + 1.5 * m["live"]
        ideal = m["weights"] + m["live"]
        flag = "" if total <= budget else " (over)"
        lines.append(f"| {r.name} | {r.batch} | {m['weights'] / mb:.1f} | {m['live'] / mb:.1f}"
                     f"{'' if m['live_complete'] else '*'} | {m['weights_on_device'] / mb:.1f} | "
                     f"{m['arena'] / mb:.1f} | {m['scratch'] / mb:.1f} | {total / mb:.1f}{flag} | {budget / mb:.1f} | "
                     f"{total / ideal:.2f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# cold and warm start (subprocesses)
# ------------------------------------------------------------------------------------------------

def _child(argv: Sequence[str]) -> int:
    """`python -m benchmarks.runner --startup-child {clglow|onnxruntime} MODEL.onnx FEEDS.npz`:
    time import, load and the first run; print one JSON line."""
    which, path, feeds_path = argv
    t0 = time.perf_counter()
    res: dict = {}
    if which == "clglow":
        import clglow
        from clglow.runtime import cache

        t1 = time.perf_counter()
        sess = clglow.InferenceSession(path)
        t2 = time.perf_counter()
        feeds = dict(np.load(feeds_path))
        t2b = time.perf_counter()
        sess.run(None, feeds)
        t3 = time.perf_counter()
        res["cache"] = cache.stats()
    else:
        import onnxruntime as ort

        t1 = time.perf_counter()
        sess = ort.InferenceSession(path, ort_options(), providers=["CPUExecutionProvider"])
        t2 = time.perf_counter()
        feeds = dict(np.load(feeds_path))
        t2b = time.perf_counter()
        sess.run(None, feeds)
        t3 = time.perf_counter()
    res.update(import_s=t1 - t0, load_s=t2 - t1, first_run_s=t3 - t2b, total_s=(t3 - t0) - (t2b - t2))
    if which == "clglow":
        from clglow.frontend import graph_cache
        from clglow.runtime import derived_cache

        res["graph_cache"], res["derived_cache"] = graph_cache.stats(), derived_cache.stats()
        workers = sess.device.preparation.workers  # compile helpers: they store binaries after we exit
        res["helper_pids"] = [w.proc.pid for w in workers._workers] if workers is not None else []
    print("STARTUP " + json.dumps(res))
    return 0


def _run_child(which: str, path: str, feeds_path: str, env: dict) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "benchmarks.runner", "--startup-child", which, path, feeds_path],
                       cwd=M.REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if line.startswith("STARTUP "):
            res = json.loads(line[len("STARTUP "):])
            res["process_s"] = wall
            return res
    raise RuntimeError(f"startup child ({which}) failed with status {p.returncode}:\n{p.stderr[-3000:]}")


def _wait_helpers(pids: Sequence[int], timeout_s: float = 120.0) -> None:
    """Wait until a cold start's compile helpers have exited: after their parent exits they store
    program binaries for later processes (runtime.compile_worker), as they would before a user's
    next start; a warm start measured at once would share the CPU with them."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)


def _median_run(runs: list) -> dict:
    return sorted(runs, key=lambda r: r["total_s"])[len(runs) // 2]


def bench_startup(spec: str, batch: int, warm_repeat: int = 3, log=print, cold_repeat: int = 1) -> list:
    """[(label, result dict)]: clglow cold (median of cold_repeat, each from empty caches),
    clglow warm (median of warm_repeat, after the last cold start's helpers finished),
    onnxruntime."""
    model, name, _ = M.load(spec, batch)
    rows = []
    tmp = tempfile.mkdtemp(prefix="clglow-bench-")
    try:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        feeds_path = os.path.join(tmp, "feeds.npz")
        np.savez(feeds_path, **M.feeds(model, seed=0))
        del model
        env = dict(os.environ)
        env["PYTHONPATH"] = M.REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["CLGLOW_CACHE_DIR"] = os.path.join(tmp, "clglow-cache")
        env["POCL_CACHE_DIR"] = os.path.join(tmp, "pocl-cache")
        env.pop("CLGLOW_CACHE", None)
        # Python's own bytecode cache on, as in an installed clglow (pip compiles the wheel's
        # modules): a checkout run with PYTHONDONTWRITEBYTECODE=1 would otherwise compile all of
        # clglow's modules from source in every process (0.15 s, measured).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        colds = []
        for _ in range(max(1, cold_repeat)):
            for d in (env["CLGLOW_CACHE_DIR"], env["POCL_CACHE_DIR"]):
                shutil.rmtree(d, ignore_errors=True)
            os.makedirs(env["POCL_CACHE_DIR"])
            colds.append(_run_child("clglow", path, feeds_path, env))
            log(f"  cold start {colds[-1]['total_s']:.2f} s")
            _wait_helpers(colds[-1].get("helper_pids", ()))
        label = "clglow cold (empty clglow + pocl caches" + (f", median of {len(colds)})" if len(colds) > 1 else ")")
        rows.append((f"{name} b{batch}", label, _median_run(colds)))
        warm = [_run_child("clglow", path, feeds_path, env) for _ in range(warm_repeat)]
        rows.append((f"{name} b{batch}", f"clglow warm (median of {warm_repeat})", _median_run(warm)))
        log(f"  warm start {_median_run(warm)['total_s']:.2f} s")
        env2 = dict(env)
        env2["POCL_CACHE_DIR"] = os.path.join(tmp, "pocl-cache-empty")
        os.makedirs(env2["POCL_CACHE_DIR"])
        only_ours = _run_child("clglow", path, feeds_path, env2)
        rows.append((f"{name} b{batch}", "clglow, pocl cache emptied (programs from clglow's stored binaries, their code generated again)",
                     only_ours))
        ort = [_run_child("onnxruntime", path, feeds_path, env) for _ in range(warm_repeat)]
        ort.sort(key=lambda r: r["total_s"])
        rows.append((f"{name} b{batch}", f"onnxruntime (median of {warm_repeat})", ort[len(ort) // 2]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def startup_table(rows: list) -> str:
    lines = ["| model | run | import s | session s | first run s | time to first result s | process wall s | "
             "programs built / loaded | graph, packed weights from disk |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for model, label, r in rows:
        c, g, d = r.get("cache"), r.get("graph_cache"), r.get("derived_cache")
        progs = f"{c['source_builds']} / {c['binary_loads']}" if c else ""
        host = f"{'yes' if g['hits'] else 'no'}, {d['hits']} of {d['hits'] + d['misses']}" if g and d else ""
        lines.append(f"| {model} | {label} | {r['import_s']:.2f} | {r['load_s']:.2f} | {r['first_run_s']:.2f} | "
                     f"**{r['total_s']:.2f}** | {r['process_s']:.2f} | {progs} | {host} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help=f"builtin ({', '.join(M.BUILTINS)}) or path to .onnx; default: all builtins "
                        "(resnet50 at batch 1 and 8), plus cold/warm start and the GEMM table")
    p.add_argument("--batch", type=int, help="batch size (default: 1; resnet50 1 and 8 in a default run)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per backend (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs per backend first (default 3)")
    p.add_argument("--startup", action=argparse.BooleanOptionalAction, default=None,
                   help="measure cold/warm start (default: on for a default run, off otherwise)")
    p.add_argument("--startup-model", default="resnet50", help="model for cold/warm start (default resnet50)")
    p.add_argument("--startup-repeat", type=int, default=3,
                   help="cold starts (each from empty caches) and warm starts, medians (default 3)")
    p.add_argument("--gemm", action=argparse.BooleanOptionalAction, default=None,
                   help="also run the GEMM table (default: on for a default run, off otherwise)")
    p.add_argument("--json", metavar="FILE", help="also write the raw timings as JSON")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--startup-child"]:
        return _child(argv[1:])
    args = build_parser().parse_args(argv)
    default_run = not args.models
    cases = []
    for spec in (args.models or M.DEFAULT_MODELS):
        if args.batch:
            batches: tuple = (args.batch,)
        elif default_run and spec in M.BUILTINS:
            batches = M.BUILTINS[spec].batches
        else:
            batches = (1,)
        cases += [(spec, b) for b in batches]
    do_startup = default_run if args.startup is None else args.startup
    do_gemm = default_run if args.gemm is None else args.gemm

    import onnxruntime

    import clglow

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    dev = os.environ.get("CLGLOW_DEVICE", "(unset)")
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    results = []
    for spec, b in cases:
        log(f"benchmarking {spec} batch {b} ...")
        results.append(bench_model(spec, b, args.repeat, args.warmup, log))
    header = (f"clglow {clglow.__version__} on {results[0].device if results else '?'} (CLGLOW_DEVICE={dev}); onnxruntime "
              f"{onnxruntime.__version__} CPUExecutionProvider, intra_op_num_threads={os.cpu_count()}, "
              f"allow_spinning=0; "
              f"numpy {np.__version__}; {os.cpu_count()} CPUs; warmup {args.warmup}, repeat {args.repeat}, alternating")
    out = [header, "", "### Latency and throughput", "", model_table(results), "",
           "clglow/ORT is the ratio of medians (below 1: clglow faster). GFLOP/s counts Conv/Gemm/MatMul only.",
           "", "### Peak device memory", "", memory_table(results), ""]
    start_rows = []
    if do_startup:
        log(f"cold/warm start of {args.startup_model} ...")
        start_rows = bench_startup(args.startup_model, 1, log=log, warm_repeat=args.startup_repeat,
                                   cold_repeat=args.startup_repeat)
        out += ["### Cold and warm start (fresh subprocesses)", "", startup_table(start_rows), ""]
    gemm_rows = []
    if do_gemm:
        from . import gemm

        log("GEMM ...")
        gemm_rows = gemm.bench(repeat=max(5, args.repeat // 2), warmup=args.warmup, log=log)
        out += ["### SGEMM (one-node MatMul models)", "", gemm.table(gemm_rows), ""]
    out.append(f"total benchmark time {time.perf_counter() - t_start:.0f} s; load average at the end "
               f"{os.getloadavg()[0]:.2f} (at the start {load0:.2f})")
    print("\n".join(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header,
                       "models": [{"name": r.name, "batch": r.batch, "flops": r.flops, "max_diff": r.max_diff,
                                   "ok": r.ok, "memory": r.memory, "launches": r.launches, "load_s": r.load_s,
                                   "times_s": {k: t.times for k, t in r.timings.items()}} for r in results],
                       "startup": [{"model": m, "run": lbl, **r} for m, lbl, r in start_rows],
                       "gemm": gemm_rows}, f, indent=1, default=str)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
