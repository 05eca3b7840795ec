"""The GPU family's work-group reductions (kernels_cl/gpu_reduce.cl, lower/gpu_reduce.py) against
onnx.reference and numpy, on the test device under the GPU family whatever CLGLOW_TARGET says.

Shapes are ragged on purpose: runs and column blocks that are not multiples of the work-group
size, a single element, long rows (several strides of the group), outputs past the last full
group, both mappings (rows: the reduced run contiguous; cols: the kept inner dimension
contiguous) with and without the index table, and empty reduced sets.
SMALL=1 (tests/oclgrind): only the small shapes (a simulator runs every work-item).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower, run
except ImportError:
    from harness import check, device_info, lower, run  # type: ignore

from clglow.lower import gpu_reduce

RNG = np.random.default_rng(11)
SMALL = os.environ.get("XGEMM_SMALL") == "1"


def gpu():
    """The test device's Target under the GPU family, told its local memory is dedicated (what a
    GPU and Oclgrind report; pocl's emulated one keeps the per-output kernels)."""
    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


# (shape, axes, kernel): every mapping; the large ones are left out on a simulator.
SHAPES = [
    ((1,), [0], "wg_reduce"),                     # one element
    ((3, 37), [1], "wg_reduce"),                  # short rows: several outputs per group
    ((5, 300), [-1], "wg_reduce"),                # a run longer than the group
    ((2, 3, 9, 9), [2, 3], "wg_reduce"),          # trailing axes merge into one run
    ((3, 4, 5, 6), [0, 2, 3], "wg_reduce"),       # the index table, innermost reduced
    ((4, 30, 5), [1], "wg_reduce_cols"),          # a middle axis: 5-wide columns
    ((33, 70), [0], "wg_reduce_cols"),            # the leading axis: columns past one block
    ((3, 4, 5, 6), [0, 2], "wg_reduce_cols"),     # the index table, inner kept
    ((2, 1, 3), [1], "wg_reduce_cols"),           # a unit axis: one element per output
]
if not SMALL:
    SHAPES += [((2, 70001), [1], "wg_reduce"), ((3, 2000, 65), [1], "wg_reduce_cols"),
               ((1100, 3), [1], "wg_reduce"), ((4099,), [0], "wg_reduce")]
OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _node(op: str, keepdims: int = 1):
    return helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)


def _data(op: str, shape: tuple) -> np.ndarray:
    if op == "ReduceProd":  # a product stays finite near 1
        return RNG.uniform(0.995, 1.005, shape).astype(np.float32)
    if op == "ReduceLogSum":
        return RNG.uniform(0.1, 2.0, shape).astype(np.float32)
    return (RNG.standard_normal(shape) * 3).astype(np.float32)


def _out_shape(shape: tuple, axes: list, keepdims: int) -> tuple:
    red = [a % len(shape) for a in axes]
    return tuple(1 if i in red else d for i, d in enumerate(shape) if keepdims or i not in red)


@pytest.mark.parametrize("shape,axes,kernel", SHAPES, ids=[f"{s}-{a}" for s, a, _ in SHAPES])
@pytest.mark.parametrize("op", OPS)
def test_gpu_reduce(op, shape, axes, kernel):
    x = _data(op, shape)
    consts = {"axes": np.array(axes, np.int64)}
    launches = lower(_node(op), {"x": x}, consts, {"y": (_out_shape(shape, axes, 1), np.float32)}, opset=18,
                     device=gpu())
    assert [ln.kernel for ln in launches][-1] == kernel  # after wg_reduce_split where few outputs split
    check(_node(op), {"x": x}, consts, opset=18, rtol=1e-4, device=gpu())


SPLITS = [((1, 3000), [1]), ((3, 5000), [1]), ((2, 3, 700), [0, 2]), ((4099,), [0])]
if not SMALL:
    SPLITS += [((1, 1 << 20), [1]), ((7, 33, 301), [0, 1, 2])]


