"""benchmarks.conv_paths runs every path the conv family offers for a small strided conv, checks
each against onnx.reference and prints a ratio line per path."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pyopencl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import conv_paths  # noqa: E402


def test_conv_paths_prints_each_path(capsys):
    assert conv_paths.main(["20", "20", "10", "10", "3", "3", "2", "2", "1", "1", "8", "64", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if " median " in ln]
    assert lines and all(" x" in ln for ln in lines), out
    for ln in out.splitlines():
        if "max rel. diff" in ln:
            assert float(ln.rsplit(" ", 1)[1]) < 1e-4, ln
