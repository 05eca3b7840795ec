"""Reductions over contiguous runs (reduce_rows: the float32 sums summed in 16 lanes) against
onnx.reference, with the kernel choice asserted; other layouts take the general kernel. The
kernel-choice tests lower for the CPU family (whose rows these are) whatever CLGLOW_TARGET says;
the GPU family's work-group reductions are tests/kernels/test_gpu_reduce.py's."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower
except ImportError:
    from harness import check, device_info, lower  # type: ignore

RNG = np.random.default_rng(7)


def cpu():
    """The test device's Target under the CPU family (reduce.cl's rows)."""
    return device_info().with_family("cpu")

CASES = [
    ("ReduceMean", (3, 5, 70), [-1]),           # a decomposed LayerNorm's mean: 4 lanes of 16 + 6
    ("ReduceSum", (2, 3, 9, 9), [2, 3]),        # a spatial sum: the trailing axes merge into one run
    ("ReduceSumSquare", (4, 33), [1]),
    ("ReduceL2", (2, 7, 40), [2]),
    ("ReduceLogSum", (3, 12), [1]),             # shorter than one lane vector
    ("ReduceMax", (3, 5, 70), [-1]),
    ("ReduceMin", (2, 3, 9, 9), [2, 3]),
]


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_rows_nan_propagates(op):
    """A NaN in a row (in the vector part or the tail) makes that row's max/min NaN."""
    x = RNG.uniform(0.1, 2.0, (4, 40)).astype(np.float32)
    x[1, 5] = np.nan
    x[2, 37] = np.nan
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    check(node, {"x": x}, {"axes": np.array([1], np.int64)}, opset=18)


@pytest.mark.parametrize("op,shape,axes", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_rows(op, shape, axes, keepdims):
    x = RNG.uniform(0.1, 2.0, shape).astype(np.float32)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    consts = {"axes": np.array(axes, np.int64)}
    red = [a % len(shape) for a in axes]
    out = tuple(1 if i in red else d for i, d in enumerate(shape) if keepdims or i not in red)
    kernels = [l.kernel for l in lower(node, {"x": x}, consts, {"y": (out, np.float32)}, opset=18, device=cpu())]
    assert kernels == ["reduce_rows"], kernels
    check(node, {"x": x}, consts, opset=18, device=cpu())


def test_reduce_strided_run_takes_the_general_kernel():
    x = RNG.uniform(0.1, 2.0, (4, 30, 5)).astype(np.float32)
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
    consts = {"axes": np.array([1], np.int64)}
    kernels = [l.kernel for l in lower(node, {"x": x}, consts, {"y": ((4, 5), np.float32)}, opset=18,
                                       device=cpu())]
    assert kernels == ["reduce"], kernels
    check(node, {"x": x}, consts, opset=18, device=cpu())


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("select_last", [0, 1])
def test_arg_over_inner_axis(op, select_last):
    """float32 ArgMax/ArgMin over an inner axis (37 = 2 x 16 + 5 adjacent outputs): vectors per
    16 outputs, ties (values rounded to a few levels) resolved first or last as asked."""
    x = np.round(RNG.uniform(0, 3, (2, 9, 37))).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0, select_last_index=select_last)
    kernels = [l.kernel for l in lower(node, {"x": x}, {}, {"y": ((2, 37), np.int64)}, opset=13, device=cpu())]
    assert kernels == ["argreduce_cols"], kernels
    check(node, {"x": x}, opset=13, device=cpu())


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape,axes", [((3, 5, 70), [-1]), ((4, 6, 7), [0, 2]), ((2, 0, 3), [1])])
def test_reduce_bool(op, shape, axes):
    """Over bool (any / all, on the bytes): vs onnx.reference, the empty reduction included."""
    x = RNG.random(shape) > (0.97 if op == "ReduceMax" else 0.03)
    check(helper.make_node(op, ["x", "a"], ["y"], keepdims=1), {"x": x}, {"a": np.array(axes, np.int64)}, opset=18)
