"""The `clglow` command line: devices, run, demo, check, profile, bench, cache."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np

from . import config
from .lower.tunable import FAMILIES
from .serve.cli import add_parser as add_serve_parser


def _print_devices(args: argparse.Namespace) -> int:
    from .runtime.device import list_devices

    try:
        devs = list_devices()
    except Exception as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not devs:
        print("No OpenCL device found. Install a CPU driver: pip install \"pyopencl[pocl]\"")
        return 1
    for d in devs:
        print(d.describe())
    return 0


def _random_input(arg, rng: np.random.Generator, dims: dict) -> np.ndarray:
    shape = [d if isinstance(d, int) else dims.get(d, 1) for d in arg.shape]
    dtype = np.dtype(arg.dtype) if arg.dtype is not None else np.dtype(np.float32)
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float64).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    return np.zeros(shape, dtype=dtype)


def _load_inputs(sess, specs: Sequence[str], seed: int, dims: dict) -> dict:
    rng = np.random.default_rng(seed)
    given = {}
    for s in specs or []:
        if "=" not in s:
            raise SystemExit(f"--input expects NAME=FILE.npy, got {s!r}")
        name, path = s.split("=", 1)
        given[name] = np.load(path)
    return {a.name: given.get(a.name, None) if a.name in given else _random_input(a, rng, dims)
            for a in sess.get_inputs()}


def _stats(name: str, y: np.ndarray) -> str:
    if y.size == 0 or y.dtype.kind not in "fiub":
        return f"{name}: shape {list(y.shape)} {y.dtype}"
    yf = y.astype(np.float64)
    return (f"{name}: shape {list(y.shape)} {y.dtype} min {yf.min():.5g} max {yf.max():.5g} "
            f"mean {yf.mean():.5g} std {yf.std():.5g}")


def _top5(y: np.ndarray) -> Optional[str]:
    if y.ndim == 2 and y.shape[1] >= 5 and y.dtype.kind == "f":
        row = y[0]
        idx = np.argsort(-row)[:5]
        return "top-5: " + ", ".join(f"{i} ({row[i]:.4f})" for i in idx)
    return None


def _make_session(model, device: Optional[str], profiling: bool = False, target: Optional[str] = None,
                  precision: Optional[str] = None):
    from . import InferenceSession, SessionOptions

    return InferenceSession(model, SessionOptions(enable_profiling=profiling, target=target, precision=precision),
                            device=device)


def _parse_dims(specs: Sequence[str]) -> dict:
    dims = {}
    for s in specs or []:
        k, _, v = s.partition("=")
        dims[k] = int(v)
    return dims


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    sess = _make_session(args.model, args.device, target=args.target, precision=args.precision)
    t_load = time.perf_counter() - t0
    print(f"device: {sess.device.describe()}")
    print(f"precision: {sess.precision}")
    feeds = _load_inputs(sess, args.input, args.seed, _parse_dims(args.dim))
    times = []
    outs = None
    for _ in range(max(1, args.repeat)):
        t = time.perf_counter()
        outs = sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    if args.explain:
        print(sess.explain())
    for arg, y in zip(sess.get_outputs(), outs):
        print(_stats(arg.name, y))
        t5 = _top5(y)
        if t5:
            print("  " + t5)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for arg, y in zip(sess.get_outputs(), outs):
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in arg.name)
            np.save(os.path.join(args.save, safe + ".npy"), y)
        print(f"outputs saved in {args.save}")
    print(f"load {t_load * 1000:.1f} ms; first run {times[0] * 1000:.1f} ms"
          + (f"; median of {len(times) - 1} more {np.median(times[1:]) * 1000:.1f} ms" if len(times) > 1 else ""))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from onnx.reference import ReferenceEvaluator

    from .models import resnet50

    print("building ResNet-50 (opset 13) with seeded weights ...", flush=True)
    model = resnet50(opset=13, batch=1, seed=0)
    t0 = time.perf_counter()
    sess = _make_session(model, args.device, target=args.target, precision=args.precision)
    t_load = time.perf_counter() - t0
    print(f"device: {sess.device.describe()}")
    print(f"loaded in {t_load:.2f} s: {sess.explain().splitlines()[0]}")
    x = np.random.default_rng(args.seed).random((1, 3, 224, 224), dtype=np.float64).astype(np.float32)
    name = sess.get_inputs()[0].name
    times = []
    y = None
    for _ in range(max(2, args.repeat)):
        t = time.perf_counter()
        (y,) = sess.run(None, {name: x})
        times.append(time.perf_counter() - t)
    print("checking against onnx.reference.ReferenceEvaluator ...", flush=True)
    # The reference runs the same network with BatchNorm folded into the convolutions by the model
    # builder (same function, same weights): onnx.reference's BatchNormalization disagrees with
    # onnxruntime and numpy on this model, its Conv does not.
    (ref,) = ReferenceEvaluator(resnet50(opset=13, batch=1, seed=0, bn=False)).run(None, {name: x})
    err = float(np.abs(y - ref).max())
    tol = 1e-4 + 1e-3 * float(np.abs(ref).max())
    print(f"clglow   {_top5(y)}")
    print(f"onnx ref {_top5(ref)}")
    print(f"max |clglow - reference| = {err:.3g} (tolerance {tol:.3g})")
    print(f"first run {times[0] * 1000:.1f} ms, median of {len(times) - 1} warm runs "
          f"{np.median(times[1:]) * 1000:.1f} ms")
    ok = err <= tol and list(np.argsort(-y[0])[:5]) == list(np.argsort(-ref[0])[:5])
    print("PASS" if ok else "FAIL: outputs differ from the reference")
    return 0 if ok else 1


def _check(args: argparse.Namespace) -> int:
    from .frontend.onnx_model import import_model, load_model
    from .partition import format_placement, place
    from .lower import has_kernel
    from .passes.pipeline import optimize
    from .passes.half_islands import widen_half_nodes
    from .passes.precision import apply_precision, resolve_precision

    from .runtime.device import select_device

    proto, _ = load_model(args.model)
    g = optimize(import_model(proto, has_kernel=has_kernel))
    target = select_device(args.device).info.with_family(args.target or config.target_family())
    precision = resolve_precision(args.precision or config.precision(), target)
    stored = apply_precision(widen_half_nodes(g, target), precision, target)
    print(f"precision: {precision}" + (f" ({sum(v.dtype == np.float16 for v in stored.values.values())} tensors in "
                                       f"half, {len(stored.nodes) - len(g.nodes)} Casts inserted)"
                                       if precision == "fp16" else ""))
    g = stored
    print(format_placement(place(g, target, host_fallback=True)))
    return 0


def _profile(args: argparse.Namespace) -> int:
    from .runtime.profiler import run_timeline, summary_by_op, write_chrome_trace

    sess = _make_session(args.model, args.device, profiling=True, target=args.target, precision=args.precision)
    print(f"precision: {sess.precision}")
    feeds = _load_inputs(sess, args.input, args.seed, _parse_dims(args.dim))
    sess.run(None, feeds)  # warm-up (not recorded)
    sess._engine.records.clear()
    for _ in range(max(1, args.repeat)):
        sess.run(None, feeds)
    records = list(sess._engine.records)
    path = write_chrome_trace(records, args.output)
    total = 0.0
    print(f"{'op type':24s} {'ms/run':>10s} {'launches/run':>13s}")
    n = max(1, args.repeat)
    for op, ms, count in summary_by_op(records):
        total += ms
        print(f"{op:24s} {ms / n:10.3f} {count // n:13d}")
    print(f"{'total kernel time':24s} {total / n:10.3f}")
    tl = run_timeline(records)
    if tl:
        print(f"per run (medians): {tl['launches']} launches, kernels {tl['busy']:.3f} ms of a {tl['span']:.3f} ms "
              f"device span, first kernel queued -> started {tl['lead']:.3f} ms (host enqueueing before the gate)")
    _print_tuned_nodes(records, n)
    print(f"trace written to {path} (open it in https://ui.perfetto.dev)")
    return 0


def _print_tuned_nodes(records: list, n: int, top: int = 25) -> None:
    """The most expensive nodes with the tunable kernel family member each ran and its source."""
    from .runtime.profiler import tuned_nodes

    rows = tuned_nodes(records)
    db = sum("(db)" in r[4] for r in rows)
    print(f"\ntunable kernels: {db} of {sum(bool(r[4]) for r in rows)} node(s) from the tuning database "
          f"(the rest the profile's default); top {min(top, len(rows))} nodes by time:")
    print(f"{'node':28s} {'op type':14s} {'ms/run':>8s}  family member (source)")
    for label, op, ms, _count, choice in rows[:top]:
        print(f"{label[:28]:28s} {op[:14]:14s} {ms / n:8.3f}  {choice or '-'}")


def _host_stores() -> list:
    """The warm-start stores of host work: loaded graphs and packed weights (runtime/blob_store.py)."""
    from .frontend import graph_cache
    from .runtime import derived_cache

    return [("optimized graphs", graph_cache.store()), ("packed weights", derived_cache.store())]


def _cache(args: argparse.Namespace) -> int:
    from .runtime import cache, driver_cache

    if args.action == "clear":
        n = cache.clear_disk()
        print(f"removed {n} cached program(s) from {cache.programs_dir()}")
        files, nbytes = driver_cache.clear_owned()
        print(f"removed {files} file(s) ({nbytes / 1e6:.1f} MB) of pocl's kernel cache from {driver_cache.owned_dir()}")
        for what, store in _host_stores():
            print(f"removed {store.clear()} cached {what} from {store.directory}")
    else:
        files, nbytes = cache.disk_usage()
        print(f"cache directory: {cache.programs_dir()}")
        print(f"entries: {files} ({nbytes / 1e6:.1f} MB)")
        print(f"pocl's kernel cache (when POCL_CACHE_DIR is unset): {driver_cache.owned_dir()}")
        for what, store in _host_stores():
            files, nbytes = store.usage()
            print(f"{what}: {store.directory}: {files} entries ({nbytes / 1e6:.1f} MB)")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from .runtime.device import select_device
    from .runtime.tuning import tune_gemm

    dev = select_device(args.device)
    family = dev.target(args.target or config.target_family()).family
    if args.show and not args.model:
        return _show_tuned(dev, family, None)
    res = tune_gemm(dev, force=args.force, family=family)
    _print_family_tiles(dev, family, res)
    if not args.model:
        if args.budget is None:
            print("(pass a model, or --budget SECONDS, to search the per-shape kernel families)")
        else:
            _search_shapes(args, dev, family, None, args.budget)
        return _show_tuned(dev, family, None) if args.show else 0
    t_end = time.monotonic() + (120.0 if args.budget is None else args.budget)
    keys: dict = {}
    for _ in range(3):  # a stored path may lower to GEMM shapes not asked before: plan again, search those
        new = {k: n for k, n in _model_shapes(args, dev, family).items() if k not in keys}
        if not new or time.monotonic() >= t_end:
            break
        keys.update(new)
        _search_shapes(args, dev, family, new, t_end - time.monotonic())
    if keys:
        _check_model(args, dev, family, keys)
    if args.family in (None, "sub_batch"):  # the plan's sub-batch budget, measured as the whole model
        from .frontend.onnx_model import load_model
        from .runtime.sub_batch_tune import report, tune_budget
        print("\n".join(report(tune_budget(dev, dev.target(family), load_model(args.model)[0], force=args.force))))
        dev.reload_tuning(family)
    if args.show:
        _show_tuned(dev, family, keys)
    return 0


def _model_shapes(args: argparse.Namespace, dev, family: str) -> dict:
    """The (family, shape key)s lowering asks for when the model is planned on `dev` (counted)."""
    from . import InferenceSession, SessionOptions
    from .lower.tunable import request_mark, requests_since

    mark = request_mark()
    sess = InferenceSession(args.model, SessionOptions(target=family, tune=False), device=dev)
    if sess._last_plan is None:  # symbolic dimensions: plan at the given (or default 1) sizes
        sess.run(None, _load_inputs(sess, None, 0, _parse_dims(args.dim)))
    return requests_since(mark, dev.target(family))


def _search_shapes(args: argparse.Namespace, dev, family: str, keys: Optional[dict], budget: float) -> None:
    """Search the model's shapes (or the standard set) within the budget; print one line each."""
    from .lower.tunable import format_params
    from .runtime.search import STANDARD_SHAPES, search

    target = dev.target(family)
    keys = dict(STANDARD_SHAPES) if keys is None else keys
    families = [args.family] if args.family else None
    t0 = time.perf_counter()
    results = search(dev, target, keys, budget_s=budget, force=args.force, families=families)
    wanted = [k for k in keys if families is None or k[0] in families]
    print(f"searched {sum(r.source == 'measured' for r in results)} shape(s) in {time.perf_counter() - t0:.1f} s "
          f"(budget {budget:.0f} s); {sum(r.source == 'db' for r in results)} already in the database, "
          f"{max(0, len(wanted) - len(results))} left for a later run")
    for r in results:
        if r.source == "measured":
            print(f"  {r.family:6s} {str(r.key):32s} {format_params(r.params):34s} {r.ms:8.3f} ms "
                  f"(default {r.default_ms:.3f} ms)")
    dev.reload_tuning(family)


