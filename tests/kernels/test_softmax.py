"""Softmax/LogSoftmax vs onnx.reference: both axis semantics (opset < 13 flattening, 13+ per axis)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("shape,axis", [((3, 7), None), ((2, 3, 5), None), ((2, 3, 5), 0), ((2, 3, 5), 1),
                                        ((2, 3, 4, 5), -2), ((2, 3, 4, 5), -1), ((1, 1000), 1), ((9,), 0),
                                        ((5, 128), -1), ((2, 3, 37), -1),
                                        ((2, 7, 37), 1), ((1, 9, 4, 8), 1), ((2, 40, 16), 0)], ids=str)
def test_softmax(op, opset, shape, axis):
    x = (RNG.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[0] = 80.0  # exp overflow without the max subtraction
    attrs = {} if axis is None else {"axis": axis}
    # onnx.reference applies the opset-13 meaning to every opset; onnxruntime flattens as the old spec says
    oracle = "onnxruntime" if opset < 13 else "reference"
    check(helper.make_node(op, ["x"], ["y"], **attrs), {"x": x}, opset=opset, rtol=1e-5, atol=1e-6, oracle=oracle)
