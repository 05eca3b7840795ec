"""Fusion of elementwise chains (passes/fuse_elementwise.py), float32 and typed (int64 / int32 /
bool masks): what is fused, what is not,
and that the fused kernel computes what onnxruntime computes; a forged FusedElementwise node in a
user's model is refused, never compiled."""
from __future__ import annotations

import logging
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.errors import ClglowError

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def _fused(sess):
    return [n for n in sess.graph.nodes if n.op_type == "FusedElementwise"]


def _check(model, feeds, n_fused, n_nodes=None):
    sess = clglow.InferenceSession(model.SerializeToString())
    fused = _fused(sess)
    assert len(fused) == n_fused, [n.op_type for n in sess.graph.nodes]
    if n_nodes is not None:
        assert len(sess.graph.nodes) == n_nodes
    got = sess.run(None, feeds)
    want = models.ort_run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    return fused


def test_gelu_with_broadcast_constants_is_one_node():
    c = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
         (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    x = np.random.default_rng(0).standard_normal((2, 33, 70)).astype(np.float32) * 3
    (f,) = _check(_model(nodes, [_vi("x", [2, 33, 70])], [_vi("y", [2, 33, 70])], c), {"x": x}, 1, 1)
    assert f.attrs["expr"].count("X0") == 2  # x is read twice, loaded once


def test_broadcast_chain_over_rows_and_channels():
    nodes = [helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["d"]), helper.make_node("Sub", ["d", "z"], ["y"])]
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 5, 7, 9)).astype(np.float32),
             "s": rng.standard_normal((5, 1, 1)).astype(np.float32),
             "b": rng.standard_normal((9,)).astype(np.float32),
             "z": rng.standard_normal((2, 1, 7, 1)).astype(np.float32)}
    m = _model(nodes, [_vi("x", [2, 5, 7, 9]), _vi("s", [5, 1, 1]), _vi("b", [9]), _vi("z", [2, 1, 7, 1])],
               [_vi("y", [2, 5, 7, 9])])
    _check(m, feeds, 1, 1)


def test_row_layout_chain():
    """Broadcasting with a long last dim: the row layout (offsets per row from the host)."""
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Mul", ["t", "g"], ["y"])]
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((3, 4, 40)).astype(np.float32),
             "b": rng.standard_normal((40,)).astype(np.float32),
             "g": rng.standard_normal((3, 1, 40)).astype(np.float32)}
    m = _model(nodes, [_vi("x", [3, 4, 40]), _vi("b", [40]), _vi("g", [3, 1, 40])], [_vi("y", [3, 4, 40])])
    _check(m, feeds, 1, 1)