MODEL_MARGIN = 0.02  # the whole-model check keeps a table that changes more only when 2% faster


def _check_model(args: argparse.Namespace, dev, family: str, keys: dict) -> None:
    """The whole model with and without its stored choices (summed kernel time, in turns): a
    path that wins alone can lose inside the model (the layouts two convs share), so where the
    conv choices, or all of them, make the model slower, the defaults are stored for its shapes."""
    from .frontend.onnx_model import load_model
    from .lower.tunable import key_str
    from .runtime.node_bench import compare_tables
    from .runtime.search import revert

    target = dev.target(family)
    mine = {(f, key_str(k)) for f, k in keys}
    others = tuple(r for r in target.tuned if (r[0], r[1]) not in mine)
    gemm_only = others + tuple(r for r in target.tuned if (r[0], r[1]) in mine and r[0] != "conv")
    proto, _ = load_model(args.model)
    times = compare_tables(dev, target, {"defaults": others, "gemm choices": gemm_only, "all choices": target.tuned},
                           proto, rounds=11)
    if not times:
        print("whole-model check skipped (inputs not all static float tensors)")
        return
    print("whole model, summed kernel time per run (median of 11, in turns): "
          + ", ".join(f"{k} {v:.2f} ms" for k, v in times.items()))
    best = "defaults"  # a table that changes more must beat the one that changes less by 2%
    for name in ("gemm choices", "all choices"):
        if times[name] < times[best] * (1 - MODEL_MARGIN):
            best = name
    if best == "all choices":
        return
    drop = [k for k in keys if k[0] == "conv"] if best == "gemm choices" else list(keys)
    n = revert(dev.tuning.database(dev), family, drop, "model-check")
    print(f"kept the defaults for {n} shape(s): the {best} ran the model fastest")
    dev.reload_tuning(family)


