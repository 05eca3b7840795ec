"""The "dwconv" tunable family (lower/conv_depthwise.py): dwconv_rows' output rows per work-item
(DW_RT) per depthwise conv shape. Every point of its space computes the conv of numpy's loops on
small shapes (the geometries dwconv_rows splits on: 3x3/5x5/7x7, stride 1/2, dilation, edge
tiles, several images), a tuning-database hit sets DW_RT and an invalid stored point is ignored."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:
    from .harness import device_info, lower
    from .run_launches import execute
except ImportError:  # run as a plain module
    from harness import device_info, lower  # type: ignore
    from run_launches import execute  # type: ignore

from clglow.lower.common import ConvGeometry
from clglow.lower.conv_depthwise import ROWS_DEFAULT, ROWS_SPACE
from clglow.lower.tunable import FAMILIES, key_str

RNG = np.random.default_rng(21)

# (images, channels, H, W, K, stride, pad, dilation)
SHAPES = [(1, 3, 14, 14, 3, 1, 1, 1), (2, 2, 23, 37, 5, 2, 2, 1), (1, 2, 9, 20, 7, 1, 3, 1),
          (1, 2, 12, 19, 3, 1, 2, 2), (1, 4, 7, 7, 5, 1, 2, 1)]


def _geom(n, c, h, w, k, s, p, d) -> ConvGeometry:
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    return ConvGeometry(h=h, w=w, oh=oh, ow=ow, kh=k, kw=k, sh=s, sw=s, ph=p, pw=p, dh=d, dw=d, n_img=n, cin=c,
                        cout=c, groups=c)


def _numpy_dw(x: np.ndarray, wt: np.ndarray, b: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """Relu(depthwise conv + bias) by loops over the taps (float64)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (g.ph, g.ph + g.sh * g.oh), (g.pw, g.pw + g.sw * g.ow)))
    y = np.zeros((g.n_img, g.cout, g.oh, g.ow))
    for i in range(g.kh):
        for j in range(g.kw):
            win = xp[:, :, i * g.dh: i * g.dh + g.sh * g.oh: g.sh, j * g.dw: j * g.dw + g.sw * g.ow: g.sw]
            y += win[:, :, :g.oh, :g.ow] * wt[None, :, 0, i, j, None, None]
    return np.maximum(y + b[None, :, None, None], 0)


@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_every_point_computes_the_conv(shape):
    """Each point's benchmark launch (what the search times) against numpy."""
    g = _geom(*shape)
    target, key = device_info().with_family("cpu"), dataclasses.astuple(g)
    family = FAMILIES["dwconv"]
    space = family.space(target, key)
    assert [p["rows"] for p in space] == list(ROWS_SPACE) and space[0] == family.default(target, key)
    x = RNG.standard_normal((g.n_img, g.cin, g.h, g.w)).astype(np.float32)
    wt = RNG.standard_normal((g.cout, 1, g.kh, g.kw)).astype(np.float32)
    b = RNG.standard_normal(g.cout).astype(np.float32)
    want = _numpy_dw(x, wt, b, g)
    for p in space:
        launch, sizes = family.bench(target, key, p)
        assert launch.kernel == "dwconv_rows" and launch.defines["DW_RT"] == p["rows"]
        got = execute([launch], {"X": x, "W": wt, "B": b}, {"Y": np.empty(sizes["Y"] // 4, np.float32)})["Y"]
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4, err_msg=str(p))


def test_no_points_where_dwconv_rows_does_not_run():
    """A 4x4 kernel (dwconv, not dwconv_rows) has no space to search."""
    g = dataclasses.replace(_geom(1, 2, 10, 10, 3, 1, 1, 1), kh=4, kw=4, oh=9, ow=9)
    assert FAMILIES["dwconv"].space(device_info().with_family("cpu"), dataclasses.astuple(g)) == []


@pytest.mark.parametrize("stored,want", [(16, 16), (5, ROWS_DEFAULT)])
def test_database_hit_sets_the_rows(stored, want):
    """A stored point of the space is used; one outside it (a stale entry) falls back to the default."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])
    x, w = RNG.standard_normal((1, 4, 20, 20)).astype(np.float32), RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
    key = dataclasses.astuple(_geom(1, 4, 20, 20, 3, 1, 1, 1))
    base = device_info().with_family("cpu")
    target = dataclasses.replace(base, tuned=(("dwconv", key_str(key), (("rows", stored),)),))
    launches = lower(node, {"x": x}, {"w": w}, {"y": ((1, 4, 20, 20), np.float32)}, device=target)
    assert [(ln.kernel, ln.defines["DW_RT"]) for ln in launches] == [("dwconv_rows", want)]
