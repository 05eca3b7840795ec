"""TopK kernel vs onnx.reference: axis, largest/smallest, ties (lower index first), dtypes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(37)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_topk(axis, largest, dtype):
    x = RNG.integers(-5, 5, (4, 5, 6)).astype(dtype)  # many ties
    check(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest), {"x": x},
          {"k": np.array([3], np.int64)}, opset=11)


@pytest.mark.parametrize("k", [1, 16, 17, 40])
def test_topk_k_around_the_one_pass_limit(k):
    """k <= 16 runs one insertion pass over the row, larger k one pass per output; ties resolved
    to the lower index either way, k = the whole row included."""
    x = RNG.integers(-9, 9, (3, 40)).astype(np.float32)
    check(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1), {"x": x}, {"k": np.array([k], np.int64)},
          opset=11)


@pytest.mark.parametrize("shape,axis,k", [((2, 3234), 1, 300), ((700, 3), 0, 120), ((5, 64, 7), 1, 64)])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_topk_radix_select(shape, axis, k, largest, dtype):
    """k > 16: radix select per row (kernels_cl/topk.cl topk_radix), with heavy ties (the order
    among them: lower index first), rows strided over an inner axis, k = the whole axis."""
    x = RNG.integers(-20, 20, shape).astype(dtype)
    check(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest), {"x": x},
          {"k": np.array([k], np.int64)}, opset=11)


def test_topk_radix_float_edges():
    """Signed zeros tie (equal values), negative and positive values, infinities."""
    x = np.array([[0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 0.0, -0.0, 3.0, -3.0] * 4], np.float32)
    for largest in (0, 1):
        check(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest), {"x": x},
              {"k": np.array([25], np.int64)}, opset=11)