@pytest.mark.parametrize("shape,axes", SPLITS, ids=str)
@pytest.mark.parametrize("op", [o for o in OPS if o != "ReduceLogSumExp"])
def test_gpu_reduce_split(op, shape, axes):
    """Few outputs with long runs (a device of many compute units): each run split over several
    groups, then their partial results combined (sums of squares and |x| combined as sums)."""
    target = dataclasses.replace(gpu(), compute_units=64)
    x = _data(op, shape)
    consts = {"axes": np.array(axes, np.int64)}
    out = (_out_shape(shape, axes, 1), np.float32)
    assert [ln.kernel for ln in lower(_node(op), {"x": x}, consts, {"y": out}, opset=18, device=target)] == \
        ["wg_reduce_split", "wg_reduce"]
    check(_node(op), {"x": x}, consts, opset=18, rtol=1e-4, device=target)


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_gpu_reduce_split_dtypes(dtype):
    if np.dtype(dtype) == np.float64 and not gpu().has_fp64:
        pytest.skip("no fp64 on this device")
    target = dataclasses.replace(gpu(), compute_units=64)
    x = RNG.integers(-100, 100, (2, 4000)).astype(dtype)
    for op, fn in (("ReduceSum", np.sum), ("ReduceMax", np.max), ("ReduceMean", None)):
        wide = x.astype(np.float64 if x.dtype.kind == "f" else np.int64)
        want = (wide.sum(1) / 4000 if fn is None else fn(wide, axis=1)).astype(dtype)
        check(_node(op, 0), {"x": x}, {"axes": np.array([1], np.int64)}, opset=18, expected=[want], rtol=1e-6,
              device=target)


def test_no_split_with_many_outputs():
    target = dataclasses.replace(gpu(), compute_units=1)
    x = _data("ReduceSum", (8, 5000))
    launches = lower(_node("ReduceSum"), {"x": x}, {"axes": np.array([1], np.int64)}, {"y": ((8, 1), np.float32)},
                     opset=18, device=target)
    assert [ln.kernel for ln in launches] == ["wg_reduce"]


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum"])
@pytest.mark.parametrize("shape,axes", [((4, 40), [1]), ((40, 4), [0])], ids=["rows", "cols"])
def test_gpu_reduce_nan_inf(op, shape, axes):
    """A NaN makes its output NaN, wherever in the tree it sits; infinities as numpy has them."""
    x = RNG.standard_normal(shape).astype(np.float32)
    x.flat[5] = np.nan
    x.flat[37] = np.inf
    x.flat[80] = -np.inf
    (got,), (want,) = run(_node(op, 0), {"x": x}, {"axes": np.array(axes, np.int64)}, opset=18, device=gpu())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # NaN where NaN, inf where inf


@pytest.mark.parametrize("shape,axes", [((3, 50), [1]), ((50, 3), [0])], ids=["rows", "cols"])
def test_gpu_logsumexp_infinite(shape, axes):
    """+inf gives +inf, -inf elements count nothing, and a row of -inf alone gives -inf."""
    x = RNG.standard_normal(shape).astype(np.float32)
    row = (slice(None), 1) if axes == [0] else (1, slice(None))
    x[row] = -np.inf
    x.flat[7] = np.inf
    with np.errstate(divide="ignore"):
        want = np.log(np.sum(np.exp(x.astype(np.float64)), axis=tuple(axes))).astype(np.float32)
    (got,), _ = run(_node("ReduceLogSumExp", 0), {"x": x}, {"axes": np.array(axes, np.int64)}, opset=18,
                    expected=[want], device=gpu())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.float64] if SMALL else [np.int32, np.int64, np.uint8, np.float64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd"])
@pytest.mark.parametrize("shape,axes", [((3, 41), [1]), ((41, 3), [0])], ids=["rows", "cols"])
def test_gpu_reduce_dtypes(dtype, op, shape, axes):
    if np.dtype(dtype) == np.float64 and not gpu().has_fp64:
        pytest.skip("no fp64 on this device")
    hi = 3 if op == "ReduceProd" else 100
    x = RNG.integers(0 if np.dtype(dtype).kind == "u" else -hi, hi, shape).astype(dtype)
    if op == "ReduceProd":
        x = x[:, :12] if axes == [1] else x[:12]  # a product that fits the type
    # numpy in a wide type (onnx.reference sums uint8 means in uint8); integer means truncate
    wide = x.astype(np.float64 if x.dtype.kind == "f" else np.int64)
    fn = {"ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min, "ReduceProd": np.prod,
          "ReduceMean": lambda a, axis: np.sum(a, axis=axis) / a.shape[axis]}[op]
    want = np.asarray(fn(wide, axis=axes[0])).astype(dtype)
    check(_node(op, 0), {"x": x}, {"axes": np.array(axes, np.int64)}, opset=18, rtol=1e-6, expected=[want],
          device=gpu())


def test_gpu_reduce_empty_set():
    """Reducing an empty axis: the sum 0, the max its identity, as onnx.reference has them."""
    x = np.zeros((3, 0), np.float32)
    for op in ("ReduceSum", "ReduceMax"):
        check(_node(op, 0), {"x": x}, {"axes": np.array([1], np.int64)}, opset=18, device=gpu())


def test_gpu_reduce_all_axes():
    """No axes: every axis (one output from the whole tensor; short enough not to split)."""
    x = _data("ReduceSum", (7, 13, 5))
    check(helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0), {"x": x}, opset=18, device=gpu())


