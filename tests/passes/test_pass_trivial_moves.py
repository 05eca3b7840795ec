"""passes/trivial_moves.py: a Cast to its input's dtype is dropped and a Transpose that only
moves axes of size 1 becomes a Reshape (a view), as does an identity Gather; a constant mask half is
folded into its Where; a real transpose, a real cast and a graph
output stay; results against onnxruntime."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper

import clglow
from clglow.frontend.onnx_model import import_model
from clglow.passes.dead_code import remove_dead_nodes
from clglow.passes.trivial_moves import remove_trivial_moves

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(5)


def _model(shape, perm, to, out_shape, out_type=T.FLOAT):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm), helper.make_node("Cast", ["t"], ["c"], to=to),
             helper.make_node("Relu" if out_type == T.FLOAT else "Identity", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", out_type, list(out_shape))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape,perm,to,ops", [
    ((1, 1, 4, 64), [0, 2, 1, 3], T.FLOAT, ["Reshape", "Relu"]),          # a decode step's head split
    ((3, 1, 5), [1, 0, 2], T.FLOAT, ["Reshape", "Relu"]),
    ((2, 1, 5), [2, 1, 0], T.FLOAT, ["Transpose", "Relu"]),              # 2 and 5 swap: a real transpose
    ((1, 1, 4, 64), [0, 2, 1, 3], T.DOUBLE, ["Reshape", "Cast", "Relu"]),  # a real cast
])
def test_trivial_moves(shape, perm, to, ops):
    out_shape = tuple(shape[p] for p in perm)
    m = _model(shape, perm, to, out_shape, T.DOUBLE if to == T.DOUBLE else T.FLOAT)
    if to == T.DOUBLE:
        ops = ["Reshape", "Cast", "Identity"]
    g = remove_trivial_moves(import_model(m))
    assert [n.op_type for n in g.nodes] == ops
    x = RNG.standard_normal(shape).astype(np.float32)
    got = clglow.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, models.ort_run(m, {"x": x})[0], rtol=1e-6)


def test_graph_output_stays():
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT)], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3])], [helper.make_tensor_value_info("y", T.FLOAT, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in remove_trivial_moves(import_model(m)).nodes] == ["Cast"]
    x = RNG.standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(clglow.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0], x)


def test_one_input_concat_and_same_shape_reshape_are_dropped():
    nodes = [helper.make_node("Concat", ["x"], ["c"], axis=1), helper.make_node("Reshape", ["c", "s"], ["r"]),
             helper.make_node("Concat", ["r", "x"], ["y"], axis=1)]
    s = helper.make_tensor("s", T.INT64, [2], [2, 3])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 6])], [s])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out = remove_trivial_moves(import_model(m))
    assert [n.op_type for n in out.nodes] == ["Concat"] and out.nodes[0].inputs == ["x", "x"]
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    got = clglow.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, models.ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("target,ops", [([1, 1, 4, 8], ["Where"]), ([1, 3, 4, 8], ["Expand", "Where"])],
                         ids=["same_shape", "broadcasting"])
def test_expand_to_its_own_shape_is_dropped(target, ops):
    """Hugging Face's attention masks: a bool mask expanded to the shape it already has, then
    Where picks 0 or the mask value; an Expand that broadcasts stays."""
    nodes = [helper.make_node("Expand", ["m", "s"], ["e"]), helper.make_node("Where", ["e", "x", "neg"], ["y"])]
    inits = [helper.make_tensor("s", T.INT64, [4], target), helper.make_tensor("neg", T.FLOAT, [], [-1e9])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("m", T.BOOL, [1, 1, 4, 8]),
                                       helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 4, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1] + target[1:])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in remove_trivial_moves(import_model(m)).nodes] == ops
    feeds = {"m": RNG.random((1, 1, 4, 8)) > 0.5, "x": RNG.standard_normal((1, 1, 4, 8)).astype(np.float32)}
    got = clglow.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(got, models.ort_run(m, feeds)[0])


@pytest.mark.parametrize("shape,axis,idx,op", [
    ((64, 1), 0, np.arange(64).reshape(1, 1, 1, 64), "Reshape"),  # GPT-2's mask rows gathered by an arange
    ((3, 5, 2), 1, np.arange(5), "Reshape"),
    ((3, 5, 2), -2, np.arange(5).reshape(5, 1), "Reshape"),
    ((3, 5, 2), 1, np.array([0, 1, 2, 4, 3]), "Gather"),          # a permutation: a real gather
    ((3, 5, 2), 1, np.arange(4), "Gather"),                       # a prefix: fewer elements
], ids=["gpt2_mask", "axis1", "negative_axis", "permuted", "prefix"])
def test_identity_gather_becomes_a_reshape(shape, axis, idx, op):
    """A Gather whose constant indices are 0..n-1 over its axis of n moves nothing (a view)."""
    out_shape = list(shape[:axis % len(shape)]) + list(idx.shape) + list(shape[axis % len(shape) + 1:])
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=axis), helper.make_node("Not", ["g"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.BOOL, list(shape))],
                          [helper.make_tensor_value_info("y", T.BOOL, out_shape)],
                          [helper.make_tensor("i", T.INT64, list(idx.shape), idx.reshape(-1).tolist())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in remove_trivial_moves(import_model(m)).nodes] == [op, "Not"]
    x = RNG.random(shape) > 0.5
    got = clglow.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, models.ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("case,ops", [("const_first", ["Where"]), ("const_second", ["Where"]),
                                      ("both_live", ["And", "Where"]), ("and_used_twice", ["And", "Where", "Not"]),
                                      ("live_value", ["And", "Where"])])
def test_constant_mask_half_folds(case, ops):
    """Where(And(C, x), a, b) with C, a, b constants is Where(x, Where(C, a, b), b): the And goes;
    a second live input, a second use of the And, or a live a keep it."""
    c = helper.make_tensor("c", T.BOOL, [1, 1, 1, 8], (RNG.random(8) > 0.4).tolist())
    a, b = helper.make_tensor("a", T.FLOAT, [], [0.0]), helper.make_tensor("b", T.FLOAT, [], [-3.4e38])
    and_in = {"const_first": ["c", "x"], "const_second": ["x", "c"], "both_live": ["x", "x2"]}.get(case, ["c", "x"])
    nodes = [helper.make_node("And", and_in, ["m"]),
             helper.make_node("Where", ["m", "v" if case == "live_value" else "a", "b"], ["y"])]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [1, 2, 4, 8])]
    if case == "and_used_twice":
        nodes.append(helper.make_node("Not", ["m"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", T.BOOL, [1, 2, 4, 8]))
    ins = [helper.make_tensor_value_info("x", T.BOOL, [1, 2, 4, 8]),
           helper.make_tensor_value_info("x2", T.BOOL, [1, 1, 1, 8]),
           helper.make_tensor_value_info("v", T.FLOAT, [1, 1, 4, 1])]
    g = helper.make_graph(nodes, "g", ins, outs, [c, a, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in remove_dead_nodes(remove_trivial_moves(import_model(m))).nodes] == ops
    feeds = {"x": RNG.random((1, 2, 4, 8)) > 0.5, "x2": RNG.random((1, 1, 1, 8)) > 0.5,
             "v": RNG.standard_normal((1, 1, 4, 1)).astype(np.float32)}
    got = clglow.InferenceSession(m.SerializeToString()).run(None, feeds)
    for gv, want in zip(got, models.ort_run(m, feeds)):
        np.testing.assert_array_equal(gv, want)
