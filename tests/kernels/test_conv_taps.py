"""Dilated convs whose taps read only padding (lower/conv_taps.py): the pruned conv matches
onnx.reference, and the pruning is exact against a brute-force reading of the taps."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:
    from .harness import check, lower
    from .run_launches import reference
except ImportError:  # pragma: no cover - run as a plain directory
    from harness import check, lower  # type: ignore
    from run_launches import reference  # type: ignore

from clglow.lower.common import ConvGeometry
from clglow.lower.conv_taps import live_taps, pruned_geometry
from clglow.target import Target

RNG = np.random.default_rng(7)
CPU = Target(family="cpu")  # the CPU family's path choices, whatever device runs them


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _brute_live(n, o, k, s, p, d):
    live = [i for i in range(k) if any(0 <= y * s + i * d - p < n for y in range(o))]
    return (live[0], live[-1]) if live else None


@pytest.mark.parametrize("n,k,s,p,d", list(itertools.product((1, 5, 20), (1, 3, 5), (1, 2), (0, 3, 12, 24),
                                                                 (1, 2, 12, 24))))
def test_live_taps_brute_force(n, k, s, p, d):
    span = n + 2 * p - ((k - 1) * d + 1)
    if span < 0:
        pytest.skip("empty output")
    o = span // s + 1
    assert live_taps(n, o, k, s, p, d) == _brute_live(n, o, k, s, p, d)


@pytest.mark.parametrize("n,k,s,p,d", list(itertools.product((1, 4, 9), (3, 5), (1, 2, 3), (0, 2, 7), (3, 6))))
def test_pruned_conv_is_an_onnx_conv(n, k, s, p, d):
    """A pruned geometry has begin pads >= 0 and an end pad that gives the same output size by
    ONNX's formula (the conv family's one-node benchmark builds the pruned conv as a Conv)."""
    span = n + 2 * p - ((k - 1) * d + 1)
    if span < 0:
        pytest.skip("empty output")
    o = span // s + 1
    out = pruned_geometry(ConvGeometry(n, n, o, o, k, k, sh=s, sw=s, ph=p, pw=p, dh=d, dw=d))
    if out is None:
        return
    g = out[0]
    end = max(0, (o - 1) * s + (g.kh - 1) * g.dh + 1 - n - g.ph)
    assert g.ph >= 0 and (n + g.ph + end - ((g.kh - 1) * g.dh + 1)) // s + 1 == o


def test_aspp_rates_become_pointwise():
    """DeepLabV3's ASPP on a 20x20 map: rates 24 and 36 keep the centre tap only (a 1x1),
    rate 12 keeps all nine (each partly inside)."""
    for rate in (24, 36):
        g = ConvGeometry(20, 20, 20, 20, 3, 3, ph=rate, pw=rate, dh=rate, dw=rate, cin=8, cout=4)
        pruned, taps = pruned_geometry(g)
        assert taps == (1, 1, 1, 1) and pruned.pointwise
    assert pruned_geometry(ConvGeometry(20, 20, 20, 20, 3, 3, ph=12, pw=12, dh=12, dw=12)) is None


def conv_case(x_shape, w_shape, fused=None, device=None, **attrs):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    consts = {"w": w, "b": b}
    if fused is None:
        check(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs), {"x": x}, consts, device=device)
        return
    y = reference(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs), {"x": x}, consts, 17)[0]
    z = rand(*y.shape)
    expected = np.maximum(y + z, 0).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", activation=fused, **attrs)
    check(node, {"x": x, "z": z}, consts, expected=[expected], device=device)


CASES = [
    # (x shape, w shape, attrs): pads below, equal to and above the dilation; maps smaller than it
    ((1, 6, 9, 9), (5, 6, 3, 3), dict(dilations=[12, 12], pads=[12, 12, 12, 12])),   # pad = rate > map
    ((1, 6, 9, 9), (5, 6, 3, 3), dict(dilations=[10, 10], pads=[12, 12, 12, 12])),   # pad > rate > map
    ((1, 6, 9, 9), (5, 6, 3, 3), dict(dilations=[12, 12], pads=[10, 10, 10, 10])),   # pad < rate: cropped
    ((1, 6, 9, 7), (5, 6, 3, 3), dict(dilations=[12, 3], pads=[12, 3, 12, 3])),      # rows pruned, columns not
    ((2, 4, 8, 8), (3, 4, 5, 5), dict(dilations=[6, 6], pads=[12, 12, 12, 12])),     # 5x5 -> 3x3 of rate 6
    ((1, 4, 8, 8), (3, 4, 3, 3), dict(dilations=[9, 9], pads=[9, 9, 9, 9], strides=[2, 2])),  # strided
    ((1, 3, 6, 6), (4, 3, 3, 3), dict(dilations=[4, 4], pads=[4, 4, 4, 4])),          # rate 4 on 6: partly inside
    ((1, 5, 7, 7), (5, 1, 3, 3), dict(dilations=[8, 8], pads=[8, 8, 8, 8], group=5)),  # depthwise -> 1x1 depthwise
    ((1, 4, 20, 20), (4, 1, 5, 5), dict(dilations=[2, 2], pads=[4, 4, 4, 4], group=4)),  # DeepLab's dilated dw
    ((1, 3, 1), (4, 3, 3), dict(pads=[1, 1])),                       # 1-D, size 1 (3-D weights): 1x1
    ((2, 3, 5), (4, 3, 3), dict(dilations=[6], pads=[6, 6])),        # 1-D dilated past the map
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_dilated_conv(x_shape, w_shape, attrs):
    conv_case(x_shape, w_shape, **attrs)


@pytest.mark.parametrize("case", [0, 3, 7])
def test_dilated_fused_residual(case):
    x_shape, w_shape, attrs = CASES[case]
    conv_case(x_shape, w_shape, fused="Relu", **attrs)


@pytest.mark.parametrize("case", [0, 4, 7])
def test_dilated_conv_gpu_family(case):
    """The GPU family's paths (xgemm reads the weights as input 1: the sliced constant)."""
    x_shape, w_shape, attrs = CASES[case]
    conv_case(x_shape, w_shape, device=Target(family="gpu"), **attrs)


