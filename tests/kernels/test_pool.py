"""Pooling kernels vs an oracle: pads (asymmetric), strides, dilations, ceil_mode, count_include_pad, auto_pad.

onnx.reference's pooling mishandles some combinations (2-D pads order, ceil_mode windows), so
onnxruntime is the oracle where noted; both are independent of clglow.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(2)

CASES = [
    ((1, 2, 7, 9), dict(kernel_shape=[3, 3])),
    ((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 3, 7, 9), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 2, 1])),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((1, 3, 20, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # ResNet stem rows
    ((1, 2, 9, 71), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=1)),
    ((1, 2, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 9, 10), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 2, 9, 10), dict(kernel_shape=[2, 4], auto_pad="SAME_LOWER", strides=[2, 3])),
    ((1, 2, 9, 10), dict(kernel_shape=[3, 3], auto_pad="VALID", strides=[2, 2])),
    ((2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 2])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[0, 1, 0, 1, 0, 1])),
    # the 2-D fast path (max and average): several 16-output blocks per row, edges inside vector chunks
    ((1, 3, 21, 75), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 2, 9, 50), dict(kernel_shape=[3, 2], strides=[1, 1], pads=[1, 0, 1, 1])),
    ((1, 2, 8, 67), dict(kernel_shape=[2, 3], strides=[3, 2], ceil_mode=1)),
    ((1, 2, 5, 33), dict(kernel_shape=[5, 5], strides=[2, 2], pads=[4, 4, 4, 4])),
    ((1, 2, 6, 300), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # rows too wide: general kernel
    ((1, 2, 7, 256), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),  # widest fast row
    ((1, 2, 40), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 20, 37), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),           # YOLO's SPPF pool, stride 1
    ((1, 2, 9, 35), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),  # a 2x2/2 with a ragged end
]


@pytest.mark.parametrize("op,count_include_pad", [("MaxPool", 0), ("AveragePool", 0), ("AveragePool", 1)])
@pytest.mark.parametrize("shape,attrs", CASES, ids=lambda v: str(v))
def test_pool(op, shape, attrs, count_include_pad):
    attrs = dict(attrs)
    if op == "AveragePool":
        attrs["count_include_pad"] = count_include_pad
    x = RNG.standard_normal(shape).astype(np.float32)
    check(helper.make_node(op, ["x"], ["y"], **attrs), {"x": x}, opset=17, oracle="onnxruntime")


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], dilations=[2, 2]),
                                   dict(kernel_shape=[2, 3], dilations=[2, 1], strides=[2, 1], pads=[1, 2, 1, 0]),
                                   dict(kernel_shape=[3, 3], dilations=[2, 2], ceil_mode=1, strides=[2, 2])])
def test_maxpool_dilations(attrs):
    x = RNG.standard_normal((1, 2, 9, 10)).astype(np.float32)
    check(helper.make_node("MaxPool", ["x"], ["y"], **attrs), {"x": x}, opset=12, oracle="onnxruntime")
    check(helper.make_node("MaxPool", ["x"], ["y"], **attrs), {"x": x}, opset=12)


def test_maxpool_reference_oracle():
    x = RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)
    check(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
          {"x": x}, opset=12)
    check(helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2]), {"x": x}, opset=11)


def test_maxpool_indices():
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    check(helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]),
          {"x": x}, opset=12, oracle="onnxruntime")


@pytest.mark.parametrize("shape,attrs", [((2, 3, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])),
                                         ((1, 2, 6, 5), dict(kernel_shape=[2, 2], strides=[1, 2])),
                                         ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2]))],
                         ids=["2d_pads", "2d", "3d"])
def test_maxpool_indices_column_major(shape, attrs):
    """storage_order=1: each argmax's spatial offset counted column-major (d + h*D + w*D*H, onnx's
    reference; onnxruntime agrees on 2-D), the plane offset row-major."""
    x = RNG.standard_normal(shape).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=1, **attrs)
    check(node, {"x": x}, opset=12)
    if len(shape) == 4:
        check(node, {"x": x}, opset=12, oracle="onnxruntime")


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape,attrs", [((1, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                         ((2, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2])),
                                         ((1, 2, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 2]))],
                         ids=["2d", "3d", "1d"])
def test_maxpool_8bit(shape, attrs, dtype):
    """uint8 / int8 MaxPool (opset 12): the type's extremes included, padding never taken."""
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    x.reshape(-1)[:3] = [info.min, info.max, info.min]
    check(helper.make_node("MaxPool", ["x"], ["y"], **attrs), {"x": x}, opset=12, oracle="onnxruntime")


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 5, 9), (3, 2, 2, 3, 4), (1, 1, 1, 1), (2, 4, 28, 28)])
def test_global_pool(op, shape):
    # onnx.reference gets the output rank wrong for non-4-D GlobalMaxPool
    check(helper.make_node(op, ["x"], ["y"]), {"x": RNG.standard_normal(shape).astype(np.float32)},
          oracle="onnxruntime")
