"""``python -m benchmarks.pass_ab MODEL --without PASS``: what one load-time pass is worth on a model.

Two sessions of the same model in one process, one with clglow's pass pipeline as it is and one
without the named pass(es), run alternately (the order reversed every other round, so that noise
from other jobs hits both alike); prints each one's launches per run and median latency, the
ratio, and the largest difference between their outputs.

    python -m benchmarks.pass_ab ~/.cache/clglow/zoo/llama/model.onnx --without fuse_rotary
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import onnx

import clglow
from clglow.passes import pipeline


def _feeds(model: onnx.ModelProto, path: Path) -> Dict[str, np.ndarray]:
    """The zoo's saved inputs beside the model (inputs.npz) when there are some, else seeded
    random ones (integers below 100 for integer inputs, symbolic dims as 1)."""
    saved = path.with_name("inputs.npz")
    if saved.is_file():
        with np.load(saved) as d:
            return {k: d[k] for k in d.files}
    rng = np.random.default_rng(0)
    out = {}
    for i in model.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value or 1 for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[i.name] = rng.integers(0, 100, shape).astype(dtype) if np.dtype(dtype).kind in "iu" \
            else rng.standard_normal(shape).astype(dtype)
    return out


def _session_without(model: onnx.ModelProto, passes: Sequence[str]) -> clglow.InferenceSession:
    """A session whose graph was optimised without `passes` (the model's doc string marks it, so
    the graph cache keeps the two apart)."""
    unknown = set(passes) - {p.__name__ for p in pipeline.PIPELINE}
    if unknown:
        raise SystemExit(f"no pass {sorted(unknown)} in the pipeline: {[p.__name__ for p in pipeline.PIPELINE]}")
    saved = list(pipeline.PIPELINE)
    variant = onnx.ModelProto()
    variant.CopyFrom(model)
    variant.doc_string = f"{model.doc_string} [without {', '.join(passes)}]"
    pipeline.PIPELINE[:] = [p for p in saved if p.__name__ not in passes]
    try:
        return clglow.InferenceSession(variant.SerializeToString())
    finally:
        pipeline.PIPELINE[:] = saved


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pass_ab", description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--without", nargs="+", required=True, metavar="PASS", help="pass function name(s) to leave out")
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args(argv)
    model = onnx.load(str(args.model))
    feeds = _feeds(model, args.model)
    sessions = {"pipeline": clglow.InferenceSession(model.SerializeToString()),
                f"without {' '.join(args.without)}": _session_without(model, args.without)}
    outs = {k: s.run(None, feeds) for k, s in sessions.items()}
    a, b = outs.values()
    diff = max(float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0 for x, y in zip(a, b))
    for _ in range(args.warmup):
        for s in sessions.values():
            s.run(None, feeds)
    times: Dict[str, List[float]] = {k: [] for k in sessions}
    order = list(sessions)
    for r in range(args.repeat):
        for k in (order if r % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            sessions[k].run(None, feeds)
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"{args.model} ({args.repeat} runs each, alternating; outputs differ by at most {diff:.3g})")
    for k, s in sessions.items():
        print(f"  {k:40s} {s._last_plan.n_launches:5d} launches  {med[k]:8.3f} ms")
    first, second = med.values()
    print(f"  ratio (pipeline / without): {first / second:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
