"""Winograd for few tiles, the transposed forms F2T / F4T (lower/winograd_small.py, winograd.cl
wt2_in / wt4_in) vs onnx.reference: small maps (ResNet's 14x14 and 7x7 shapes scaled down in
channels), ragged tile counts, pads, batches in pieces, fused bias / residual / activation;
offered in the conv family's space on few tiles, taken from a database entry."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower, run
    from .run_launches import reference
except ImportError:
    from harness import check, device_info, lower, run  # type: ignore
    from run_launches import reference  # type: ignore

from clglow.config import PlanOptions
from clglow.lower import conv as conv_mod
from clglow.lower import tunable
from clglow.lower import winograd as wino
from clglow.lower import winograd_small as wsmall
from clglow.lower.common import ConvGeometry
from clglow.lower.gemm_kernel import GemmConfig
from clglow.target import Target

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _geom(x_shape, w_shape, pads):
    n, cin, h, w = x_shape
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    return ConvGeometry(h, w, oh, ow, 3, 3, 1, 1, pads[0], pads[1], 1, 1, n_img=n, cin=cin, cout=w_shape[0])


def _tuned(variant, key, width=8):
    """The test device with the CPU tile defaults of `width`-float vectors (6 x 16 for 8, 12 x 32
    for 16; they run on any CPU device) and a conv family entry choosing Winograd `variant`."""
    dev = dataclasses.replace(device_info(), gemm_tiles=None, preferred_vector_width_float=width)
    if not dev.is_cpu_family:
        pytest.skip("Winograd is taken under the CPU family only")
    point = {"path": "winograd", "variant": variant}
    assert conv_mod.runs(conv_mod.key_case(dev, key), point)
    return dataclasses.replace(dev, tuned=(("conv", tunable.key_str(key), tunable.params_items(point)),))


CASES = [  # (x shape, Cout, pads, variant)
    ((1, 32, 14, 14), 48, (1, 1, 1, 1), "F4T"),   # 16 tiles
    ((1, 32, 14, 14), 40, (1, 1, 1, 1), "F2T"),   # 49 tiles, Cout not whole column tiles
    ((1, 24, 7, 7), 32, (1, 1, 1, 1), "F2T"),     # 16 tiles of which 7 ragged
    ((1, 24, 7, 7), 32, (1, 1, 1, 1), "F4T"),     # 4 tiles, fewer than a row tile
    ((2, 16, 11, 13), 24, (0, 1, 2, 1), "F4T"),   # asymmetric pads, odd sizes, two images
    ((3, 17, 9, 10), 20, (2, 2, 2, 2), "F2T"),    # pads wider than one pixel, Cin not a multiple of 8
    # the plain forms on few tiles (one to four column tiles of 16, B read in place)
    ((1, 32, 14, 14), 48, (1, 1, 1, 1), "F4"),    # 16 tiles: one whole column tile
    ((1, 32, 14, 14), 40, (1, 1, 1, 1), "F2"),    # 49 tiles: a ragged last column tile
    ((1, 24, 7, 7), 32, (1, 1, 1, 1), "F2"),      # 16 tiles of 2x2 over a 7x7 map (ragged edges)
    ((2, 16, 28, 28), 24, (1, 1, 1, 1), "F4"),    # 49 tiles, two images
]


@pytest.mark.parametrize("x_shape,cout,pads,variant", CASES, ids=[str(i) for i in range(len(CASES))])
def test_winograd_transposed_conv(x_shape, cout, pads, variant):
    g = _geom(x_shape, (cout,), pads)
    dev = _tuned(variant, dataclasses.astuple(g) + ("", True, False))
    x, w, b = rand(*x_shape), rand(cout, x_shape[1], 3, 3), rand(cout)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(pads))
    y = reference(node, {"x": x}, {"w": w, "b": b}, 17)[0]
    launches = lower(node, {"x": x}, {"w": w, "b": b}, {"y": (y.shape, np.float32)}, device=dev)
    k_in, k_out = wino.VARIANTS[variant].kernels
    assert [ln.kernel for ln in launches] == [k_in, "gemm", k_out], launches
    assert ("-DC_TRANS=1" in launches[1].build_options()) == variant.endswith("T")
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


@pytest.mark.parametrize("variant", ["F4T", "F2T"])
def test_winograd_transposed_fused(variant):
    """FusedConv's bias, residual and activation (the plain forms' output transforms) on a 14x14 map."""
    x_shape, cout, pads = (2, 16, 14, 14), 24, (1, 1, 1, 1)
    g = _geom(x_shape, (cout,), pads)
    for act, alpha, beta in (("Relu", 0.0, 0.0), ("Clip", -0.5, 0.7)):
        dev = _tuned(variant, dataclasses.astuple(g) + (act, True, True))
        x, w, b, z = rand(*x_shape), rand(cout, 16, 3, 3), rand(cout), rand(2, cout, 14, 14)
        conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(pads))
        pre = reference(conv, {"x": x}, {"w": w, "b": b}, 17)[0] + z
        y = np.maximum(pre, 0) if act == "Relu" else np.clip(pre, alpha, beta)
        node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", activation=act,
                                alpha=alpha, beta=beta, pads=list(pads))
        (got,), _ = run(node, {"x": x, "z": z}, {"w": w, "b": b}, expected=[y.astype(np.float32)], device=dev)
        np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-4 * float(np.abs(pre).max()))


def test_winograd_transposed_pieces(monkeypatch):
    """Images in pieces within the scratch cap: one GEMM launch per image at the smallest cap."""
    monkeypatch.setattr(wsmall, "_PIECE_CAP", 1)
    x_shape, cout, pads = (3, 16, 7, 7), 24, (1, 1, 1, 1)
    g = _geom(x_shape, (cout,), pads)
    dev = _tuned("F2T", dataclasses.astuple(g) + ("", True, False))
    x, w, b = rand(*x_shape), rand(cout, 16, 3, 3), rand(cout)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(pads))
    names = [ln.kernel for ln in lower(node, {"x": x}, {"w": w, "b": b}, {"y": ((3, cout, 7, 7), np.float32)},
                                       device=dev)]
    assert names == ["wt2_in", "gemm", "wino_out"] * 3, names
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


def test_winograd_few_tiles_choice():
    """Without a database entry (target="cpu" tiles): with 6 x 16 tiles the plain forms take few
    tiles where they measured faster (ResNet's 28x28 as F(4x4), 49 tiles; 14x14 as F(4x4), 16; 7x7
    as F(2x2), 16); with 12 x 32 tiles the choices stay as before (28x28 F(2x2), none below); the
    transposed forms never without an entry, and in the space only below one column tile."""
    cpu, on = Target(family="cpu"), PlanOptions(winograd=True)
    avx2, wide = GemmConfig(6, 8, 2, (1, 1, 1)), GemmConfig(12, 16, 2, (1, 1, 1))

    def pick(cfg, size, c, variants=None):
        geom = ConvGeometry(size, size, size, size, 3, 3, 1, 1, 1, 1, 1, 1, cin=c, cout=c)
        chosen = wino.winograd_variant(cpu, on, cfg, geom, variants)
        return None if chosen is None else chosen[0]
    assert [pick(avx2, s, c) for s, c in ((56, 64), (28, 128), (14, 256), (7, 512))] == [wino.F4, wino.F4, wino.F4,
                                                                                       wino.F2]
    assert [pick(wide, s, c) for s, c in ((56, 64), (28, 128), (14, 256), (7, 512))] == [wino.F4, wino.F2, None, None]
    assert pick(avx2, 14, 256, ("F2",)) is wino.F2  # 49 ragged tiles: the tuner's to measure
    assert pick(avx2, 5, 256, ("F2",)) is None       # 9 tiles: below one column tile
    target = Target(family="cpu", preferred_vector_width_float=8)
    space = lambda size, c: [p["variant"] for p in conv_mod.conv_space(  # noqa: E731
        target, (size, size, size, size, 3, 3, 1, 1, 1, 1, 1, 1, 1, c, c, 1, "Relu", True, False))
        if p["path"] == "winograd"]
    assert space(14, 256) == ["F4", "F2"] and space(7, 512) == ["F2", "F4T"]


def test_winograd_transposed_choice():
    """The transposed forms run on few tiles only (not ResNet's 56x56 maps), never without a
    database entry, and their tiles pad the tiles least (7 rows for 49 tiles)."""
    cfg = GemmConfig(6, 8, 2, (1, 1, 1))
    cpu, on = Target(family="cpu"), PlanOptions(winograd=True)

    def pick(size, c, variants=None):
        geom = ConvGeometry(size, size, size, size, 3, 3, 1, 1, 1, 1, 1, 1, cin=c, cout=c)
        return wino.winograd_variant(cpu, on, cfg, geom, variants)
    v, t = pick(14, 256, ("F2T",))
    assert v is wino.F2T and t.mr == 7 and t.nr == 16 and t.lsize == (7, 1, 1)
    v, t = pick(14, 256, ("F4T",))
    assert v is wino.F4T and t.mr == 6  # 16 tiles: 6 (18 rows) pads least of 7 and 6
    assert pick(56, 64, ("F4T",)) is None  # 196 tiles: the plain forms' business
    assert wino.transposed_tiles(GemmConfig(12, 16, 2, (1, 1, 1)), 16).mr == 8
