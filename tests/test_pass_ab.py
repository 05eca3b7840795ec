"""benchmarks/pass_ab.py: the A/B of one pass on a model (the rotary embedding's fusion here)
prints both sessions' launches and times, and refuses a pass that is not in the pipeline."""
from __future__ import annotations

import os
import sys

import onnx
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "passes"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/ (not installed)
from test_pass_rotary import _rotary  # noqa: E402

from benchmarks import pass_ab  # noqa: E402


def test_pass_ab_prints_both_sessions(tmp_path, capsys):
    m, _feeds = _rotary((1, 4, 7, 64), (1, 1, 7, 64), const_tables=True)
    path = tmp_path / "rotary.onnx"
    onnx.save(m, str(path))
    assert pass_ab.main([str(path), "--without", "fuse_rotary", "--repeat", "3", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    lines = [ln.split() for ln in out.splitlines() if "launches" in ln]
    assert len(lines) == 2 and "differ by at most 0" in out
    fused, unfused = (int(ln[ln.index("launches") - 1]) for ln in lines)
    assert fused < unfused  # Relu + RotateHalf against the seven nodes' launches


def test_pass_ab_refuses_an_unknown_pass(tmp_path):
    m, _feeds = _rotary((1, 2, 3, 8), (1, 1, 3, 8), const_tables=True)
    path = tmp_path / "rotary.onnx"
    onnx.save(m, str(path))
    with pytest.raises(SystemExit, match="no pass"):
        pass_ab.main([str(path), "--without", "fuse_nothing"])
