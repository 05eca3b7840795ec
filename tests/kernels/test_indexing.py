"""GatherElements, ScatterElements, GatherND, ScatterND kernels vs onnx.reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_gather_elements(axis, dtype):
    x = (RNG.standard_normal((3, 4, 5)) * 10).astype(dtype)
    shape = [3, 4, 5]
    shape[axis] = 2
    idx = RNG.integers(-x.shape[axis], x.shape[axis], shape).astype(np.int64)
    check(helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis), {"x": x, "i": idx}, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([[1, 0, 3], [2, 2, 0]], np.int64) if reduction != "none" else np.array([[1, 0, 3], [2, 3, 0]])
    upd = RNG.standard_normal(idx.shape).astype(np.float32)
    check(helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=reduction),
          {"x": x, "i": idx.astype(np.int64), "u": upd}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd(reduction):
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.array([[0], [2], [0]] if reduction != "none" else [[0], [2]], np.int64)
    upd = RNG.standard_normal((len(idx), 3, 2)).astype(np.float32)
    check(helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction), {"x": x, "i": idx, "u": upd},
          opset=18)


@pytest.mark.parametrize("batch_dims,ishape", [(0, (2, 2)), (0, (3, 1)), (1, (2, 1))])
def test_gather_nd(batch_dims, ishape):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    idx = RNG.integers(0, 2, ishape).astype(np.int64)
    check(helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims), {"x": x, "i": idx}, opset=13)
