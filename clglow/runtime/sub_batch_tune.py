"""`clglow tune MODEL`: the sub-batch budget (runtime/sub_batch.py) measured on the whole model.

Why measured: the best piece size trades activations kept in cache (smaller pieces) against
weights read once per piece and more launches (larger ones), and the device's reported cache
is a poor guide to it (a KVM guest's pocl reports the host's whole L3). A budget changes the plan,
not one kernel, so it cannot be timed alone: each distinct segmentation that the declared
budgets (sub_batch.BUDGETS and the profile's default) give is planned as the whole model, all
in turns, wall time per run (the pieces' extra launches count), and one that beats the default
by 3%, and again head to head in twice as many turns, is stored for the graph's key.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import onnx

from ..lower.tunable import key_str, params_items
from ..target import Target
from . import sub_batch
from .tuning_db import TuningDB, entry_key, family_hash

log = logging.getLogger(__name__)

MARGIN = 0.03  # a budget must beat the default by this much (as the per-shape search's points)


@dataclass
class BudgetResult:
    """What the search found for one graph key: the chosen and default budgets and their times
    (ms, median wall time of a run), and every candidate's time by budget."""

    key: tuple
    chosen: int
    ms: float
    default: int
    default_ms: float
    times: Dict[int, float] = field(default_factory=dict)
    source: str = "measured"


def _feeds(model: onnx.ModelProto) -> Optional[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    feeds: Dict[str, np.ndarray] = {}
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims) or i.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            return None
        feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _table(base: tuple, key: tuple, nbytes: Optional[int]) -> tuple:
    """`base` without a sub_batch entry for `key`, plus one for `nbytes` (None: none, the default)."""
    k = key_str(key)
    rows = tuple(r for r in base if (r[0], r[1]) != ("sub_batch", k))
    return rows if nbytes is None else rows + (("sub_batch", k, params_items({"bytes": int(nbytes)})),)


def _turns(engines: Dict[int, object], feeds: dict, rounds: int) -> Dict[int, float]:
    """Median wall time (ms) of one run per engine, the engines in turns."""
    times: Dict[int, List[float]] = {b: [] for b in engines}
    for _ in range(rounds):
        for b, e in engines.items():
            t0 = time.perf_counter()
            e.run(feeds)
            times[b].append((time.perf_counter() - t0) * 1e3)
    return {b: float(np.median(v)) for b, v in times.items()}


def candidates(target: Target, graph, device_nodes: frozenset, key: tuple) -> List[int]:
    """The declared budgets that give distinct segmentations of the graph, the default first."""
    seen, out = set(), []
    for p in sub_batch.SUB_BATCH_FAMILY.space(target, key):
        seg = sub_batch.segmentation(graph, device_nodes, int(p["bytes"]))
        if seg not in seen:
            seen.add(seg)
            out.append(int(p["bytes"]))
    return out


def tune_budget(device, target: Target, model: onnx.ModelProto, rounds: int = 7, force: bool = False,
                db: Optional[TuningDB] = None) -> Optional[BudgetResult]:
    """Measure the model's sub-batch budgets on `device` and store the choice (see the module
    docstring); None when nothing splits (no batch, not a sub-batching target, symbolic inputs)."""
    from .node_bench import model_engine

    feeds = _feeds(model)
    if feeds is None or not target.sub_batching:
        return None
    db = db if db is not None else TuningDB.for_device(device.cl_device)
    sub_batch.last_split = None
    probe = model_engine(device, target, target.tuned, model)
    try:
        probe.run(feeds)
    finally:
        probe.release()
    if sub_batch.last_split is None:
        return None
    key, graph, nodes = sub_batch.last_split
    ekey = entry_key(target.family, "sub_batch", family_hash("sub_batch"), key_str(key))
    old = db.entries().get(ekey)
    default = sub_batch.default_budget(target)
    if old is not None and not force:
        return BudgetResult(key, int(old["params"]["bytes"]), float(old.get("ms", 0.0)), default,
                            float(old.get("default_ms", 0.0)), source="db")
    budgets = candidates(target, graph, nodes, key)
    base = tuple(target.tuned)
    engines = {b: model_engine(device, target, _table(base, key, None if b == default else b), model)
               for b in budgets}
    try:
        ref = None
        for b, e in list(engines.items()):
            y = next(iter(e.run(feeds).values()))
            ref = y if ref is None else ref
            err = float(np.abs(y - ref).max() / max(1.0, float(np.abs(ref).max())))
            if err > sub_batch.SUB_BATCH_FAMILY.tolerance:  # pieces never change the arithmetic
                log.warning("sub-batch budget %d differs from the default's result by %.1e: left out", b, err)
                engines.pop(b).release()
        times = _turns(engines, feeds, rounds)
        best = min(times, key=times.get)
        chosen, ms, dms = default, times[default], times[default]
        if best != default and times[best] < dms * (1 - MARGIN):
            again = _turns({default: engines[default], best: engines[best]}, feeds, 2 * rounds)
            if again[best] < again[default] * (1 - MARGIN):
                chosen, ms, dms = best, again[best], again[default]
    finally:
        for e in engines.values():
            e.release()
    db.put(ekey, {"params": {"bytes": chosen}, "ms": ms, "default": {"bytes": default}, "default_ms": dms,
                  "by": "tune"})
    log.info("sub-batch budget for %s: %d bytes, %.2f ms (default %d bytes, %.2f ms)", key, chosen, ms, default, dms)
    return BudgetResult(key, chosen, ms, default, dms, times)


def report(res: Optional[BudgetResult]) -> List[str]:
    """The CLI's lines for a budget search."""
    if res is None:
        return ["sub-batch budget: nothing to split (no batch of images, or the target does not sub-batch)"]
    if res.source == "db":
        return [f"sub-batch budget {list(res.key)}: {res.chosen} bytes (in the database; --force measures again)"]
    head = (f"sub-batch budget {list(res.key)} (batch, largest per-image bytes, per-image nodes): "
            f"chose {res.chosen} bytes, {res.ms:.1f} ms a run (default {res.default} bytes, {res.default_ms:.1f} ms)")
    return [head] + [f"  {b:>10d} bytes  {t:8.1f} ms" for b, t in sorted(res.times.items())]


__all__ = ["BudgetResult", "candidates", "tune_budget", "report", "MARGIN"]