def _show_tuned(dev, family: str, keys: Optional[dict]) -> int:
    """`clglow tune --show`: per family and shape, the stored choice, its time against the
    default's, and where it came from (only the model's shapes when `keys` is given)."""
    from .lower.tunable import format_params
    from .runtime.search import stored_results

    db = dev.tuning.database(dev)
    rows = [r for r in stored_results(db, family) if keys is None or (r.family, r.key) in keys]
    print(f"tuning database: {db.path or '(in memory: CLGLOW_CACHE=0)'}")
    print(f"device: {dev.describe()}; {family} family; {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    print(f"  {'family':6s} {'shape (M, N, K, B)':32s} {'chosen':34s} {'ms':>8s} {'default ms':>11s} "
          f"{'speed-up':>9s}  from")
    for r in rows:
        same = r.params == r.default
        gain = r.default_ms / r.ms if r.ms > 0 else float("nan")
        print(f"  {r.family:6s} {str(list(r.key)):32s} {format_params(r.params):34s} {r.ms:8.3f} "
              f"{r.default_ms:11.3f} {gain:8.2f}x  {r.source}{' (default kept)' if same else ''}")
    if keys is not None:
        missing = [k for k in keys if k not in {(r.family, r.key) for r in rows}]
        for fam, key in missing:
            print(f"  {fam:6s} {str(list(key)):32s} {'(not measured: family default)':34s}")
    return 0


