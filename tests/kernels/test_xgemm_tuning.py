"""Tuning xgemm.cl (the GPU family's local-memory GEMM): every configuration of the search space
computes A @ B as numpy does; the tuner measures them where xgemm applies, stores the winner
beside gemm.cl's tiles (per device and family), reads it back in a new Device, re-measures a
corrupt, truncated or older file, and leaves the CPU family's tuning as it was.

pocl's local memory is emulated (type "global"), so, as in test_xgemm.py, the tests force a
Target of the GPU family with local_mem_type="local" (what GPUs and Oclgrind report). The tuner's
xgemm shape is made small here (a quick test); the kernel's correctness does not depend on it.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import execute
except ImportError:
    from run_launches import execute  # type: ignore

from clglow.lower.base import Buf
from clglow.lower.gemm_kernel import Operand
from clglow.lower.gpu_gemm import XgemmConfig, search_space, xgemm_config, xgemm_launch
from clglow.runtime import tuning
from clglow.runtime.device import Device, select_device
from clglow.target import Target


def gpu_local(dev: Device) -> Target:
    """`dev` under the GPU family, told its local memory is dedicated (the xgemm path)."""
    return dataclasses.replace(dev.target("gpu"), local_mem_type="local", gemm_tiles=None, xgemm_tiles=None)


@pytest.fixture
def fresh():
    """A Device of its own (own tuning state) on the test device, under the GPU family with local memory."""
    base = select_device()
    dev = Device(base.context, base.cl_device)
    dev.info = gpu_local(dev)
    return dev


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache folder, measuring on, and a small xgemm tuning shape (whole 128-tiles)."""
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    monkeypatch.delenv("CLGLOW_TUNE", raising=False)
    monkeypatch.setattr(tuning, "XGEMM_SHAPE", (128, 64, 128))
    return tmp_path / "tuning"


def test_every_configuration_is_correct(fresh):
    """Each configuration the tuner may choose builds and computes relu(A @ B) on a shape with
    ragged edges in M, N and K."""
    rng = np.random.default_rng(3)
    m, k, n = 37, 45, 70
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = np.maximum(a.astype(np.float64) @ b, 0)
    space = search_space(fresh.target())
    assert space, "no xgemm configuration fits the test device"
    for cfg in space:
        launch = xgemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=Operand(Buf("a"), ld=k), b=Operand(Buf("b"), ld=n),
                              c=Operand(Buf("c"), ld=n), act="Relu")
        got = execute([launch], {"a": a, "b": b}, {"c": np.empty((m, n), np.float32)})["c"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=cfg.label())


def test_measured_stored_and_read_back(fresh, cache):
    target = fresh.target()
    xcands = tuning.xgemm_candidates(target)
    assert xcands == [c.as_tuple() for c in search_space(target)] and len(xcands) >= 2
    res = tuning.tune_gemm(fresh)
    assert res.source == "measured" and res.xgemm in xcands
    assert set(res.xgemm_timings_ms) <= {XgemmConfig.from_tuple(c).label() for c in xcands}
    assert XgemmConfig.from_tuple(res.xgemm).label() in res.xgemm_timings_ms
    assert all(v > 0 for v in res.xgemm_timings_ms.values())
    assert fresh.target().xgemm_tiles == res.xgemm
    assert xgemm_config(fresh.target()) == XgemmConfig.from_tuple(res.xgemm)
    (path,) = cache.glob("*.json")
    stored = json.loads(path.read_text())
    assert tuple(stored["xgemm"]["choice"]) == res.xgemm
    # a new Device (a later process) reads the choice without measuring
    again = Device(fresh.context, fresh.cl_device)
    again.info = gpu_local(again)
    again.ensure_tuned(tune=True)
    assert again.target().xgemm_tiles == res.xgemm and again.target().gemm_tiles == res.choice
    back = tuning.tune_gemm(again)
    assert back.source == "disk" and back.xgemm == res.xgemm and back.xgemm_timings_ms == res.xgemm_timings_ms


def test_corrupt_truncated_or_older_files_are_measured_again(fresh, cache):
    first = tuning.tune_gemm(fresh)
    (path,) = cache.glob("*.json")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # truncated
    assert tuning.tune_gemm(fresh).source == "measured"
    path.write_text("{not json")
    assert tuning.tune_gemm(fresh).source == "measured"
    # a file without the xgemm entry: gemm.cl's tiles from disk, xgemm measured and stored
    data = json.loads(path.read_text())
    gemm_choice = data["choice"]
    del data["xgemm"]
    path.write_text(json.dumps(data))
    res = tuning.tune_gemm(fresh)
    assert res.source == "disk+measured" and res.xgemm in tuning.xgemm_candidates(fresh.target())
    assert json.loads(path.read_text())["choice"] == gemm_choice and "xgemm" in json.loads(path.read_text())
    # a choice outside the search space (stale, edited): re-measured
    data = json.loads(path.read_text())
    data["xgemm"]["choice"] = [3] * 10
    path.write_text(json.dumps(data))
    assert tuning.tune_gemm(fresh).source == "disk+measured"
    assert first.choice in tuning.candidates(fresh.target())


def test_stored_choice_outside_the_device_limits_falls_back(fresh):
    """A Target carrying a configuration the device cannot run lowers with the first valid one."""
    target = dataclasses.replace(fresh.target(), xgemm_tiles=XgemmConfig(mdimc=64, ndimc=64).as_tuple())
    assert xgemm_config(target) == search_space(target)[0]
    assert xgemm_config(dataclasses.replace(target, xgemm_tiles=(1, 2))) == search_space(target)[0]


def test_cpu_family_tuning_unchanged(cache):
    """Under the CPU family (and the GPU family without dedicated local memory) nothing of
    xgemm is measured or stored: the file holds gemm.cl's choice only, as before."""
    base = select_device()
    dev = Device(base.context, base.cl_device)
    cpu = dev.target("cpu")
    assert tuning.xgemm_candidates(cpu) == []
    res = tuning.tune_gemm(dev, family="cpu")
    assert res.xgemm is None and res.xgemm_timings_ms == {}
    assert dev.target("cpu").xgemm_tiles is None
    (path,) = cache.glob("*.json")
    assert set(json.loads(path.read_text())) == {"choice", "timings_ms", "shape"}
    no_local = dataclasses.replace(dev.target("gpu"), local_mem_type="global")
    assert tuning.xgemm_candidates(no_local) == []


def test_cli_tune_prints_the_xgemm_timings(fresh, cache, monkeypatch, capsys):
    from clglow import cli
    from clglow.runtime import device as device_mod

    monkeypatch.setattr(device_mod, "select_device", lambda selector=None: fresh)
    assert cli.main(["tune", "--target", "gpu"]) == 0
    out = capsys.readouterr().out
    chosen = XgemmConfig.from_tuple(fresh.target("gpu").xgemm_tiles).label()
    assert "xgemm configurations" in out
    for c in search_space(fresh.target("gpu")):
        assert c.label() in out
    assert any(chosen in line and "<- chosen" in line for line in out.splitlines())
