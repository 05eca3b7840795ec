"""One zoo model side by side: clglow and onnxruntime's CPU provider in one process.

Run as a child (``python -m benchmarks.zoo.measure NAME --repeat N --warmup W``) by the zoo's
runner, which reads the one ``ZOO {json}`` line it prints. Steps: onnxruntime's session and
its outputs (the reference); clglow's session, built once (a refusal is recorded with its
error, naming the node/op); the first clglow run (compiles the kernels); warm-up; then the
runner's alternating timing (``benchmarks.runner.alternate``: one call each per round, order
flipped every round). The outputs are compared with onnxruntime's: max relative error is the
largest |clglow - onnxruntime| over the largest |onnxruntime| of each output. A detection model
(tagged "detection") whose detections differ is checked by benchmarks.zoo.detection instead
(its post-processing from onnxruntime's head outputs; the note says so).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import traceback
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..runner import alternate, ort_options
from . import catalog, detection
from .export import model_dir

TOLERANCE = 1e-3  # max relative error still counted as a match (fp32, reassociated sums)


def compare(ours: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> Tuple[float, bool, str]:
    """(max relative error, ok, note): integer outputs must match exactly, float outputs within
    TOLERANCE of the output's largest magnitude; a shape difference is a mismatch."""
    worst, ok, note = 0.0, True, ""
    for i, (a, b) in enumerate(zip(ours, ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return float("inf"), False, f"output {i}: shape {a.shape} vs onnxruntime's {b.shape}"
        if not a.size:
            continue
        if a.dtype.kind in "biu" or b.dtype.kind in "biu":
            bad = int(np.count_nonzero(a.astype(np.int64) != b.astype(np.int64)))
            if bad:
                ok, note = False, note or f"output {i}: {bad} of {a.size} integers differ"
                worst = max(worst, 1.0)
            continue
        if float(np.ptp(b)) <= 1e-6 * max(float(np.max(np.abs(b))), 1e-30):
            note = note or f"output {i} is constant: the comparison proves little"
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        scale = max(float(np.max(np.abs(b))), 1e-30)
        rel = float(np.max(d)) / scale if np.all(np.isfinite(d)) else float("inf")
        if not rel <= TOLERANCE:
            ok, note = False, note or f"output {i}: max rel error {rel:.2e}"
        worst = max(worst, rel)
    return worst, ok, note


def host_ops(sess: object) -> Dict[str, int]:
    """op type -> count of the nodes the session placed on the host (its last plan's placement)."""
    return dict(collections.Counter(p.op_type for p in sess.placement if p.where == "host"))


def _error(stage: str, e: BaseException) -> str:
    msg = str(e).strip()
    return f"{stage}: {type(e).__name__}: {msg[:600]}"


def measure(name: str, repeat: int, warmup: int) -> dict:
    """The result record of one model (see the module docstring); errors become fields."""
    import onnxruntime as ort

    import clglow

    path = model_dir(name) / "model.onnx"
    feeds = dict(np.load(model_dir(name) / "inputs.npz"))
    res: dict = {"name": name}
    ref_sess = ort.InferenceSession(str(path), ort_options(), providers=["CPUExecutionProvider"])
    ref = ref_sess.run(None, feeds)
    t0 = time.perf_counter()
    try:
        sess = clglow.InferenceSession(str(path))
    except Exception as e:
        res["error"] = _error("session", e)
        res["ort_ms"] = _ort_only(ref_sess, feeds, repeat, warmup)
        return res
    res["load_s"] = time.perf_counter() - t0
    res["device"] = str(getattr(sess.device, "name", sess.device))
    try:
        t0 = time.perf_counter()
        got = sess.run(None, feeds)
        res["first_run_s"] = time.perf_counter() - t0
    except Exception as e:
        res["error"] = _error("run", e)
        res["host"] = host_ops(sess)
        res["ort_ms"] = _ort_only(ref_sess, feeds, repeat, warmup)
        return res
    res["host"] = host_ops(sess)
    res["nodes"] = len(sess.placement)
    res["max_rel"], res["ok"], res["note"] = compare(got, ref)
    if not res["ok"] and "detection" in catalog.MODELS[name].tags:  # near-tie scores: benchmarks.zoo.detection
        res["max_rel"], res["ok"], res["note"] = _detection_check(str(path), feeds, ref, got)
    t = alternate({"clglow": lambda: sess.run(None, feeds), "onnxruntime": lambda: ref_sess.run(None, feeds)},
                  repeat, warmup)
    res["clglow_ms"] = t["clglow"].median * 1e3
    res["ort_ms"] = t["onnxruntime"].median * 1e3
    res["ratio"] = res["clglow_ms"] / res["ort_ms"]
    res["clglow_times_ms"] = [x * 1e3 for x in t["clglow"].times]
    res["ort_times_ms"] = [x * 1e3 for x in t["onnxruntime"].times]
    sess.release()
    return res


def _detection_check(path: str, feeds: dict, ref: list, got: list) -> Tuple[float, bool, str]:
    """benchmarks.zoo.detection's check, with the sessions this module makes."""
    import onnxruntime as ort

    import clglow

    def ort_session(model: bytes) -> object:
        return ort.InferenceSession(model, ort_options(), providers=["CPUExecutionProvider"])

    return detection.check(path, feeds, ref, got, ort_session, clglow.InferenceSession, compare, TOLERANCE)


def _ort_only(ref_sess: object, feeds: dict, repeat: int, warmup: int) -> float:
    """onnxruntime's median ms alone (for a model clglow did not run)."""
    t = alternate({"onnxruntime": lambda: ref_sess.run(None, feeds)}, repeat, warmup)
    return t["onnxruntime"].median * 1e3


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.zoo.measure")
    p.add_argument("name")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args(argv)
    try:
        res = measure(args.name, args.repeat, args.warmup)
    except Exception as e:  # onnxruntime itself refusing the export, unreadable files, ...
        res = {"name": args.name, "error": _error("setup", e), "traceback": traceback.format_exc()[-3000:]}
    print("ZOO " + json.dumps(res, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
