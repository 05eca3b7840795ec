"""passes/fuse_norm_matmul.py: a one-row LayerNormalization feeding a GEMV becomes the GEMV's
prologue (one clglow.FusedMatMul); results against onnxruntime, with and without the norm's
bias, through a same-shape Reshape (dropped by trivial_moves); not fused for two rows or a
norm output used twice; refused by the session's Target, it runs the original nodes."""
from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.lower.base import GENERIC_TARGET, REGISTRY

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(17)


def _c(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _model(rows=1, k=96, n=70, ln_bias=True, reshape=False, twice=False):
    x_shape = [1, rows, k]
    nodes = [helper.make_node("LayerNormalization", ["x", "g"] + (["b"] if ln_bias else []), ["ln"], axis=-1,
                              epsilon=1e-5)]
    a = "ln"
    if reshape:
        nodes.append(helper.make_node("Reshape", ["ln", "s"], ["lr"]))
        a = "lr"
    nodes += [helper.make_node("MatMul", [a, "w"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["y"])]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [1, rows, n])]
    if twice:
        nodes.append(helper.make_node("Relu", ["ln"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", T.FLOAT, x_shape))
    inits = [_c("g", k), _c("w", k, n), _c("bias", n), numpy_helper.from_array(np.array(x_shape, np.int64), "s")]
    if ln_bias:
        inits.append(_c("b", k))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x_shape)], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return m, {"x": (RNG.standard_normal(x_shape) * 3 + 1).astype(np.float32)}


def _run(m, feeds, target=None):
    sess = clglow.InferenceSession(m.SerializeToString(), sess_options=clglow.SessionOptions(target=target))
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    return sess


@pytest.mark.parametrize("ln_bias,reshape", [(True, False), (False, False), (True, True)])
def test_prologue(ln_bias, reshape):
    sess = _run(*_model(ln_bias=ln_bias, reshape=reshape), target="cpu")  # the GEMV: CPU family
    nodes = [n for n in sess.graph.nodes if n.op_type != "Reshape"]
    assert [n.op_type for n in nodes] == ["FusedMatMul"] and "ln_epsilon" in nodes[0].attrs


@pytest.mark.parametrize("case", ["two_rows", "twice"])
def test_not_fused(case):
    sess = _run(*_model(rows=2) if case == "two_rows" else _model(twice=True))
    assert "LayerNormalization" in [n.op_type for n in sess.graph.nodes]


def test_refused_runs_the_original_nodes(monkeypatch):
    key = ("clglow", "FusedMatMul")
    op = REGISTRY[key]

    def refuse(node, graph, target):
        if target is not GENERIC_TARGET and "ln_epsilon" in node.attrs:
            return "refused for this test"
        return op.supports(node, graph, target)

    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(op, supports=refuse))
    sess = _run(*_model())
    kinds = [p.op_type for p in sess.placement]
    assert "LayerNormalization" in kinds and all(p.where == "opencl" for p in sess.placement), kinds


def _gelu_model(rows=1, k=40, n=50):
    """x @ W + b -> GPT-2's tanh GELU (a one-input FusedElementwise after fuse_elementwise)."""
    c = {"half": 0.5, "three": 3.0, "c": 0.044715, "k": 0.7978845608, "one": 1.0}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["h"]),
             helper.make_node("Mul", ["h", "half"], ["a"]), helper.make_node("Pow", ["h", "three"], ["p"]),
             helper.make_node("Mul", ["p", "c"], ["pc"]), helper.make_node("Add", ["h", "pc"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["sk"]), helper.make_node("Tanh", ["sk"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]), helper.make_node("Mul", ["a", "t1"], ["y"])]
    inits = [_c("w", k, n), _c("bias", n)] + [numpy_helper.from_array(np.array(v, np.float32), name)
                                              for name, v in c.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, rows, k])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, rows, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return m, {"x": RNG.standard_normal((1, rows, k)).astype(np.float32)}


@pytest.mark.parametrize("rows", [1, 3])
def test_elementwise_epilogue(rows):
    """One row: the GELU is the GEMV's epilogue (one node); three rows: a FusedElementwise of its own."""
    sess = _run(*_gelu_model(rows), target="cpu")  # the GEMV: CPU family
    ops = [n.op_type for n in sess.graph.nodes]
    assert ops == (["FusedMatMul"] if rows == 1 else ["FusedMatMul", "FusedElementwise"]), ops


def test_gpu_family_runs_the_norm_and_gelu_unfused():
    """The GPU family has no GEMV prologue/epilogue: the fused node's original nodes run, right."""
    sess = _run(*_model(), target="gpu")
    assert "LayerNormalization" in [n.op_type for n in sess.graph.nodes]
    _run(*_gelu_model(), target="gpu")


def test_epilogue_refused_runs_the_original_nodes(monkeypatch):
    key = ("clglow", "FusedMatMul")
    op = REGISTRY[key]

    def refuse(node, graph, target):
        if target is not GENERIC_TARGET and "epilogue" in node.attrs:
            return "refused for this test"
        return op.supports(node, graph, target)

    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(op, supports=refuse))
    sess = _run(*_gelu_model())
    kinds = [p.op_type for p in sess.placement]
    assert "FusedElementwise" in kinds and all(p.where == "opencl" for p in sess.placement), kinds
