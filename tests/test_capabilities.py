"""runtime/capabilities.py: what a device can build, probed by building a kernel (Target.prefetch),
and gemm.cl without its prefetches (-DCLG_NO_PREFETCH) where the probe fails (Oclgrind)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")

from clglow.runtime import capabilities  # noqa: E402


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache folder and no remembered probe results."""
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(capabilities, "_memo", {})
    return tmp_path


def test_probe_on_this_device_is_stored(fresh):
    """pocl builds __builtin_prefetch: True, written to capabilities.json and read back from there
    (the probe is not run again)."""
    from clglow.runtime.device import select_device

    dev = select_device()
    ok = capabilities.prefetch_builds(dev.context, dev.cl_device)
    assert isinstance(ok, bool)
    data = json.loads((fresh / "capabilities.json").read_text())
    assert list(data.values()) == [ok]
    capabilities._memo.clear()
    calls = []
    orig = capabilities._probe_prefetch
    capabilities._probe_prefetch = lambda *a: calls.append(a) or orig(*a)
    try:
        assert capabilities.prefetch_builds(dev.context, dev.cl_device) == ok
    finally:
        capabilities._probe_prefetch = orig
    assert calls == []


def test_failed_probe_means_no_prefetch(fresh, monkeypatch):
    """A device whose compiler refuses the probe's kernel gets Target.prefetch False and every
    program built with -DCLG_NO_PREFETCH; gemm.cl with an in-place B (PFB) builds and computes
    the same product without its prefetches."""
    from clglow.lower.gemm_kernel import gemm_config
    from clglow.runtime.device import Device, select_device

    base = select_device()
    monkeypatch.setattr(capabilities, "_probe_prefetch", lambda context, device: False)
    dev = Device(base.context, base.cl_device)
    assert dev.info.prefetch is False
    assert "-DCLG_NO_PREFETCH=1" in dev.device_options(("-DPFB=8",))
    if not dev.info.is_cpu_family:
        pytest.skip("the prefetching gemm.cl tiles are the CPU family's")
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "kernels"))
    from harness import lower
    from run_launches import execute

    rng = np.random.default_rng(0)
    n = 8 * gemm_config(dev.info).nr + 5
    a, b = rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, n)).astype(np.float32)
    node = helper.make_node("Gemm", ["a", "b"], ["y"])
    launches = lower(node, {"a": a, "b": b}, {}, {"y": ((37, n), np.float32)}, device=dev.info)
    assert any(ln.defines.get("PFB") for ln in launches), [ln.defines for ln in launches]
    launches = [dataclasses.replace(ln, defines={**ln.defines, "CLG_NO_PREFETCH": 1}) for ln in launches]
    got = execute(launches, {"a": a, "b": b}, {"y": np.empty((37, n), np.float32)})["y"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_target_default_keeps_prefetch():
    from clglow.target import Target

    assert Target().prefetch and not dataclasses.replace(Target(), prefetch=False).prefetch
