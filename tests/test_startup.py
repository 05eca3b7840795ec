"""Start-up: a session measures nothing before its first run (GEMM tiles from disk, else the
family's defaults, measured in the background after the first run and stored for later
processes), and a warm start in a new process builds no program and computes what the cold
one did. Oracle: onnx.reference; pocl's kernel cache folder (files it writes per build)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

pytest.importorskip("pyopencl")

import clglow  # noqa: E402
from clglow.runtime import search as search_mod  # noqa: E402
from clglow.runtime import tuning  # noqa: E402
from clglow.runtime.device import Device, select_device  # noqa: E402


def _model():
    """Conv 3x3 (Winograd-sized) -> Relu -> 1x1 conv -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.default_rng(4)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, n) for n, s in
            (("w1", (24, 16, 3, 3)), ("b1", (24,)), ("w2", (32, 24, 1, 1)), ("wf", (10, 32)), ("bf", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "startup", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 48, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _x(seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 16, 48, 48)).astype(np.float32)


def _check(model, x: np.ndarray, y: np.ndarray) -> None:
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A Device of its own (own tuning state, no tiles chosen) and an empty clglow cache folder."""
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    monkeypatch.delenv("CLGLOW_TUNE", raising=False)
    base = select_device()
    dev = Device(base.context, base.cl_device)
    dev.cache = base.cache
    return dev


def _join_background() -> None:
    for t in list(search_mod._threads):
        t.join(120)


def test_cold_session_measures_tiles_only_after_its_first_run(fresh, monkeypatch):
    """No stored tiles: the session plans with the defaults, measures nothing before its first run;
    the background search measures them afterwards, stores them, and the process keeps its tiles
    (the session's plan stays valid: the second run uses the same plan)."""
    measured: list = []
    real = tuning._measure
    monkeypatch.setattr(tuning, "_measure", lambda device, target, cands, wait=None:
                        (measured.append(wait), real(device, target, cands, wait))[1])
    monkeypatch.setattr(search_mod, "search", lambda *a, **k: [])  # the per-shape search: its own tests
    model = _model()
    sess = clglow.InferenceSession(model.SerializeToString(), device=fresh)
    family = sess._engine.target.family
    assert measured == [] and fresh.tuning.owed(family)
    assert sess._engine.target.gemm_tiles is None  # the family's defaults
    x = _x()
    (y,) = sess.run(None, {"x": x})
    plan = sess._engine.last_plan
    _join_background()
    assert len(measured) == 1 and measured[0] is not None  # once, in the background (gated)
    result, complete = tuning.stored(fresh, family)
    assert complete and result is not None and result.choice in tuning.candidates(fresh.target(family))
    assert not fresh.tuning.owed(family)
    assert fresh.target(family).gemm_tiles is None  # this process keeps the tiles it planned with
    (y2,) = sess.run(None, {"x": x})
    assert sess._engine.last_plan is plan
    np.testing.assert_array_equal(y2, y)
    _check(model, x, y)
    # a later process (a new Device here) reads the stored tiles, measures nothing and owes nothing
    later = Device(fresh.context, fresh.cl_device)
    later.cache = fresh.cache
    later.load_tuned(family, True)
    assert later.target(family).gemm_tiles == result.choice and not later.tuning.owed(family)
    assert len(measured) == 1


def test_tuning_off_reads_nothing_and_owes_nothing(fresh):
    sess = clglow.InferenceSession(_model().SerializeToString(), clglow.SessionOptions(tune=False), device=fresh)
    assert not fresh.tuning.owed(sess._engine.target.family)
    assert sess._tune_gate is None


def test_stopped_measurement_is_owed_again(fresh):
    family = fresh.target(None).family
    fresh.load_tuned(family, True)
    assert fresh.tuning.owed(family)
    assert fresh.tuning.measure_owed(fresh, family, lambda: False) is None  # stopped before any build
    assert fresh.tuning.owed(family) and tuning.stored(fresh, family) == (None, False)


_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import clglow
    from clglow.runtime.device import select_device
    path, x_path, out_path = sys.argv[1:4]
    pocl = os.environ["POCL_CACHE_DIR"]
    def built():  # pocl's cache: a program.bc per program built, a .so per kernel and work-group size
        return sorted(os.path.relpath(os.path.join(d, n), pocl) for d, _, names in os.walk(pocl) for n in names
                      if n == "program.bc" or n.endswith(".so"))
    sess = clglow.InferenceSession(path)
    (y,) = sess.run(None, {"x": np.load(x_path)})
    sess.device.wait_prepared()
    np.save(out_path, y)
    workers = sess.device.preparation.workers
    from clglow.runtime import cache
    print("CHILD " + json.dumps({"pocl_built": built(), "helpers": 0 if workers is None else workers.started,
                                 "pids": [w.proc.pid for w in (workers._workers if workers else ())],
                                 "tiles": sess._engine.target.gemm_tiles, "cache": cache.stats()}))
""")


def _wait_exit(pids: list, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)


def _child(tmp_path, env: dict, out: str) -> dict:
    p = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "m.onnx"), str(tmp_path / "x.npy"),
                        str(tmp_path / out)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("CHILD "))
    return json.loads(line[len("CHILD "):])


@pytest.mark.slow
def test_warm_start_builds_no_program_and_matches_the_cold_start(device, tmp_path):
    """Two processes from empty clglow and pocl caches: the second (warm) starts no compile helper,
    loads every program from the binaries the first one's helpers stored after it exited, makes
    pocl build and generate nothing (its kernel cache gains no file), and its result is the
    cold start's, bit for bit (the same default tiles: a process that exits after its first run
    measures none)."""
    model = _model()
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    x = _x(6)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), CLGLOW_CACHE_DIR=str(tmp_path / "clglow"),
               POCL_CACHE_DIR=str(tmp_path / "pocl"))
    env.pop("CLGLOW_CACHE", None)
    env.pop("CLGLOW_TUNE", None)
    (tmp_path / "pocl").mkdir()
    cold = _child(tmp_path, env, "cold.npy")
    _wait_exit(cold["pids"])  # the cold start's helpers store binaries after it exits
    built = sorted(str(p.relative_to(tmp_path / "pocl")) for p in (tmp_path / "pocl").rglob("*")
                   if p.name == "program.bc" or p.suffix == ".so")
    warm = _child(tmp_path, env, "warm.npy")
    assert cold["tiles"] is None and warm["tiles"] is None
    if cold["pocl_built"]:  # a driver that keeps a kernel cache there (pocl)
        assert warm["pocl_built"] == built and warm["helpers"] == 0, (cold, warm)
        # the helpers stored every program's binary: the warm start loads them all
        assert warm["cache"]["binary_loads"] > 0 and warm["cache"]["source_builds"] == 0, warm
    y_cold, y_warm = np.load(tmp_path / "cold.npy"), np.load(tmp_path / "warm.npy")
    np.testing.assert_array_equal(y_warm, y_cold)
    _check(model, x, y_cold)