def test_rate_24_reads_x_in_place():
    """The pruned ASPP conv takes the pointwise path: one GEMM launch, no im2col."""
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=[24, 24], pads=[24, 24, 24, 24])
    launches = lower(node, {"x": rand(1, 16, 20, 20)}, {"w": rand(32, 16, 3, 3), "b": rand(32)},
                     {"y": ((1, 32, 20, 20), np.float32)}, device=CPU)
    assert [la.kernel for la in launches] == ["gemm"], [la.kernel for la in launches]


# --- the regions path (lower/conv_regions.py): border outputs with fewer live taps -----------------
REGION_CASES = [
    ((1, 6, 20, 20), (5, 6, 3, 3), dict(dilations=[12, 12], pads=[12, 12, 12, 12])),  # ASPP rate 12 (3 x 3 regions)
    ((2, 5, 9, 11), (7, 5, 3, 3), dict(dilations=[6, 5], pads=[6, 5, 6, 5])),         # two images, ragged regions
    ((1, 4, 13, 9), (3, 4, 3, 3), dict(dilations=[8, 1], pads=[8, 1, 8, 1])),         # regions along rows only
    ((1, 3, 16, 16), (4, 3, 5, 5), dict(dilations=[5, 5], pads=[10, 10, 10, 10])),    # 5x5: 5 segments an axis
    ((1, 3, 15, 15), (4, 3, 3, 3), dict(dilations=[7, 7], pads=[7, 7, 7, 7], strides=[2, 2])),  # strided
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", REGION_CASES, ids=[str(i) for i in range(len(REGION_CASES))])
def test_regions_path(x_shape, w_shape, attrs):
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    y = reference(node, {"x": x}, {"w": w, "b": b}, 17)[0]
    launches = lower(node, {"x": x}, {"w": w, "b": b}, {"y": (y.shape, np.float32)}, device=CPU)
    assert launches[-1].kernel == "scatter_pixels", [la.kernel for la in launches]
    check(node, {"x": x}, {"w": w, "b": b}, device=CPU)


def test_regions_fused_activation():
    x, w, b = rand(1, 6, 20, 20), rand(5, 6, 3, 3), rand(5)
    attrs = dict(dilations=[12, 12], pads=[12, 12, 12, 12])
    y = reference(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs), {"x": x}, {"w": w, "b": b}, 17)[0]
    node = helper.make_node("FusedConv", ["x", "w", "b", ""], ["y"], domain="clglow", activation="Relu", **attrs)
    check(node, {"x": x}, {"w": w, "b": b}, expected=[np.maximum(y, 0)], device=CPU)


def test_regions_work():
    """ASPP rate 12 at 20x20: 9 regions doing 36% of im2col's multiply-adds; a 3x3 pad-1 conv on
    a 56x56 map keeps im2col's single pass (the borders save too little)."""
    from clglow.lower.conv_regions import conv_regions
    g = ConvGeometry(20, 20, 20, 20, 3, 3, ph=12, pw=12, dh=12, dw=12, cin=8, cout=4)
    regs = conv_regions(g)
    assert len(regs) == 9
    assert sum(r.npix * r.taps for r in regs) / (g.npix * 9) == pytest.approx(0.36)
    assert sum(r.npix for r in regs) == g.npix
