"""GEMM tile tuning: measured once per device, stored, read back; every candidate computes the
same convolutions and matrix products as the oracle."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from onnx import helper

from clglow.lower.gemm_kernel import gemm_config
from clglow.runtime import tuning
from clglow.runtime.device import select_device

try:
    from .harness import check
except ImportError:
    from harness import check  # type: ignore


@pytest.fixture
def device():
    dev = select_device()
    saved = dev.info
    yield dev
    dev.info = saved


def test_candidates_default_first_and_within_limits(device):
    cands = tuning.candidates(device.info)
    d = gemm_config(dataclasses.replace(device.info, gemm_tiles=None))
    assert cands[0] == (d.mr, d.vw, d.nv, tuple(d.lsize))
    assert len(cands) == len(set(cands)) >= 2
    for mr, vw, nv, ls in cands:
        assert vw in (4, 8, 16) and mr >= 1 and nv >= 1
        assert ls[0] * ls[1] * ls[2] <= device.info.max_work_group_size


def test_measured_then_read_from_disk(device, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    monkeypatch.delenv("CLGLOW_TUNE", raising=False)
    first = tuning.tune_gemm(device)
    assert first.source == "measured" and first.choice in tuning.candidates(device.info)
    assert set(first.timings_ms) and all(v > 0 for v in first.timings_ms.values())
    assert device.info.gemm_tiles == first.choice
    (path,) = (tmp_path / "tuning").glob("*.json")
    again = tuning.tune_gemm(device)
    assert again.source == "disk" and again.choice == first.choice
    # a choice that is not a candidate (stale, edited) is measured again; so is a corrupt file
    path.write_text(json.dumps({"choice": [99, 16, 2, [1, 1, 1]]}))
    assert tuning.tune_gemm(device).source == "measured"
    path.write_text("{not json")
    assert tuning.tune_gemm(device).source == "measured"


def test_disabled_uses_the_default(device, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CLGLOW_TUNE", "0")
    res = tuning.tune_gemm(device)
    assert res.source == "default" and res.choice == tuning.candidates(device.info)[0]
    assert not (tmp_path / "tuning").exists()


def test_every_candidate_is_correct(device):
    """Whatever the tuner picks, convolutions (both GEMM orientations) and MatMul/Gemm match the
    reference."""
    for which, tiles in enumerate(tuning.candidates(device.info)):
        _check_tiles(dataclasses.replace(device.info, gemm_tiles=tiles), which)


def _check_tiles(info, which):
    rng = np.random.default_rng(which)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    check(helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]), {"x": r(2, 8, 13, 40)},
          {"w": r(20, 8, 3, 3), "b": r(20)}, device=info)
    check(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), {"x": r(1, 16, 14, 14)},
          {"w": r(64, 16, 3, 3)}, device=info)
    check(helper.make_node("Conv", ["x", "w"], ["y"]), {"x": r(1, 16, 7, 7)}, {"w": r(64, 16, 1, 1)}, device=info)
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": r(100, 70), "b": r(70, 90)}, device=info)
    check(helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1), {"a": r(3, 50)},
          {"b": r(33, 50), "c": r(33)}, device=info)


# --- per target family ------------------------------------------------------------------------
@pytest.fixture
def fresh_device(device):
    """A Device of its own on the same OpenCL device (its own tuning state and program cache)."""
    from clglow.runtime.device import Device

    return Device(device.context, device.cl_device)


def test_candidates_follow_the_family(fresh_device):
    cpu, gpu = fresh_device.target("cpu"), fresh_device.target("gpu")
    assert tuning.candidates(cpu) != tuning.candidates(gpu)
    assert all(ls == (1, 1, 1) for *_, ls in tuning.candidates(cpu))  # one work-item per group
    assert all(ls[0] * ls[1] > 1 for *_, ls in tuning.candidates(gpu))  # work-group tiles
    for *_, ls in tuning.candidates(gpu):
        assert ls[0] * ls[1] * ls[2] <= gpu.max_work_group_size


def test_each_family_is_tuned_and_stored_apart(fresh_device, tmp_path, monkeypatch):
    """The GPU family tuned on this device leaves the device's own family alone; each family
    has its own file (the key names the family) and is read back by a new Device."""
    from clglow.runtime.device import Device

    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLGLOW_TUNE", raising=False)
    own = fresh_device.info.family
    other = "gpu" if own == "cpu" else "cpu"
    res = tuning.tune_gemm(fresh_device, family=other)
    assert res.source == "measured" and res.choice in tuning.candidates(fresh_device.target(other))
    assert fresh_device.target(other).gemm_tiles == res.choice and fresh_device.target(other).family == other
    assert fresh_device.info.gemm_tiles is None and fresh_device.target().family == own
    (first,) = (tmp_path / "tuning").glob("*.json")
    tuning.tune_gemm(fresh_device)  # the own family: a second file
    assert len(list((tmp_path / "tuning").glob("*.json"))) == 2
    again = Device(fresh_device.context, fresh_device.cl_device)
    again.ensure_tuned(other)
    assert again.target(other).gemm_tiles == res.choice  # from disk
    assert tuning.tune_gemm(again, family=other).source == "disk"
    assert first.exists()


def test_ensure_tuned_once_per_family(fresh_device, monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "tune_gemm", lambda dev, family=None, enabled=None, force=False:
                        calls.append(family))
    monkeypatch.setenv("CLGLOW_TUNE", "1")
    for _ in range(3):
        fresh_device.ensure_tuned()
        fresh_device.ensure_tuned("gpu")
        fresh_device.ensure_tuned("cpu")
    assert sorted(calls) == ["cpu", "gpu"]
    fresh_device.ensure_tuned("gpu", False)  # measuring off: nothing (the defaults apply)
    assert len(calls) == 2


def test_gpu_family_candidates_are_correct(fresh_device):
    """Whatever the tuner picks for the GPU family (work-group tiles, CLGLOW_TARGET=gpu on any
    device), convolutions and matrix products match the reference."""
    gpu = fresh_device.target("gpu")
    for which, tiles in enumerate(tuning.candidates(gpu)):
        _check_tiles(dataclasses.replace(gpu, gemm_tiles=tiles), 10 + which)
