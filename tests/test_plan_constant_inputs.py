"""Resize, Slice and Pad whose scales / sizes, starts / ends or pads are graph inputs run on OpenCL
with the host fallback off: such an input is a constant of each plan (runtime.engine.SHAPE_INPUTS,
its value part of the plan key), so the node is accepted at load and lowered with the value each
run brings; results against onnxruntime for two different values in one session."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper

import clglow
from models import ort_run

RNG = np.random.default_rng(31)


def _model(node, inputs: list, out_rank: int):
    g = helper.make_graph([node], "m", inputs, [helper.make_tensor_value_info("y", T.FLOAT, [None] * out_rank)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


CASES = {
    "resize_scales": (helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear"),
                      [("s", T.FLOAT, [4])],
                      [{"s": np.array([1, 1, 2, 1.5], np.float32)}, {"s": np.array([1, 1, 0.5, 3], np.float32)}]),
    "resize_sizes": (helper.make_node("Resize", ["x", "", "", "z"], ["y"], mode="nearest"),
                     [("z", T.INT64, [4])],
                     [{"z": np.array([1, 3, 7, 9], np.int64)}, {"z": np.array([1, 3, 16, 4], np.int64)}]),
    "slice": (helper.make_node("Slice", ["x", "b", "e", "a"], ["y"]),
              [("b", T.INT64, [1]), ("e", T.INT64, [1]), ("a", T.INT64, [1])],
              [{"b": np.array([1], np.int64), "e": np.array([5], np.int64), "a": np.array([2], np.int64)},
               {"b": np.array([-4], np.int64), "e": np.array([100], np.int64), "a": np.array([3], np.int64)}]),
    "pad": (helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="constant"),
            [("p", T.INT64, [8]), ("v", T.FLOAT, [])],
            [{"p": np.array([0, 0, 1, 2, 0, 0, 3, 0], np.int64), "v": np.array(1.5, np.float32)},
             {"p": np.array([0, 1, 0, 0, 0, 0, 2, 2], np.int64), "v": np.array(-2.0, np.float32)}]),
}


def _runs_on_the_device(sess, m, x: np.ndarray, runs: list) -> None:
    """Each run's values against onnxruntime, every node placed on OpenCL."""
    for extra in runs:
        feeds = {"x": x, **extra}
        (got,), (want,) = sess.run(None, feeds), ort_run(m, feeds)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert {p.where for p in sess.placement} == {"opencl"}, [str(p) for p in sess.placement]


@pytest.mark.parametrize("name", list(CASES))
def test_graph_input_parameters_run_on_the_device(name, monkeypatch):
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    node, params, runs = CASES[name]
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 6])]
    inputs += [helper.make_tensor_value_info(n, t, s) for n, t, s in params]
    m = _model(node, inputs, 4)
    sess = clglow.InferenceSession(m.SerializeToString())  # accepted at load, fallback off
    x = RNG.standard_normal((1, 3, 8, 6)).astype(np.float32)
    _runs_on_the_device(sess, m, x, runs)


