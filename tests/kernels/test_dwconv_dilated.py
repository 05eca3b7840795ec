"""Dilated depthwise convs on dwconv.cl's row kernel (dwconv_rows with DW_D) vs onnx.reference:
kernels 3/5/7, dilations 2 and 3, strides 1 and 2, rows narrower and wider than a 16-column
tile, pads below, equal to and above the dilation, a depth multiplier, the fused epilogue."""
from __future__ import annotations

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

from clglow.target import Target

RNG = np.random.default_rng(11)
CPU = Target(family="cpu")  # no tuning database entries: the ranked table's path


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = [
    # (channels, multiplier, H, W, K, stride, dilation, pad)
    (4, 1, 20, 20, 5, 1, 2, 4),    # DeepLabV3's last blocks (pad = 2 * dilation)
    (3, 1, 11, 37, 3, 1, 2, 2),    # pad = dilation, a ragged last tile
    (3, 1, 9, 9, 3, 1, 3, 1),      # pad < dilation, a row narrower than 16
    (2, 1, 12, 40, 5, 1, 2, 6),    # pad > dilation
    (2, 2, 10, 30, 3, 1, 2, 2),    # multiplier 2
    (2, 1, 15, 50, 3, 2, 2, 2),    # stride 2
    (2, 1, 13, 70, 5, 2, 3, 5),    # stride 2, dilation 3
    (2, 1, 17, 33, 7, 1, 2, 6),    # 7x7
    (2, 1, 30, 64, 7, 2, 2, 6),    # 7x7 stride 2: a segment of 44 columns
]


def _node(k, s, d, p, groups):
    return helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, kernel_shape=[k, k], strides=[s, s],
                            dilations=[d, d], pads=[p, p, p, p])


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_dilated_depthwise(case):
    c, mult, h, w, k, s, d, p = case
    x, wt, b = rand(2, c, h, w), rand(c * mult, 1, k, k), rand(c * mult)
    node = _node(k, s, d, p, c)
    check(node, {"x": x}, {"w": wt, "b": b})
    y = reference(node, {"x": x}, {"w": wt, "b": b}, 17)[0]
    launches = lower(node, {"x": x}, {"w": wt, "b": b}, {"y": (y.shape, np.float32)}, device=CPU)
    assert [la.kernel for la in launches] == ["dwconv_rows"]


def test_dilated_depthwise_fused():
    """Bias, residual and activation in the row kernel's epilogue, dilation 2."""
    x, wt, b = rand(1, 6, 20, 20), rand(6, 1, 5, 5), rand(6)
    conv = _node(5, 1, 2, 4, 6)
    y = reference(conv, {"x": x}, {"w": wt, "b": b}, 17)[0]
    z = rand(*y.shape)
    expected = np.maximum(y + z, 0).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", activation="Relu", group=6,
                            kernel_shape=[5, 5], dilations=[2, 2], pads=[4, 4, 4, 4])
    check(node, {"x": x, "z": z}, {"w": wt, "b": b}, expected=[expected])
