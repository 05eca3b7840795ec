"""resize_2d_win: tiles whose column taps lie within 16 input columns load each input row once,
shuffle it per tap and keep the row's interpolation for the output rows below that read it
(DeepLabV3's 16x bilinear upsampling); the other tiles of the same launch gather. Against onnx.reference, with the define checked, on the coordinate modes and
interpolation modes that tabulate taps differently, and where the window must not be used."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:
    from .harness import check, lower
except ImportError:  # run as a plain module
    from harness import check, lower  # type: ignore

from clglow.lower.resize import _tile_bases

RNG = np.random.default_rng(3)


def _node(mode: str, ctm: str, **kw):
    return helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode=mode, coordinate_transformation_mode=ctm, **kw)


@pytest.mark.parametrize("shape,out,mode,ctm,window", [
    ((1, 3, 20, 20), (160, 160), "linear", "half_pixel", True),    # DeepLabV3's head upsampling (8x here)
    ((2, 2, 17, 21), (50, 77), "linear", "align_corners", True),   # ragged last tile, two images
    ((1, 2, 16, 18), (40, 45), "cubic", "half_pixel", True),       # four column taps
    ((1, 2, 18, 24), (54, 72), "nearest", "asymmetric", True),     # 3x (2x takes the RS_DUP2 shuffle)
    ((1, 2, 30, 40), (12, 16), "linear", "half_pixel", False),     # downscaling: the taps span more than 16
    ((1, 2, 6, 9), (24, 36), "linear", "half_pixel", False),       # rows narrower than 16
])
def test_window_path(shape, out, mode, ctm, window):
    x = RNG.standard_normal(shape).astype(np.float32)
    sz = np.array(list(shape[:2]) + list(out), np.int64)
    node = _node(mode, ctm)
    launches = lower(node, {"x": x}, {"sz": sz}, {"y": (tuple(sz), np.float32)})
    assert [ln.kernel for ln in launches] == ["resize_2d_win" if window else "resize_2d"]
    check(node, {"x": x}, {"sz": sz}, opset=19, rtol=1e-4)


def test_tile_bases():
    """The first column of a 16-column window holding a tile's taps, within the row; -1 otherwise."""
    ix = np.stack([np.arange(40) // 2, np.minimum(np.arange(40) // 2 + 1, 19)], 1)  # 2x linear-like, IW 20
    assert _tile_bases(ix, 20).tolist() == [0, 4, 4]  # the last tiles' windows end at the row's end
    assert _tile_bases(np.arange(48)[:, None] * 2, 96).tolist() == [-1, -1, -1]  # 2x downscale: 31 columns
    assert _tile_bases(np.zeros((16, 1), np.int32), 8).tolist() == [-1]  # a row narrower than 16