def _computed_model(nodes: list, params: list, out_rank: int):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 5])]
                          + [helper.make_tensor_value_info(n, t, s) for n, t, s in params],
                          [helper.make_tensor_value_info("y", T.FLOAT, [None] * out_rank)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


COMPUTED = {
    # pads, starts / ends and a Range's limit made by other nodes from graph inputs (onnx's expanded
    # Attention functions pad and slice by amounts computed so): the node waits for the next
    # stage, where the amounts are read back as constants, and runs on the device
    "pad": ([helper.make_node("Abs", ["p"], ["pa"]), helper.make_node("Pad", ["x", "pa", "v"], ["y"])],
            [("p", T.INT64, [6]), ("v", T.FLOAT, [])], 3,
            [{"p": np.array([0, -1, 2, 1, 0, -3], np.int64), "v": np.array(0.5, np.float32)},
             {"p": np.array([1, 0, 0, 0, 2, 1], np.int64), "v": np.array(-1.0, np.float32)}]),
    "slice": ([helper.make_node("Mul", ["e", "two"], ["e2"]), helper.make_node("Neg", ["b"], ["nb"]),
               helper.make_node("Slice", ["x", "nb", "e2", "a"], ["y"])],
              [("b", T.INT64, [1]), ("e", T.INT64, [1]), ("a", T.INT64, [1]), ("two", T.INT64, [1])], 3,
              [{"b": np.array([-1], np.int64), "e": np.array([2], np.int64), "a": np.array([2], np.int64),
                "two": np.array([2], np.int64)},
               {"b": np.array([1], np.int64), "e": np.array([5], np.int64), "a": np.array([1], np.int64),
                "two": np.array([1], np.int64)}]),
    "range": ([helper.make_node("Add", ["n", "one"], ["lim"]), helper.make_node("Range", ["zero", "lim", "one"], ["r"]),
               helper.make_node("Cast", ["r"], ["rf"], to=T.FLOAT), helper.make_node("ReduceSum", ["x"], ["xs"], keepdims=0),
               helper.make_node("Unsqueeze", ["rf", "ax"], ["ru"]), helper.make_node("Mul", ["ru", "xs"], ["y"])],
              [("n", T.INT64, []), ("one", T.INT64, []), ("zero", T.INT64, []), ("ax", T.INT64, [1])], 2,
              [{"n": np.array(4, np.int64), "one": np.array(1, np.int64), "zero": np.array(0, np.int64),
                "ax": np.array([0], np.int64)},
               {"n": np.array(2, np.int64), "one": np.array(1, np.int64), "zero": np.array(0, np.int64),
                "ax": np.array([0], np.int64)}]),
}


@pytest.mark.parametrize("name", list(COMPUTED))
def test_computed_parameters_run_on_the_device(name, monkeypatch):
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    nodes, params, rank, runs = COMPUTED[name]
    m = _computed_model(nodes, params, rank)
    sess = clglow.InferenceSession(m.SerializeToString())  # accepted at load, fallback off
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    _runs_on_the_device(sess, m, x, runs)


def test_computed_parameters_of_unknown_size_still_say_why(monkeypatch):
    """Pads whose length is not known at load (a NonZero's count decides it): refused at load
    with the reason, host fallback off."""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    nodes = [helper.make_node("NonZero", ["p"], ["nz"]), helper.make_node("Reshape", ["nz", "flat"], ["pa"]),
             helper.make_node("Pad", ["x", "pa"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                                       helper.make_tensor_value_info("p", T.INT64, [4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [None, None])],
                          [helper.make_tensor("flat", T.INT64, [1], [-1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    with pytest.raises(clglow.UnsupportedOperator, match="Pad with computed pads"):
        clglow.InferenceSession(m.SerializeToString())


@pytest.mark.parametrize("op", ["Equal", "Less", "GreaterOrEqual"])
def test_float16_comparisons_run_on_the_device(op, monkeypatch):
    """Comparisons of float16 tensors (onnx's expanded fp16 Attention compares a float16 bias
    row with Equal) on OpenCL, host fallback off; numpy is the oracle."""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    g = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "cmp",
                          [helper.make_tensor_value_info("a", T.FLOAT16, [3, 4]),
                           helper.make_tensor_value_info("b", T.FLOAT16, [4])],
                          [helper.make_tensor_value_info("y", T.BOOL, [3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    a = RNG.integers(0, 3, (3, 4)).astype(np.float16)
    b = RNG.integers(0, 3, 4).astype(np.float16)
    sess = clglow.InferenceSession(m.SerializeToString())
    want = {"Equal": np.equal, "Less": np.less, "GreaterOrEqual": np.greater_equal}[op](a, b)
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": b})[0], want)
    assert {p.where for p in sess.placement} == {"opencl"}


def test_computed_parameters_that_make_a_negative_shape_are_a_clear_error(monkeypatch):
    """Pads computed on the device that would crop past the tensor: an InvalidArgument naming the
    node and its output, and the session runs the next valid values."""
    nodes = [helper.make_node("Neg", ["p"], ["pn"]), helper.make_node("Pad", ["x", "pn"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                                       helper.make_tensor_value_info("p", T.INT64, [4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [None, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    sess = clglow.InferenceSession(m.SerializeToString())
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(clglow.InvalidArgument, match="Pad"):
        sess.run(None, {"x": x, "p": np.array([5, 5, 5, 5], np.int64)})
    feeds = {"x": x, "p": np.array([0, -1, 0, -1], np.int64)}
    np.testing.assert_allclose(sess.run(None, feeds)[0], ort_run(m, feeds)[0])
