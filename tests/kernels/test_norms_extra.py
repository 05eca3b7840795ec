"""RMSNormalization, LayerNormalization statistics outputs, GroupNormalization, LpNormalization vs onnx.reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(11)


def r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rmsnorm(axis):
    x = r(2, 3, 4)
    check(helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis),
          {"x": x, "s": r(*x.shape[axis:])}, opset=23, rtol=1e-4, atol=1e-5)


def test_layernorm_stats():
    check(helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "i"], axis=1),
          {"x": r(2, 3, 4), "s": r(3, 4), "b": r(3, 4)}, opset=17, rtol=1e-4, atol=1e-5)


def test_groupnorm():
    check(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2),
          {"x": r(2, 4, 3, 3), "s": r(4), "b": r(4)}, opset=21, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 1])  # onnx.reference reads axis=0 as the default -1
def test_lpnorm(p, axis):
    x = np.abs(r(3, 4, 5))  # onnx.reference's L1 norm sums x, not |x|
    check(helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis), {"x": x}, opset=13,
          rtol=1e-5, atol=1e-6)