def test_outputs_and_shared_values_end_groups():
    """An intermediate that is a graph output, or read twice, is not folded away."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Neg", ["e"], ["n"]), helper.make_node("Mul", ["n", "e"], ["y"]),
             helper.make_node("Abs", ["y"], ["z"])]
    x = np.random.default_rng(2).standard_normal((4, 17)).astype(np.float32)
    m = _model(nodes, [_vi("x", [4, 17])], [_vi("r", [4, 17]), _vi("z", [4, 17])])
    sess = clglow.InferenceSession(m.SerializeToString())
    kept = {o for n in sess.graph.nodes for o in n.outputs}
    assert "r" in kept and "e" in kept  # r is an output, e has two readers
    got = sess.run(None, {"x": x})
    for g, w in zip(got, models.ort_run(m, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_more_inputs_than_the_kernel_takes_is_left_alone():
    names = ["a", "b", "c", "d", "e"]
    nodes = [helper.make_node("Add", ["a", "b"], ["t1"]), helper.make_node("Add", ["t1", "c"], ["t2"]),
             helper.make_node("Add", ["t2", "d"], ["t3"]), helper.make_node("Add", ["t3", "e"], ["y"])]
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((3, 8)).astype(np.float32) for n in names}
    m = _model(nodes, [_vi(n, [3, 8]) for n in names], [_vi("y", [3, 8])])
    sess = clglow.InferenceSession(m.SerializeToString())
    assert not _fused(sess) or all(len(n.inputs) <= 4 for n in _fused(sess))
    np.testing.assert_allclose(sess.run(None, feeds)[0], models.ort_run(m, feeds)[0], rtol=1e-5, atol=1e-6)


def test_no_fusion_without_graph_optimizations():
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["y"])]
    m = _model(nodes, [_vi("x", [5])], [_vi("y", [5])])
    opts = clglow.SessionOptions()
    opts.graph_optimization_level = 0
    assert not _fused(clglow.InferenceSession(m.SerializeToString(), opts))


@pytest.mark.parametrize("expr", ["X0);}__kernel void evil(__global float* p){p[0]=1;", "SYSTEM(X0)",
                                  "MUL(X0,X1)", "ADD(X0,X0", "X0 + X0", ""])
def test_forged_fused_node_is_refused(expr):
    """A model may name clglow's internal op; its expression reaches the compiler only when it is
    well formed over the node's inputs (the session reports the node, and stays usable)."""
    node = helper.make_node("FusedElementwise", ["x"], ["y"], domain="clglow", expr=expr, name="forged")
    g = helper.make_graph([node], "g", [_vi("x", [4])], [_vi("y", [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("clglow", 1)])
    with pytest.raises(ClglowError, match="forged"):
        clglow.InferenceSession(m.SerializeToString()).run(None, {"x": np.ones(4, np.float32)})
    ok = _model([helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["y"])],
                [_vi("x", [4])], [_vi("y", [4])])
    out = clglow.InferenceSession(ok.SerializeToString()).run(None, {"x": np.zeros(4, np.float32)})[0]
    np.testing.assert_allclose(out, -np.ones(4))


@pytest.mark.parametrize("shape", [(37,), (3, 53), (2, 4, 16)], ids=str)
def test_every_operation_flat_runs(shape):
    """One fused_flat chain through every operation the kernel has, on sizes with and without a
    partial last run of 16 (the kernel evaluates 16 elements as one vector)."""
    c = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("one", 1.0), ("two", 2.0))]
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Add", ["a", "one"], ["b"]),
             helper.make_node("Log", ["b"], ["l"]), helper.make_node("Neg", ["l"], ["n"]),
             helper.make_node("Exp", ["n"], ["e"]), helper.make_node("Sqrt", ["e"], ["s"]),
             helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Sub", ["r", "x"], ["d"]),
             helper.make_node("Tanh", ["d"], ["t"]), helper.make_node("Relu", ["d"], ["u"]),
             helper.make_node("Sigmoid", ["u"], ["g"]), helper.make_node("Erf", ["t"], ["f"]),
             helper.make_node("Mul", ["g", "f"], ["m"]), helper.make_node("Div", ["m", "two"], ["y"])]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 2
    _check(_model(nodes, [_vi("x", list(shape))], [_vi("y", list(shape))], c), {"x": x}, 2, 2)  # d is read twice


