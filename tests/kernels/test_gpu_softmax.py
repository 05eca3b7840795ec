"""The GPU family's Softmax/LogSoftmax (kernels_cl/gpu_softmax.cl: a work-group per row, its max,
sum and write in one kernel) against onnx.reference and onnxruntime, on the test device under
the GPU family whatever CLGLOW_TARGET says. Ragged rows (not multiples of the work-group size),
single elements, long rows, both mappings (last axis: rows; an inner axis: cols) and both opset
meanings of `axis`. XGEMM_SMALL=1 (tests/oclgrind): the small shapes only.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import device_info, lower, run
    from .run_launches import reference
except ImportError:
    from harness import device_info, lower, run  # type: ignore
    from run_launches import reference  # type: ignore

RNG = np.random.default_rng(5)
SMALL = os.environ.get("XGEMM_SMALL") == "1"

CASES = [((1,), -1, "softmax_rows"), ((3, 7), -1, "softmax_rows"), ((2, 3, 37), -1, "softmax_rows"),
         ((4, 300), 1, "softmax_rows"), ((2, 7, 37), 1, "softmax_cols"), ((1, 9, 4, 8), 1, "softmax_cols"),
         ((2, 40, 16), 0, "softmax_cols"), ((5, 1, 3), 1, "softmax_cols")]
if not SMALL:
    CASES += [((2, 30001), -1, "softmax_rows"), ((1, 1000, 49), 1, "softmax_cols"), ((700, 5), -1, "softmax_rows")]


def gpu():
    """The test device's Target under the GPU family, told its local memory is dedicated (what a
    GPU and Oclgrind report; pocl's emulated one keeps the per-output kernels)."""
    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


def check(node, feeds: dict, opset: int, rtol: float, atol: float, oracle: str = "reference", expected=None) -> None:
    """The node under the GPU family against `oracle` (onnx.reference or onnxruntime) or `expected`."""
    if expected is None:
        expected = reference(node, feeds, {}, opset, oracle)
    (got,), (want,) = run(node, feeds, {}, opset, expected=expected, device=gpu())
    # LogSoftmax: an element near 0 carries log(sum)'s rounding at the row's scale
    np.testing.assert_allclose(got, want, rtol=rtol, atol=max(atol, rtol * float(np.abs(want).max())))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis,kernel", CASES, ids=[f"{s}-{a}" for s, a, _ in CASES])
def test_gpu_softmax(op, shape, axis, kernel):
    x = (RNG.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[0] = 80.0  # exp overflows without the max subtraction
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    launches = lower(node, {"x": x}, {}, {"y": (shape, np.float32)}, opset=13, device=gpu())
    assert [ln.kernel for ln in launches] == [kernel]
    # numpy in float64 (onnx.reference's float32 LogSoftmax is 2e-2 off on a row of 30001)
    x64 = x.astype(np.float64)
    want = x64 - x64.max(axis=axis, keepdims=True)
    s = np.exp(want).sum(axis=axis, keepdims=True)
    want = want - np.log(s) if op == "LogSoftmax" else np.exp(want) / s
    check(node, {"x": x}, opset=13, rtol=1e-5, atol=1e-6, expected=[want.astype(np.float32)])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_gpu_softmax_legacy_flattening(op):
    """opset < 13: the flattened tail from `axis` on is one row (onnxruntime as the oracle)."""
    x = (RNG.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    check(helper.make_node(op, ["x"], ["y"], axis=1), {"x": x}, opset=11, rtol=1e-5, atol=1e-6,
          oracle="onnxruntime")


def test_gpu_softmax_infinities():
    """A row with -inf elements gives them 0; a +inf max as numpy does (NaN in that row)."""
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    x[0, 3] = -np.inf
    x[1, :] = -1e30
    x[1, 7] = 0.0
    want = np.exp(x - x.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    check(helper.make_node("Softmax", ["x"], ["y"], axis=1), {"x": x}, opset=13, rtol=1e-5, atol=1e-6,
          expected=[want.astype(np.float32)])
