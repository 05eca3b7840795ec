"""GridSample kernel vs onnx.reference: modes, padding modes, align_corners, 2-D and 3-D."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(13)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, pad, align):
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = (RNG.random((1, 3, 6, 2)) * 2.6 - 1.3).astype(np.float32)
    check(helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=align),
          {"x": x, "g": grid}, opset=20, rtol=1e-4, atol=1e-5)


def test_grid_sample_3d():
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = (RNG.random((1, 2, 3, 2, 3)) * 2.2 - 1.1).astype(np.float32)
    check(helper.make_node("GridSample", ["x", "g"], ["y"], mode="linear"), {"x": x, "g": grid}, opset=20,
          rtol=1e-4, atol=1e-5)