# --- Typed chains: int64 / int32 / bool values (attention-mask preprocessing) ---------------------
def _ti(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _check_typed(model, feeds, n_fused, n_nodes=None):
    """Fused as expected, run as fused kernels (not their original nodes: the engine's fallback),
    and equal to onnxruntime: exactly for integer / bool results."""
    fallbacks: list = []
    handler = logging.Handler()
    handler.emit = lambda r: fallbacks.append(r.getMessage()) if "original nodes run" in r.getMessage() else None
    engine_log = logging.getLogger("clglow.runtime.engine")
    engine_log.addHandler(handler)
    level = engine_log.level
    engine_log.setLevel(logging.INFO)
    try:
        sess = clglow.InferenceSession(model.SerializeToString())
        got = sess.run(None, feeds)
    finally:
        engine_log.removeHandler(handler)
        engine_log.setLevel(level)
    fused = _fused(sess)
    assert len(fused) == n_fused, [(n.op_type, n.attrs.get("expr")) for n in sess.graph.nodes]
    if n_nodes is not None:
        assert len(sess.graph.nodes) == n_nodes, [n.op_type for n in sess.graph.nodes]
    assert not fallbacks, fallbacks
    for g, w in zip(got, models.ort_run(model, feeds)):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
        else:
            np.testing.assert_array_equal(g, w)
    return fused


def _mask(s, rng):
    m = (rng.random((2, s)) < 0.7).astype(np.int64)
    m[:, 0] = 2  # any nonzero is true
    return m


@pytest.mark.parametrize("s", [7, 77])
def test_mask_cast_reshape_where_is_one_node(s):
    """DistilBERT / CLIP: Where(Cast(mask, bool) viewed with leading ones, bias, -max): one
    launch, the Reshape folded in (a view that adds leading ones broadcasts as its input does)."""
    rng = np.random.default_rng(3)
    bias = numpy_helper.from_array(rng.standard_normal((1, 1, s, 1)).astype(np.float32), "bias")
    low = numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "low")
    shape = numpy_helper.from_array(np.array([1, 1, 2 * s], np.int64), "shape")
    nodes = [helper.make_node("Cast", ["m"], ["b"], to=T.BOOL), helper.make_node("Reshape", ["b", "shape"], ["r"]),
             helper.make_node("Where", ["r", "bias", "low"], ["y"])]
    model = _model(nodes, [_ti("m", T.INT64, [1, 2 * s])], [_vi("y", [1, 1, s, 2 * s])], [bias, low, shape])
    (f,) = _check_typed(model, {"m": _mask(s, rng).reshape(1, 2 * s)}, 1, 1)
    assert f.attrs["expr"].startswith("WHERE(CAST_B(X0)")


def test_token_equal_chain_is_exact():
    """CLIP's end-of-text search: Cast int64 -> int32 -> int64, Equal a constant, Cast to int32."""
    eot = numpy_helper.from_array(np.array(49407, np.int64), "eot")
    nodes = [helper.make_node("Cast", ["ids"], ["a"], to=T.INT32), helper.make_node("Cast", ["a"], ["b"], to=T.INT64),
             helper.make_node("Equal", ["b", "eot"], ["e"]), helper.make_node("Cast", ["e"], ["y"], to=T.INT32)]
    ids = np.random.default_rng(4).integers(0, 49408, (3, 77)).astype(np.int64)
    ids[:, 40] = 49407
    ids[0, 3] = 49407 + 2 ** 32  # int32 wraps to 49407: the casts are not an identity
    model = _model(nodes, [_ti("ids", T.INT64, [3, 77])], [_ti("y", T.INT32, [3, 77])], [eot])
    _check_typed(model, {"ids": ids}, 1, 1)


def test_int64_arithmetic_is_exact_and_bert_mask_to_float():
    """(x - c) * k in int64 beyond float precision, and BERT's (1 - float(mask)) * -10000."""
    c = numpy_helper.from_array(np.array(3 * 2 ** 40 + 1, np.int64), "c")
    k = numpy_helper.from_array(np.array([[-7, 5, 2 ** 20]], np.int64), "k")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    big = numpy_helper.from_array(np.array(-10000.0, np.float32), "big")
    nodes = [helper.make_node("Sub", ["x", "c"], ["d"]), helper.make_node("Mul", ["d", "k"], ["e"]),
             helper.make_node("Neg", ["e"], ["y"]),
             helper.make_node("Cast", ["m"], ["f"], to=T.FLOAT), helper.make_node("Sub", ["one", "f"], ["g"]),
             helper.make_node("Mul", ["g", "big"], ["z"])]
    rng = np.random.default_rng(5)
    x = rng.integers(-2 ** 42, 2 ** 42, (4, 3)).astype(np.int64)
    model = _model(nodes, [_ti("x", T.INT64, [4, 3]), _ti("m", T.INT64, [2, 9])],
                   [_ti("y", T.INT64, [4, 3]), _vi("z", [2, 9])], [c, k, one, big])
    _check_typed(model, {"x": x, "m": (rng.random((2, 9)) < 0.5).astype(np.int64)}, 2, 2)


