"""The gemm family's prefetch and A-block parameters (gemm.cl PFB and AKB, lower/gemm_kernel.py):
every declared value builds and computes the right product vs numpy on small ragged shapes
(whole column tiles, a ragged last tile, the one-vector tail, K shorter than the distance or
the block, K not a multiple of it), in the plain in-place loop, the packed-B loop and the
implicit convolution's loop (vs onnx.reference); the space declares them around the default
tiles, and the CPU family's default uses both."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")

from clglow.lower import gemm_kernel as gk  # noqa: E402
from clglow.lower.gemm_kernel import (AKB_VALUES, PFB_VALUES, gemm_bench, gemm_key, gemm_space,  # noqa: E402
                                      pack_a, pack_b, params_config)

try:
    from .kernels.harness import check, device_info, lower
    from .kernels.run_launches import execute
except ImportError:  # run from tests/
    from kernels.harness import check, device_info, lower  # type: ignore
    from kernels.run_launches import execute  # type: ignore


def _cpu():
    return dataclasses.replace(device_info().with_family("cpu"), gemm_tiles=None)


def _points(target, name: str, value: int) -> list:
    """The space's points with parameter `name` = `value` (the default tiles, and for the
    default's value every tile shape: three of them here, the default's first)."""
    hits = [p for p in gemm_space(target) if p[name] == value]
    return hits[:3]


def test_space_declares_prefetch_and_a_block():
    target = _cpu()
    d = gk.gemm_config(target)
    assert d.pfb == gk.CPU_PFB > 0
    assert d.akb == (min(16, max(4, target.preferred_vector_width_float)) if gk.CPU_AKB else 0)
    space = gemm_space(target)
    assert space == gemm_space(target, gemm_key(64, 3136, 576, "packed"))  # one space for every key
    assert {p["pfb"] for p in space} == set(PFB_VALUES) and {p["akb"] for p in space} == set(AKB_VALUES)
    assert all(p["pfb"] == d.pfb and p["akb"] == d.akb for p in space
               if (p["mr"], p["vw"], p["nv"]) != (d.mr, d.vw, d.nv))  # varied around the default tiles only
    assert {(p["pfb"], p["akb"]) for p in gemm_space(device_info().with_family("gpu"))} == {(0, 0)}
    cfg = params_config(dict(space[0], akb=16))
    assert gk.gemm_defines(cfg, a_packed=True, b_packed=False)["PFB"] == gk.CPU_PFB
    assert gk.gemm_defines(cfg, a_packed=False, b_packed=True)["AKB"] == 16
    # packed operands: the same programs as without the parameters
    assert not {"PFB", "AKB"} & set(gk.gemm_defines(cfg, a_packed=True, b_packed=True))


@pytest.mark.parametrize("pfb", PFB_VALUES)
def test_every_prefetch_point_computes_the_product(pfb):
    """gemm.cl with B in place (A packed, ReLU epilogue) at each point vs numpy: N as whole
    column tiles, a ragged last tile, and the one-vector tail; K below, at and above PFB."""
    target = _cpu()
    rng = np.random.default_rng(pfb)
    points = _points(target, "pfb", pfb)
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


@pytest.mark.parametrize("akb", AKB_VALUES)
def test_every_a_block_point_computes_the_product(akb):
    """gemm.cl with a strided A (row pitch K, the key's "strided") at each AKB, B in place and
    packed, vs numpy: K below the block, a multiple of it, and with a remainder; ragged M."""
    target = _cpu()
    rng = np.random.default_rng(100 + akb)
    points = _points(target, "akb", akb)
    assert points
    for p in points:
        cfg = params_config(p)
        for m, n, k, layout in ((37, 4 * cfg.nr, 3, "inplace"), (13, 4 * cfg.nr + 5, 32, "inplace"),
                                (29, 2 * cfg.nr + 3, 16 * 3 + 7, "packed")):
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            launch, _ = gemm_bench(target, gemm_key(m, n, k, layout, "strided"), p)
            assert launch.defines["A_PACKED"] == 0 and launch.defines.get("AKB", 0) == akb, launch.defines
            bb = pack_b(b, cfg.nr) if launch.defines["B_PACKED"] else b
            got = execute([launch], {"A": a, "B": bb}, {"C": np.empty((m, n), np.float32)})["C"]
            want = np.maximum(a @ b, 0)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=f"{p} {m, n, k}")


@pytest.mark.parametrize("akb", AKB_VALUES)
def test_live_a_gemm_and_matmul_with_each_a_block(monkeypatch, akb):
    """Gemm and MatMul with a live A read in place (row-major: blocks; transposed: k stride M,
    the element-wise loop) with the CPU default's AKB set to each value, vs onnx.reference."""
    monkeypatch.setattr(gk, "CPU_AKB", bool(akb))
    dev = dataclasses.replace(_cpu(), preferred_vector_width_float=max(akb, 4))
    rng = np.random.default_rng(200 + akb)
    for op, attrs, a_shape in (("MatMul", {}, (50, 37)), ("Gemm", {}, (50, 37)), ("Gemm", {"transA": 1}, (37, 50))):
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal((37, 140)).astype(np.float32)
        node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
        launches = lower(node, {"a": a, "b": b}, {}, {"y": ((50, 140), np.float32)}, device=dev)
        gemm = [ln for ln in launches if ln.program == "gemm"][0]
        assert gemm.defines["A_PACKED"] == 0 and gemm.defines.get("AKB", 0) == gk.gemm_config(dev).akb
        check(node, {"a": a, "b": b}, device=dev)


def test_variants_benchmark_checks_every_variant(capsys):
    """benchmarks.gemm_variants (the single-kernel A/B tool these parameters were measured with)
    runs each variant, checks it against numpy and prints a row per variant."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # PYTHONSAFEPATH=1
    from benchmarks import gemm_variants

    assert gemm_variants.main(["40x33x70", "packed:MR=8,NV=3", "inplace:B_PACKED=0,PFB=4",
                               "strided:A_PACKED=0,AKB=8,LDA=40", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("numpy", "packed", "inplace", "strided")), out