def _print_family_tiles(dev, family: str, res) -> None:
    """The family-wide GEMM tiles (the profile's default for unmeasured shapes) and their timings."""
    from .runtime.tuning import SHAPE, candidates, xgemm_candidates

    m, k, n = SHAPE
    print(f"device: {dev.describe()}; {dev.target(family).family} family")
    print(f"GEMM tiles (MRxVWxNV@local size), {m}x{k}x{n} kernel time, best of 7 turns (candidates alternating):")
    for c in candidates(dev.target(family)):
        label = f"{c[0]}x{c[1]}x{c[2]}@{'x'.join(map(str, c[3]))}"
        t = res.timings_ms.get(label)
        mark = "  <- chosen" if c == res.choice else ""
        print(f"  {label:18s} {f'{t:.3f} ms' if t is not None else '(not measured)':>14s}{mark}")
    _print_xgemm(res, dev.target(family), xgemm_candidates(dev.target(family)))
    print(f"choice from: {res.source}")


def _print_xgemm(res, target, xcands: list) -> None:
    """The xgemm.cl configurations' timings (the GPU family with local memory), or why none."""
    from .lower.gpu_gemm import XgemmConfig, xgemm_applicable
    from .runtime.tuning import XGEMM_SHAPE

    if not xcands:
        if not target.is_cpu_family:
            print(f"xgemm (local-memory GEMM): not used here: {xgemm_applicable(target)}")
        return
    m, k, n = XGEMM_SHAPE
    print(f"xgemm configurations (MWGxNWGxKWG/MDIMCxNDIMC/vVWMVWN/sSTRMSTRN/pPAD), {m}x{k}x{n} kernel time, "
          "best of 7 turns:")
    for c in xcands:
        label = XgemmConfig.from_tuple(c).label()
        t = res.xgemm_timings_ms.get(label)
        mark = "  <- chosen" if tuple(c) == res.xgemm else ""
        print(f"  {label:30s} {f'{t:.3f} ms' if t is not None else '(not measured)':>14s}{mark}")


