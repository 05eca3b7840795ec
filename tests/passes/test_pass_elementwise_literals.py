"""passes/fuse_elementwise.py: scalar constants become literals of the fused expression (not
inputs), Pow by 2 or 3 fuses as a product: GPT-2's tanh GELU (eight nodes) is one
FusedElementwise of one input; results against onnxruntime; what must not fuse."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.lower.fused import check_expr

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(11)


def _k(name, v):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def _run(nodes, inits, shape=(2, 3, 37)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, list(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString())
    got, want = sess.run(None, {"x": x})[0], models.ort_run(m, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return sess.graph.nodes


def test_tanh_gelu_is_one_node_of_one_input():
    nodes = [helper.make_node("Mul", ["x", "half"], ["a"]),
             helper.make_node("Pow", ["x", "three"], ["p"]),
             helper.make_node("Mul", ["p", "c"], ["pc"]),
             helper.make_node("Add", ["x", "pc"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["sk"]),
             helper.make_node("Tanh", ["sk"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["a", "t1"], ["y"])]
    inits = [_k("half", 0.5), _k("three", 3.0), _k("c", 0.044715), _k("k", 0.7978845608), _k("one", 1.0)]
    out = _run(nodes, inits)
    assert [n.op_type for n in out] == ["FusedElementwise"] and out[0].inputs == ["x"], out
    assert "LIT(3f000000)" in out[0].attrs["expr"] and "CUBE(X0)" in out[0].attrs["expr"]


@pytest.mark.parametrize("shape", [(16,), (1, 1), (2, 1, 1)])
def test_literal_of_any_rank(shape):
    """A one-element constant of any rank is a literal (its broadcast already in y's shape)."""
    inits = [numpy_helper.from_array(np.full(shape, -2.5, np.float32) if len(shape) > 1 or shape == (1,)
                                     else np.float32(-2.5) * np.ones(shape, np.float32), "c")]
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]), helper.make_node("Mul", ["p", "c"], ["y"])]
    out_shape = (2, 3, 16)
    out = _run(nodes, inits + [_k("two", 2.0)], out_shape)
    assert [n.op_type for n in out] == ["FusedElementwise"]
    assert out[0].inputs == (["x"] if int(np.prod(shape)) == 1 else ["x", "c"])


def test_other_powers_do_not_fuse():
    """Pow by 2.5 (or a live exponent) stays a Pow; the rest still fuses around it."""
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]), helper.make_node("Mul", ["p", "c"], ["q"]),
             helper.make_node("Add", ["q", "c"], ["y"])]
    out = _run(nodes, [_k("e", 2.5), _k("c", 1.5)], (4, 5))
    assert [n.op_type for n in out] == ["Pow", "FusedElementwise"]


@pytest.mark.parametrize("expr,ok", [("MUL(X0,LIT(3f000000))", True), ("LIT(3f00000)", False),
                                     ("MUL(X0,LIT(3F000000))", False), ("LIT(3f000000)+1", False)])
def test_check_expr_literals(expr, ok):
    """A literal is exactly 8 lowercase hex digits; nothing else passes into the define."""
    assert (check_expr(expr, 1) is None) == ok
