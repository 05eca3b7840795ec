"""Prints the ONNX backend suite's counts (per group, and the mode) at the end of a run."""
from __future__ import annotations

import collections
import os

import pytest

_counts: dict = collections.defaultdict(collections.Counter)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "onnx_backend" not in report.nodeid:
        return
    group = report.nodeid.split("::")[1] if "::" in report.nodeid else "?"
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _counts[group][report.outcome] += 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if not _counts:
        return
    mode = os.environ.get("CLGLOW_HOST_FALLBACK", "")
    mode = "host fallback off" if mode.strip().lower() in ("0", "false", "no", "off") else "host fallback on"
    tr = terminalreporter
    tr.section(f"ONNX backend suite counts ({mode})")
    for group in sorted(_counts):
        c = _counts[group]
        tr.write_line(f"{group:40s} passed {c['passed']:5d}  failed {c['failed']:4d}  skipped {c['skipped']:4d}")
