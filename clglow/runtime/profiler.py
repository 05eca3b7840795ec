"""OpenCL profiling events -> Chrome trace JSON (opens in Perfetto / chrome://tracing), per-op
summaries, and which member of each tunable kernel family a node ran (its parameters, and
whether they came from the tuning database or the profile's default: lower/tunable.py)."""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Iterable

import pyopencl as cl

from ..lower.tunable import decisions, format_params

log = logging.getLogger(__name__)


def kernel_times(records: Iterable) -> list:
    """[(label, kernel, op_type, start_ns, end_ns)] of every profiled kernel launch."""
    out = []
    for rec in records:
        for label, kname, op_type, ev in rec.kernel_events:
            try:
                ev.wait()
                out.append((label, kname, op_type, ev.profile.start, ev.profile.end))
            except cl.Error as e:  # a queue without profiling, or an event that failed
                log.debug("no profiling info for %s: %s", label, e)
    return out


def write_chrome_trace(records: Iterable, path: str) -> str:
    times = kernel_times(records)
    t0 = min((t[3] for t in times), default=0)
    tuned = _choices_by_label()
    events = [{"name": kname, "cat": op_type, "ph": "X", "pid": 0, "tid": 0, "ts": (s - t0) / 1000.0,
               "dur": (e - s) / 1000.0, "args": {"node": label, "op_type": op_type,
                                                 **({"tuned": tuned[label]} if label in tuned else {})}}
              for label, kname, op_type, s, e in times]
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    return path


def summary_by_op(records: Iterable) -> list:
    """[(op_type, total_ms, launches)] sorted by time, for the CLI."""
    agg: dict = defaultdict(lambda: [0.0, 0])
    for label, kname, op_type, s, e in kernel_times(records):
        agg[op_type][0] += (e - s) / 1e6
        agg[op_type][1] += 1
    return sorted(((k, v[0], v[1]) for k, v in agg.items()), key=lambda t: -t[1])


def run_timeline(records: Iterable) -> dict:
    """Medians over the profiled runs, in ms, of where a launch-bound run's time goes: `busy`
    (kernels running), `span` (first kernel start to last end: busy plus the gaps between
    launches) and `lead` (first kernel queued to its start: the host's enqueueing behind the
    run's gate, executor._Run.gate), with `launches` per run. Empty without profiled kernels."""
    rows = []
    for rec in records:
        evs = []
        for *_, ev in rec.kernel_events:
            try:
                ev.wait()
                evs.append((ev.profile.queued, ev.profile.start, ev.profile.end))
            except cl.Error as e:
                log.debug("no profiling info: %s", e)
        if evs:
            busy = sum(e - s for _, s, e in evs)
            span = max(e for *_, e in evs) - min(s for _, s, _ in evs)
            rows.append((len(evs), busy / 1e6, span / 1e6, (evs[0][1] - evs[0][0]) / 1e6))
    if not rows:
        return {}
    cols = list(zip(*rows))
    med = [sorted(c)[len(c) // 2] for c in cols]
    return {"launches": int(med[0]), "busy": med[1], "span": med[2], "lead": med[3]}


def _choices_by_label() -> dict:
    """node label -> "family params (db|default); ..." of its latest lowering."""
    out: dict = defaultdict(list)
    for (label, family), (_key, params, source) in sorted(decisions().items()):
        out[label].append(f"{family} {format_params(params)} ({source})")
    return {k: "; ".join(v) for k, v in out.items()}


def tuned_nodes(records: Iterable) -> list:
    """[(node label, op_type, total_ms, launches, choices)] by time: for each profiled node, the
    tunable families' members it ran ("family params (db|default)"; "" where none applies)."""
    agg: dict = {}
    for label, kname, op_type, s, e in kernel_times(records):
        row = agg.setdefault(label, [op_type, 0.0, 0])
        row[1] += (e - s) / 1e6
        row[2] += 1
    tuned = _choices_by_label()
    return sorted(((k, v[0], v[1], v[2], tuned.get(k, "")) for k, v in agg.items()), key=lambda t: -t[2])
