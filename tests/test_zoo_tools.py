"""The benchmark zoo's own machinery (benchmarks/zoo), without torch and without OpenCL: the
catalogue, the export cache's bookkeeping (a torn meta file is re-exported), the output
comparison (checked against numpy's own arithmetic) and the table's geometric mean."""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # benchmarks/ is not installed: CI runs with PYTHONSAFEPATH=1
    sys.path.insert(0, str(REPO))

from benchmarks.zoo import catalog, export, measure, run  # noqa: E402


def test_catalogue_names_families_and_size() -> None:
    assert len(catalog.MODELS) >= 25
    assert {m.family for m in catalog.MODELS.values()} == {"timm", "transformers", "torchvision", "own"}
    with pytest.raises(ValueError, match="available: .*bert"):
        catalog.select(["bert", "no_such_model"])
    assert [m.name for m in catalog.select(["gru", "bert"])] == ["gru", "bert"]


def test_catalogue_and_list_import_no_torch() -> None:
    code = ("import sys; import benchmarks.zoo.run as r; r.main(['--list']); "
            "print('TORCH', any(m.split('.')[0] in ('torch', 'timm', 'transformers') for m in sys.modules))")
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); " + code
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "TORCH False" in p.stdout
    assert "gpt2_decode" in p.stdout


def test_compare_against_numpy() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 8)).astype(np.float32)
    close = ref + np.float32(1e-5)
    far = ref.copy()
    far[1, 2] += 0.5
    rel, ok, _ = measure.compare([close], [ref])
    expected = float(np.max(np.abs(close.astype(np.float64) - ref)) / np.max(np.abs(ref)))
    assert ok and math.isclose(rel, expected, rel_tol=1e-9)
    rel, ok, note = measure.compare([far], [ref])
    assert not ok and "output 0" in note and math.isclose(rel, 0.5 / float(np.max(np.abs(ref))), rel_tol=1e-4)
    ints = np.arange(6, dtype=np.int64)
    assert measure.compare([ints], [ints])[1]
    assert not measure.compare([ints + (ints == 3)], [ints])[1]
    rel, ok, note = measure.compare([ref[:2]], [ref])
    assert not ok and rel == float("inf") and "shape" in note
    flat = np.full((3, 3), 2.0, dtype=np.float32)
    rel, ok, note = measure.compare([flat], [flat])
    assert ok and "constant" in note


def test_geomean_and_table() -> None:
    ratios = [0.8, 1.25, 2.0]
    assert math.isclose(run.geomean(ratios), statistics.geometric_mean(ratios), rel_tol=1e-12)
    results = [{"name": "bert", "clglow_ms": 2.0, "ort_ms": 1.6, "ratio": 1.25, "max_rel": 1e-6, "ok": True},
               {"name": "gru", "clglow_ms": 0.8, "ort_ms": 1.0, "ratio": 0.8, "max_rel": 1e-2, "ok": False,
                "host": {"Loop": 2}},
               {"name": "unet", "error": "session: UnsupportedOperator: X", "ort_ms": 3.0},
               {"name": "tcn", "export_error": "RuntimeError: no"}]
    text = run.table(results)
    assert "MISMATCH" in text and "Loop x2" in text and "export failed: RuntimeError: no" in text
    assert f"**{statistics.geometric_mean([1.25, 0.8]):.2f}**" in text
    assert "2 of 4 not timed" in text


def test_export_cache_bookkeeping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    d = export.model_dir("bert")
    assert d == tmp_path / "zoo" / "bert"
    assert export.needs_export("bert")  # nothing there
    d.mkdir(parents=True)
    (d / "meta.json").write_text('{"ok": true, "na')  # torn write
    assert export.read_meta("bert") is None and export.needs_export("bert")
    (d / "meta.json").write_text(json.dumps({"ok": True, "weights": export.WEIGHTS}))
    assert export.needs_export("bert")  # the model file is missing
    (d / "model.onnx").write_bytes(b"x")
    (d / "inputs.npz").write_bytes(b"x")
    assert not export.needs_export("bert") and export.needs_export("bert", force=True)
    (d / "meta.json").write_text(json.dumps({"ok": False, "versions": export.versions(), "weights": export.WEIGHTS}))
    assert not export.needs_export("bert")  # failed under these versions: not retried
    (d / "meta.json").write_text(json.dumps({"ok": False, "versions": {"torch": "0.0"}, "weights": export.WEIGHTS}))
    assert export.needs_export("bert")  # failed under other versions: retried
    (d / "meta.json").write_text(json.dumps({"ok": True, "weights": export.WEIGHTS - 1}))
    assert export.needs_export("bert")  # exported with older weights: redone