ARG_CASES = [((1,), 0), ((3, 37), 1), ((5, 300), -1), ((4, 30, 5), 1), ((33, 70), 0), ((2, 3, 4), 0)]
if not SMALL:
    ARG_CASES += [((2, 20001), 1), ((3, 1500, 65), 1)]


@pytest.mark.parametrize("select_last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape,axis", ARG_CASES, ids=[f"{s}-{a}" for s, a in ARG_CASES])
def test_gpu_argreduce(op, shape, axis, select_last):
    """Small integers as floats: many ties, so the tie rule is exercised across the tree."""
    x = RNG.integers(0, 5, shape).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=1, select_last_index=select_last)
    fn = np.argmax if op == "ArgMax" else np.argmin
    want = fn(np.flip(x, axis), axis=axis) if select_last else fn(x, axis=axis)
    if select_last:
        want = x.shape[axis] - 1 - want
    check(node, {"x": x}, opset=13, expected=[np.expand_dims(want, axis).astype(np.int64)], device=gpu())


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_gpu_argreduce_dtypes(dtype):
    if np.dtype(dtype) == np.float64 and not gpu().has_fp64:
        pytest.skip("no fp64 on this device")
    x = RNG.integers(-50, 50, (6, 77)).astype(dtype)
    for axis in (0, 1):
        node = helper.make_node("ArgMax", ["x"], ["y"], axis=axis, keepdims=0)
        check(node, {"x": x}, opset=13, expected=[np.argmax(x, axis=axis).astype(np.int64)], device=gpu())


def test_gpu_argmax_nan_first():
    """A NaN is the result (numpy: the first NaN), wherever the tree meets it."""
    x = RNG.standard_normal((3, 100)).astype(np.float32)
    x[0, 70], x[0, 90], x[2, 3] = np.nan, np.nan, np.nan
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)
    check(node, {"x": x}, opset=13, expected=[np.argmax(x, axis=1).astype(np.int64)], device=gpu())


def test_plan_layouts():
    """Which mapping each layout takes (no OpenCL): the stride-1 dimension decides."""
    lay = gpu_reduce.plan([6], [70], [70], [1])
    assert (lay.kind, lay.n_hi, lay.n_red, lay.linear) == ("rows", 6, 70, True)
    lay = gpu_reduce.plan([4, 5], [150, 1], [30], [5])
    assert (lay.kind, lay.n_hi, lay.inner, lay.linear) == ("cols", 4, 5, True)
    lay = gpu_reduce.plan([3, 5], [120, 6], [4, 6], [30, 1])
    assert (lay.kind, lay.linear, lay.rk, lay.rr) == ("rows", False, 2, 2)
    lay = gpu_reduce.plan([4, 6], [30, 1], [3, 5], [120, 6])
    assert (lay.kind, lay.inner, lay.linear) == ("cols", 6, False)


@pytest.mark.parametrize("where", ["cpu family", "emulated local memory"])
def test_other_targets_keep_reduce_cl(where):
    """The CPU family, and the GPU family where local memory is emulated (pocl under
    CLGLOW_TARGET=gpu), keep reduce.cl (one work-item per output)."""
    target = device_info().with_family("cpu") if where == "cpu family" else \
        dataclasses.replace(gpu(), local_mem_type="global")
    assert gpu_reduce.applicable(target) is not None
    x = _data("ReduceSum", (3, 70))
    launches = lower(_node("ReduceSum"), {"x": x}, {"axes": np.array([1], np.int64)}, {"y": ((3, 1), np.float32)},
                     opset=18, device=target)
    assert [ln.program for ln in launches] == ["reduce"]


def test_wg_reduce_family_measures():
    """The tunable family's benchmark runs each point of its space on the device (runtime.search)."""
    from clglow.lower.tunable import FAMILIES
    from clglow.runtime import search
    from clglow.runtime.device import select_device

    for fam, key in (("wg_reduce", ("rows", 6, 1000, 1)), ("wg_reduce", ("cols", 2, 50, 70)),
                     ("wg_softmax", ("rows", 6, 300, 1))):
        points = FAMILIES[fam].space(gpu(), key)[:2]
        times = search.measure(select_device(), gpu(), fam, key, points, rounds=1)
        assert sorted(times) == list(range(len(points))) and all(t > 0 for t in times.values())
