"""LpPool kernel vs onnx.reference: p, pads, auto_pad, strides, dilations, 1-3 spatial dims."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(19)


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 7), dict(kernel_shape=[3], p=2, strides=[2])),
    ((1, 2, 6, 7), dict(kernel_shape=[3, 2], p=3, pads=[1, 0, 1, 1])),
    ((1, 2, 6, 7), dict(kernel_shape=[3, 3], p=1, auto_pad="SAME_UPPER")),
    ((1, 2, 6, 7), dict(kernel_shape=[2, 2], p=2, auto_pad="SAME_LOWER", strides=[2, 2])),
    ((1, 1, 7, 7), dict(kernel_shape=[2, 2], p=2, dilations=[2, 2], strides=[1, 2])),
    ((1, 2, 4, 4, 4), dict(kernel_shape=[2, 2, 2], p=2))], ids=str)
def test_lppool(shape, attrs):
    check(helper.make_node("LpPool", ["x"], ["y"], **attrs), {"x": RNG.standard_normal(shape).astype(np.float32)},
          opset=18, rtol=1e-4, atol=1e-5)
