"""``python -m benchmarks zoo``: export what is missing, time every model beside onnxruntime,
print one markdown table and the geometric mean of the clglow/onnxruntime ratios.

Each model is timed in a child process of its own (``benchmarks.zoo.measure``) with a time
limit, so a crash, a hang or a memory blow-up in one model is a row of the table.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import catalog, export
from .export import ensure, versions, zoo_dir

REPO = str(Path(__file__).resolve().parents[2])
DEFAULT_TIMEOUT = 300.0  # seconds a model may take (export excluded) before it is abandoned


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks zoo",
                                description="real architectures (random seeded weights), clglow vs onnxruntime")
    p.add_argument("--models", default="", help="comma-separated names (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="print the catalogue and exit")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per backend and model (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per backend first (default 2)")
    p.add_argument("--device", help="OpenCL device for clglow (CLGLOW_DEVICE syntax, e.g. 0:0)")
    p.add_argument("--json", metavar="FILE", help="also write every result record as JSON")
    p.add_argument("--table-from", metavar="FILE", help="print the table of a --json file again and exit")
    p.add_argument("--reexport", action="store_true", help="export the models again even when cached")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per model before it is abandoned (default: 300, or the model's own limit)")
    return p


def _env(device: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if device:
        env["CLGLOW_DEVICE"] = device
    return env


def run_one(name: str, args: argparse.Namespace, env: Dict[str, str]) -> dict:
    """The measure child's record for `name` (an ``error`` record when it crashed or timed out)."""
    own_limit = catalog.MODELS[name].timeout_s
    limit = args.timeout if args.timeout is not None else (own_limit or DEFAULT_TIMEOUT)
    cmd = [sys.executable, "-m", "benchmarks.zoo.measure", name, "--repeat", str(args.repeat),
           "--warmup", str(args.warmup)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"timed out after {limit:.0f} s", "wall_s": limit}
    for line in p.stdout.splitlines():
        if line.startswith("ZOO "):
            res = json.loads(line[4:])
            res["wall_s"] = time.perf_counter() - t0
            return res
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return {"name": name, "error": f"child exited with status {p.returncode}: {' | '.join(tail)[:600]}",
            "wall_s": time.perf_counter() - t0}


def _host_text(host: Optional[dict]) -> str:
    if not host:
        return ""
    return ", ".join(f"{op} x{n}" if n > 1 else op for op, n in sorted(host.items()))


def row(r: dict) -> str:
    """One markdown table row of a result record."""
    fam = catalog.MODELS[r["name"]].family if r["name"] in catalog.MODELS else ""
    if "export_error" in r:
        return f"| {r['name']} | {fam} | | | | | | | export failed: {r['export_error']} |"
    ort_ms = f"{r['ort_ms']:.2f}" if "ort_ms" in r else ""
    if "error" in r:
        return f"| {r['name']} | {fam} | | {ort_ms} | | | | {_host_text(r.get('host'))} | **{r['error']}** |"
    ok = f"{r['max_rel']:.1e}" + ("" if r["ok"] else " **MISMATCH**")
    note = r.get("note", "")
    best = min_ratio(r)
    best_text = f"{best:.2f}" if best is not None else ""
    return (f"| {r['name']} | {fam} | {r['clglow_ms']:.2f} | {ort_ms} | **{r['ratio']:.2f}** | {best_text} | {ok} | "
            f"{_host_text(r.get('host'))} | {note} |")


def min_ratio(r: dict) -> Optional[float]:
    """clglow's fastest run over onnxruntime's fastest (less swayed by other jobs' load than the
    medians on a shared machine), or None without the per-run times."""
    a, b = r.get("clglow_times_ms"), r.get("ort_times_ms")
    return min(a) / min(b) if a and b else None


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def table(results: List[dict]) -> str:
    lines = ["| model | family | clglow ms | onnxruntime ms | clglow / ORT (medians) | min / min | max rel err | "
             "nodes on host | note |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    lines += [row(r) for r in results]
    timed = [r["ratio"] for r in results if "ratio" in r]
    right = [r["ratio"] for r in results if "ratio" in r and r.get("ok")]
    best = [b for b in (min_ratio(r) for r in results) if b is not None]
    lines += ["", f"geometric mean clglow / onnxruntime over the {len(timed)} timed models: **{geomean(timed):.2f}** "
                  f"(over the {len(right)} that match onnxruntime: {geomean(right):.2f}; of the min / min ratios: "
                  f"{geomean(best):.2f}); "
                  f"{sum(1 for r in timed if r > 1.3)} above 1.3; "
                  f"{len(results) - len(timed)} of {len(results)} not timed (export failed or clglow error)"]
    return "\n".join(lines)


def _list() -> int:
    for m in catalog.MODELS.values():
        print(f"{m.name:24s} {m.family:13s} {m.description}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.list:
        return _list()
    if args.table_from:
        with open(args.table_from) as f:
            saved = json.load(f)
        print(saved["header"] + "\n\n" + table(saved["results"]))
        return 0
    try:
        models = catalog.select([n.strip() for n in args.models.split(",") if n.strip()])
    except ValueError as e:
        _say(str(e))
        return 2
    # torch exports every model; timm, transformers and torchvision only their families' models
    to_export = [m for m in models if export.needs_export(m.name, args.reexport)]
    needed = ["torch"] + sorted({m.family for m in to_export} & {"timm", "transformers", "torchvision"})
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing and to_export:
        _say(f"the zoo exports its models with {', '.join(missing)}, not installed here: "
             'pip install -e ".[zoo]" (benchmark-only dependencies)')
        return 2
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    metas = ensure([m.name for m in models], force=args.reexport, say=_say)
    env = _env(args.device)
    results = []
    for m in models:
        meta = metas[m.name]
        if not meta.get("ok"):
            results.append({"name": m.name, "export_error": meta.get("error", "?")})
            _say(f"{m.name}: export failed: {meta.get('error')}")
            continue
        r = run_one(m.name, args, env)
        r["export"] = {k: meta.get(k) for k in ("params", "nodes", "onnx_mb", "dropped_inputs")}
        results.append(r)
        _say(row(r))
    import clglow
    import onnxruntime

    dev = args.device or os.environ.get("CLGLOW_DEVICE", "(default)")
    header = (f"clglow {clglow.__version__} (CLGLOW_DEVICE={dev}, device: "
              f"{next((r['device'] for r in results if r.get('device')), '?')}); onnxruntime {onnxruntime.__version__} "
              f"CPUExecutionProvider, intra_op_num_threads={os.cpu_count()}, allow_spinning=0; "
              f"warmup {args.warmup}, median of {args.repeat}, alternating; exported with "
              + ", ".join(f"{k} {v}" for k, v in versions().items()) + f"; cache {zoo_dir()}")
    print(header + "\n\n" + table(results))
    print(f"\ntotal zoo time {time.perf_counter() - t_start:.0f} s; load average at the start {load0:.2f}, "
          f"at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1, default=str)
    return 0
