"""OpenCL profiling events -> Chrome trace JSON (opens in Perfetto / chrome://tracing)."""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Iterable

import pyopencl as cl

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
    events = [{"name": kname, "cat": op_type, "ph": "X", "pid": 0, "tid": 0, "ts": (s - t0) / 1000.0,
               "dur": (e - s) / 1000.0, "args": {"node": label, "op_type": op_type}}
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