def test_logic_and_comparisons():
    """Not / And / Or over bool, Less / Greater / Equal over float and int64, Where choosing int64:
    one node over four inputs (x read three times, loaded once)."""
    three = numpy_helper.from_array(np.array(3, np.int64), "three")
    nodes = [helper.make_node("Less", ["a", "b"], ["l"]), helper.make_node("Greater", ["i", "j"], ["g"]),
             helper.make_node("Not", ["l"], ["n"]), helper.make_node("And", ["n", "g"], ["c"]),
             helper.make_node("Equal", ["i", "three"], ["e"]), helper.make_node("Or", ["c", "e"], ["o"]),
             helper.make_node("Where", ["o", "i", "j"], ["y"])]
    rng = np.random.default_rng(6)
    feeds = {"a": rng.standard_normal((5, 6)).astype(np.float32), "b": rng.standard_normal((6,)).astype(np.float32),
             "i": rng.integers(-9, 9, (5, 6)).astype(np.int64), "j": rng.integers(-9, 9, (5, 1)).astype(np.int64)}
    inputs = [_vi("a", [5, 6]), _vi("b", [6]), _ti("i", T.INT64, [5, 6]), _ti("j", T.INT64, [5, 1])]
    (f,) = _check_typed(_model(nodes, inputs, [_ti("y", T.INT64, [5, 6])], [three]), feeds, 1, 1)
    assert "LITL(3)" in f.attrs["expr"]


@pytest.mark.parametrize("case", ["int_div", "reshape_moves_elements", "float_to_float16"])
def test_typed_chain_not_fused(case):
    """Integer Div (its rounding, x / 0), a Reshape that is not a leading-ones view (it moves
    elements relative to the broadcast) and a dtype outside the typed kernel's stay separate."""
    shape = numpy_helper.from_array(np.array([6, 2], np.int64), "shape")
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    if case == "int_div":
        nodes = [helper.make_node("Cast", ["m"], ["a"], to=T.INT64), helper.make_node("Div", ["a", "two"], ["y"])]
        out = _ti("y", T.INT64, [2, 6])
    elif case == "reshape_moves_elements":
        nodes = [helper.make_node("Cast", ["m"], ["a"], to=T.BOOL), helper.make_node("Reshape", ["a", "shape"], ["r"]),
                 helper.make_node("Not", ["r"], ["y"])]
        out = _ti("y", T.BOOL, [6, 2])
    else:
        nodes = [helper.make_node("Cast", ["m"], ["a"], to=T.FLOAT16), helper.make_node("Cast", ["a"], ["y"], to=T.INT64)]
        out = _ti("y", T.INT64, [2, 6])
    model = _model(nodes, [_ti("m", T.INT32, [2, 6])], [out], [shape, two])
    m = np.random.default_rng(7).integers(-5, 5, (2, 6)).astype(np.int32)
    _check_typed(model, {"m": m}, 0)


def test_typed_chain_with_symbolic_dims():
    """A model declared with symbolic [batch, seq] dims: the typed node's output dtype survives
    the engine's shape inference at the run's sizes (the view, its shape unknown when the pass
    runs, stays outside)."""
    bias = numpy_helper.from_array(np.array([[[[0.5]], [[-1.5]]]], np.float32), "bias")  # [1, 2, 1, 1]
    low = numpy_helper.from_array(np.array(-3.0, np.float32), "low")
    axes = numpy_helper.from_array(np.array([1, 2], np.int64), "axes")
    nodes = [helper.make_node("Cast", ["m"], ["b"], to=T.BOOL), helper.make_node("Unsqueeze", ["b", "axes"], ["r"]),
             helper.make_node("Not", ["r"], ["n"]), helper.make_node("Where", ["n", "low", "bias"], ["y"])]
    model = _model(nodes, [_ti("m", T.INT64, ["batch", "seq"])], [_vi("y", ["batch", 2, 1, "seq"])],
                   [bias, low, axes])
    _check_typed(model, {"m": _mask(11, np.random.default_rng(8))}, 1)
