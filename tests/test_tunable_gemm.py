"""The gemm family's prefetch parameter (gemm.cl PFB, lower/gemm_kernel.py): every declared value
builds and computes the right product vs numpy on small ragged shapes (whole column tiles, a
ragged last tile, the one-vector tail, K shorter than the distance), in the plain in-place loop
and in the implicit convolution's loop (vs onnx.reference); the space declares it for in-place
B only, and the CPU family's default prefetches."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")

from clglow.lower import gemm_kernel as gk  # noqa: E402
from clglow.lower.gemm_kernel import (PFB_VALUES, gemm_bench, gemm_key, gemm_space, pack_a,  # noqa: E402
                                      params_config)

try:
    from .kernels.harness import check, device_info, lower
    from .kernels.run_launches import execute
except ImportError:  # run from tests/
    from kernels.harness import check, device_info, lower  # type: ignore
    from kernels.run_launches import execute  # type: ignore


def _cpu():
    return dataclasses.replace(device_info().with_family("cpu"), gemm_tiles=None)


def _points(target) -> list:
    """For each prefetch value, three tile shapes of the space (the default's, 8-row, 4-wide)."""
    space = gemm_space(target, gemm_key(37, 100, 21, "inplace"))
    d = space[0]
    out = []
    for pfb in PFB_VALUES:
        for want in ({"mr": d["mr"], "vw": d["vw"], "nv": d["nv"]}, {"mr": 8, "nv": 3}, {"vw": 4, "mr": 6}):
            hit = [p for p in space if p["pfb"] == pfb and all(p[k] == v for k, v in want.items())]
            if hit and hit[0] not in out:
                out.append(hit[0])
    return out


def test_space_declares_prefetch_for_in_place_b_only():
    target = _cpu()
    assert gk.gemm_config(target).pfb == gk.CPU_PFB > 0
    assert {p["pfb"] for p in gemm_space(target, gemm_key(64, 3136, 576, "inplace"))} == set(PFB_VALUES)
    assert {p["pfb"] for p in gemm_space(target, gemm_key(64, 3136, 576, "packed"))} == {gk.CPU_PFB}
    assert {p["pfb"] for p in gemm_space(device_info().with_family("gpu"))} == {0}
    cfg = params_config(gemm_space(target)[0])
    assert gk.gemm_defines(cfg, a_packed=True, b_packed=False)["PFB"] == gk.CPU_PFB
    assert "PFB" not in gk.gemm_defines(cfg, a_packed=True, b_packed=True)  # packed B: the same program as before


@pytest.mark.parametrize("pfb", PFB_VALUES)
def test_every_prefetch_point_computes_the_product(pfb):
    """gemm.cl with B in place (A packed, ReLU epilogue) at each point vs numpy: N as whole
    column tiles, a ragged last tile, and the one-vector tail; K below, at and above PFB."""
    target = _cpu()
    rng = np.random.default_rng(pfb)
    points = [p for p in _points(target) if p["pfb"] == pfb]
    assert points
    for p in points:
        cfg = params_config(p)
        for m, n, k in ((37, 4 * cfg.nr, 3), (13, 4 * cfg.nr + 5, pfb or 2), (29, 5 * cfg.nr + cfg.vw - 1, 43)):
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            launch, _ = gemm_bench(target, gemm_key(m, n, k, "inplace"), p)
            assert launch.defines.get("PFB", 0) == pfb and launch.defines["B_PACKED"] == 0, launch.defines
            got = execute([launch], {"A": pack_a(a, cfg.mr), "B": b}, {"C": np.empty((m, n), np.float32)})["C"]
            want = np.maximum(a @ b, 0)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=f"{p} {m, n, k}")


@pytest.mark.parametrize("pfb", PFB_VALUES)
def test_implicit_conv_with_each_prefetch(monkeypatch, pfb):
    """The implicit GEMM's loop (row k + PFB through the offset table) and a 1x1 conv reading X in
    place, with the CPU default's PFB set to each value, vs onnx.reference."""
    monkeypatch.setattr(gk, "CPU_PFB", pfb)
    rng = np.random.default_rng(7)
    dev = _cpu()
    # an implicit GEMM (stride 2, and stride 1 at 30x30), Winograd's batched GEMM, a 1x1 over X
    cases = [((1, 16, 28, 28), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), (14, 14)),
             ((1, 8, 30, 30), (20, 8, 3, 3), dict(pads=[1, 1, 1, 1]), (30, 30)),
             ((1, 16, 29, 31), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]), (29, 31)),
             ((2, 6, 12, 11), (24, 6, 1, 1), {}, (12, 11))]
    for xs, ws, attrs, (oh, ow) in cases:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
        launches = lower(node, {"x": x}, {"w": w}, {"y": ((xs[0], ws[0], oh, ow), np.float32)}, device=dev)
        gemms = [ln for ln in launches if ln.program == "gemm" and ln.defines.get("B_PACKED") == 0]
        assert gemms, [ln.kernel for ln in launches]  # these paths read their pixels in place
        assert all(ln.defines.get("PFB", 0) == pfb for ln in gemms), [ln.defines for ln in gemms]
        check(node, {"x": x}, {"w": w}, device=dev)