def _bench(args: argparse.Namespace) -> int:
    try:
        from benchmarks.runner import main as bench_main
    except ImportError:
        print("the benchmarks are run from a source checkout: python -m benchmarks", file=sys.stderr)
        return 1
    return bench_main([args.model] + (["--batch", str(args.batch)] if args.batch else []))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clglow", description="Run ONNX models on OpenCL devices.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("devices", help="list OpenCL devices and how to select each")
    sp.set_defaults(fn=_print_devices)

    def target_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--target", choices=["cpu", "gpu"], help="force a target family's kernels "
                        "(as CLGLOW_TARGET; default: the device's own)")

    def precision_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--precision", choices=["fp32", "fp16", "auto"], help="storage of float tensors "
                        "(as CLGLOW_PRECISION; default fp32; auto: fp16 where the device's profile says it pays)")

    def model_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("model", help="path to an .onnx file")
        sp.add_argument("--device", help="device selector (as CLGLOW_DEVICE)")
        target_arg(sp)
        precision_arg(sp)
        sp.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="input data (default random)")
        sp.add_argument("--dim", action="append", metavar="SYMBOL=N", help="value of a symbolic dimension")
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--repeat", type=int, default=1)

    sp = sub.add_parser("run", help="run a model on random or given inputs")
    model_args(sp)
    sp.add_argument("--explain", action="store_true", help="print where each node runs and why")
    sp.add_argument("--save", metavar="DIR", help="save outputs as .npy files")
    sp.set_defaults(fn=_run)

    sp = sub.add_parser("demo", help="ResNet-50 (built locally) checked against onnx's reference")
    sp.add_argument("--device")
    target_arg(sp)
    precision_arg(sp)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--repeat", type=int, default=5)
    sp.set_defaults(fn=_demo)

    sp = sub.add_parser("check", help="report which nodes of a model run on OpenCL and which on the host")
    sp.add_argument("model")
    sp.add_argument("--device", help="device selector (as CLGLOW_DEVICE)")
    target_arg(sp)
    precision_arg(sp)
    sp.set_defaults(fn=_check)

    sp = sub.add_parser("profile", help="per-kernel times as a Chrome trace plus a per-op summary")
    model_args(sp)
    sp.add_argument("-o", "--output", default="clglow_trace.json")
    sp.set_defaults(fn=_profile)

    sp = sub.add_parser("bench", help="benchmark a model against onnxruntime (source checkout)")
    sp.add_argument("model")
    sp.add_argument("--batch", type=int)
    sp.set_defaults(fn=_bench)

    sp = sub.add_parser("tune", help="search the tunable kernels on this device for a model's shapes "
                        "(or a standard set) and store the winners in the tuning database")
    sp.add_argument("model", nargs="?", help="an .onnx file whose kernel shapes to search (default: a standard set)")
    sp.add_argument("--device", help="device selector (default: CLGLOW_DEVICE or the default device)")
    sp.add_argument("--budget", type=float, metavar="SECONDS",
                    help="search time (default 120 with a model; without one, the standard shape set is "
                    "searched only when a budget is given)")
    sp.add_argument("--family", choices=sorted(FAMILIES), metavar="FAMILY",
                    help="search only this tunable family: " + ", ".join(sorted(FAMILIES)))
    sp.add_argument("--show", action="store_true", help="print the stored choices and their time vs the default")
    sp.add_argument("--force", action="store_true", help="measure again even when a choice is stored")
    sp.add_argument("--dim", action="append", metavar="SYMBOL=N", help="value of a symbolic dimension")
    target_arg(sp)
    sp.set_defaults(fn=_tune)

    sp = sub.add_parser("cache", help="show or clear the on-disk program cache")
    sp.add_argument("action", choices=["info", "clear"], nargs="?", default="info")
    sp.set_defaults(fn=_cache)
    add_serve_parser(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .errors import ClglowError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.fn(args) or 0)
    except ClglowError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
