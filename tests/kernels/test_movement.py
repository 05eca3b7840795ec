"""Data-movement kernels vs onnx.reference: Transpose up to 6-D, Concat, Split, Slice, Gather, ..."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
    from .harness import lower  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402
    from harness import lower  # type: ignore  # noqa: E402

RNG = np.random.default_rng(1)


def rand(*shape, dtype=np.float32):
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) > 0.5
    return (RNG.standard_normal(shape) * 10).astype(dtype)


@pytest.mark.parametrize("shape,perm", [
    ((3, 5), None), ((2, 3, 4), (0, 2, 1)), ((2, 3, 4, 5), (0, 2, 3, 1)), ((2, 3, 4, 5), (3, 0, 1, 2)),
    ((2, 3, 1, 4, 2, 3), (5, 3, 1, 0, 4, 2)), ((2, 3, 2, 2, 3, 2), None), ((1, 7, 1), (2, 0, 1)),
    ((4, 6), (0, 1))], ids=str)
def test_transpose(shape, perm):
    attrs = {} if perm is None else {"perm": list(perm)}
    check(helper.make_node("Transpose", ["x"], ["y"], **attrs), {"x": rand(*shape)})


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_transpose_head_split_rows(dtype):
    """A transformer's head split/merge keeps the last axis: rows copied with compile-time unit
    strides (bcast_index.h ROW_STEP), in both directions and for 1-byte elements."""
    x = rand(2, 9, 4, 40, dtype=dtype)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])
    launches = lower(node, {"x": x}, {}, {"y": ((2, 4, 9, 40), x.dtype)})
    assert [(l.defines.get("ROW_S0"), l.defines.get("ROW_S1")) for l in launches] == [(1, 1)]
    check(node, {"x": x})
    check(helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3]), {"x": rand(2, 4, 9, 40, dtype=dtype)})


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.uint8, np.float32])
def test_transpose_dtypes(dtype):
    check(helper.make_node("Transpose", ["x"], ["y"], perm=[1, 2, 0]), {"x": rand(3, 4, 5, dtype=dtype)})


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concat(axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for k, s in enumerate(shapes):
        s[axis] = [1, 5, 2][k]
    feeds = {f"x{k}": rand(*s) for k, s in enumerate(shapes)}
    check(helper.make_node("Concat", list(feeds), ["y"], axis=axis), feeds)


def test_concat_empty_and_int():
    feeds = {"a": rand(2, 0, dtype=np.int64), "b": rand(2, 3, dtype=np.int64), "c": rand(2, 1, dtype=np.int64)}
    check(helper.make_node("Concat", list(feeds), ["y"], axis=1), feeds)
    check(helper.make_node("Concat", ["a"], ["y"], axis=0), {"a": rand(7, dtype=np.int64)})


@pytest.mark.parametrize("axis,split", [(0, None), (1, [1, 4]), (-1, [2, 3, 1]), (1, [0, 5])])
def test_split(axis, split):
    x = rand(4, 5, 6)
    n = len(split) if split else 2
    consts = {"s": np.array(split, np.int64)} if split else {}
    ins = ["x", "s"] if split else ["x"]
    check(helper.make_node("Split", ins, [f"y{k}" for k in range(n)], axis=axis), {"x": x}, consts, opset=13)


def test_split_opset11_attr():
    check(helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[2, 3]), {"x": rand(3, 5)}, opset=11)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], None), ([0, 1], [-1, 100], [1, 2], None), ([-1], [-100], [1], [-1]),
    ([4, 0], [0, 5], [2, 0], [-2, 2]), ([1, 2], [2, 3], None, None), ([10], [12], [2], None)])
def test_slice(starts, ends, axes, steps):
    consts = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64)}
    ins = ["x", "st", "en"]
    if axes is not None or steps is not None:
        consts["ax"] = np.array(axes if axes is not None else list(range(len(starts))), np.int64)
        ins.append("ax")
    if steps is not None:
        consts["sp"] = np.array(steps, np.int64)
        ins.append("sp")
    check(helper.make_node("Slice", ins, ["y"]), {"x": rand(4, 5, 6)}, consts, opset=13)


def test_slice_opset1():
    check(helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[3, 1000], axes=[0, 2]),
          {"x": rand(4, 5, 6)}, opset=9)


@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 3), (2, 4, 3)),
                                          ((4,), (2, 1, 4)), ((3, 1, 1), (1, 1))])
def test_expand(shape, target):
    check(helper.make_node("Expand", ["x", "s"], ["y"]), {"x": rand(*shape)}, {"s": np.array(target, np.int64)})


def test_tile():
    check(helper.make_node("Tile", ["x", "r"], ["y"]), {"x": rand(2, 3, 4)}, {"r": np.array([2, 1, 3], np.int64)})
    check(helper.make_node("Tile", ["x", "r"], ["y"]), {"x": rand(3, dtype=np.int64), "r": np.array([4], np.int64)})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
def test_gather(axis, idx_dtype):
    x = rand(4, 5, 6)
    n = x.shape[axis]
    idx = np.array([[0, n - 1, -1], [2, -n, 1]], idx_dtype)
    check(helper.make_node("Gather", ["x", "i"], ["y"], axis=axis), {"x": x}, {"i": idx})
    check(helper.make_node("Gather", ["x", "i"], ["y"], axis=axis), {"x": x, "i": idx})


@pytest.mark.parametrize("shape,axis,dtype", [((50, 40), 0, np.float32), ((3, 7, 35), 1, np.int64)], ids=str)
def test_gather_rows(shape, axis, dtype):
    """Rows of >= 16 elements (an embedding lookup; a middle axis with 3 outer blocks and a
    ragged 35-element row) take gather_rows: indices negative, repeated and out of range."""
    x = rand(*shape, dtype=dtype)
    n = shape[axis]
    idx = np.array([[0, n - 1, -1, 3], [2, -n, 1, 1]], np.int64)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
    out = shape[:axis] + idx.shape + shape[axis + 1:]
    kernels = [l.kernel for l in lower(node, {"x": x}, {"i": idx}, {"y": (out, np.dtype(dtype))})]
    assert kernels == ["gather_rows"], kernels
    check(node, {"x": x}, {"i": idx})


def test_gather_scalar_index():
    check(helper.make_node("Gather", ["x", "i"], ["y"], axis=1), {"x": rand(3, 4, dtype=np.int64)},
          {"i": np.array(-2, np.int64)})


@pytest.mark.parametrize("pads,value", [([1, 0, 2, 1, 3, 0], None), ([0, 2, 0, 1, 0, 0], 1.5),
                                        ([-1, 1, 0, 0, 0, -2], 0.0)])
def test_pad(pads, value):
    consts = {"p": np.array(pads, np.int64)}
    ins = ["x", "p"]
    if value is not None:
        consts["v"] = np.array(value, np.float32)
        ins.append("v")
    # onnx.reference (numpy.pad) rejects negative pads: onnxruntime is the oracle here
    oracle = "onnxruntime" if min(pads) < 0 else "reference"
    check(helper.make_node("Pad", ins, ["y"]), {"x": rand(3, 4, 5)}, consts, opset=13, oracle=oracle)


def test_pad_int_opset2():
    check(helper.make_node("Pad", ["x"], ["y"], pads=[1, 1, 0, 2], value=7.0), {"x": rand(3, 4)}, opset=2)


@pytest.mark.parametrize("node,feeds,consts", [
    (helper.make_node("Reshape", ["x", "s"], ["y"]), {"x": rand(2, 3, 4)}, {"s": np.array([4, -1], np.int64)}),
    (helper.make_node("Flatten", ["x"], ["y"], axis=2), {"x": rand(2, 3, 4)}, {}),
    (helper.make_node("Squeeze", ["x", "a"], ["y"]), {"x": rand(2, 1, 4)}, {"a": np.array([1], np.int64)}),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"]), {"x": rand(2, 4)}, {"a": np.array([0, -1], np.int64)}),
    (helper.make_node("Identity", ["x"], ["y"]), {"x": rand(2, 4)}, {}),
    (helper.make_node("Dropout", ["x"], ["y"]), {"x": rand(2, 4)}, {}),
])
def test_views(node, feeds, consts):
    check(node, feeds, consts, opset=13)


def test_dropout_training_declined():
    from clglow.ir import Graph, Node, Value
    from clglow.lower.base import GENERIC_TARGET, lookup

    vals = {"x": Value("x", np.dtype(np.float32), (2,)), "r": Value("r", np.dtype(np.float32), (), np.array(0.5)),
            "t": Value("t", np.dtype(np.bool_), (), np.array(True))}
    g = Graph([], vals, ["x"], ["y"], {"": 13})
    n = Node("Dropout", "d", ["x", "r", "t"], ["y"])
    assert lookup(n).supports(n, g, GENERIC_TARGET) is not None
    n2 = Node("Dropout", "d", ["x"], ["y", "m"])
    assert lookup(n2).supports(n2, g, GENERIC_TARGET) is not None
    vals["t"].const = np.array(False)
    assert lookup(n).supports(n, g, GENERIC_TARGET) is None


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 1], [0, 3, 2, 0], [3, 0, 0, 4]])
def test_pad_modes(mode, pads):
    x = rand(4, 5)
    check(helper.make_node("Pad", ["x", "p"], ["y"], mode=mode), {"x": x}, {"p": np.array(pads, np.int64)}, opset=19)


def test_pad_reflect_axes_3d():
    check(helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="reflect"), {"x": rand(2, 3, 4)},
          {"p": np.array([1, 2, 2, 1], np.int64), "a": np.array([1, 2], np.int64)}, opset=19)


@pytest.mark.parametrize("shape,perm,dtype,kernel", [
    ((2, 20, 9, 7), (0, 2, 3, 1), np.float32, "transpose_tiles"),    # NCHW -> NHWC, 2 images, partial tiles
    ((1, 33, 17, 16), (0, 3, 1, 2), np.float32, "transpose_tiles"),  # NHWC -> NCHW
    ((3, 40, 48), (0, 2, 1), np.int32, "transpose_tiles"),           # whole tiles, 4-byte ints
    ((2, 20, 9, 7), (0, 2, 3, 1), np.int64, "strided_copy_rows"),    # 8-byte elements: the row copy
], ids=str)
def test_transpose_last_two_axes(shape, perm, dtype, kernel):
    x = rand(*shape, dtype=dtype)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))
    out = tuple(shape[p] for p in perm)
    names = [l.kernel for l in lower(node, {"x": x}, {}, {"y": (out, np.dtype(dtype))})]
    assert names == [kernel], names
    check(node, {"x": x})
