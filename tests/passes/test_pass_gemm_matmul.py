"""passes/gemm_matmul.py: a Gemm with constant weights becomes a MatMul that fuse_matmul fuses
(bias, residual through the Reshapes around it), or one FusedMatMul when its rows are symbolic
(falling back to the Gemm); results against onnxruntime; the Gemms it must leave alone."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.frontend.onnx_model import import_model
from clglow.passes.gemm_matmul import gemm_to_matmul

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(7)


def _c(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, feeds):
    sess = clglow.InferenceSession(model.SerializeToString())
    for got, want in zip(sess.run(None, feeds), models.ort_run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("rows", [1, 5])
def test_reshape_gemm_reshape_residual_is_one_node(rows):
    """GPT-2's Conv1D: [1, S, K] -> Reshape [-1, K] -> Gemm(+bias) -> Reshape [1, S, N] -> + residual."""
    k, n = 24, 40
    nodes = [helper.make_node("Reshape", ["x", "s2"], ["x2"]),
             helper.make_node("Gemm", ["x2", "w", "b"], ["y2"]),
             helper.make_node("Reshape", ["y2", "s3"], ["y3"]),
             helper.make_node("Add", ["y3", "r"], ["y"])]
    inits = [_c("w", k, n), _c("b", n), numpy_helper.from_array(np.array([-1, k], np.int64), "s2"),
             numpy_helper.from_array(np.array([1, rows, n], np.int64), "s3")]
    m = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [1, rows, k]),
                       helper.make_tensor_value_info("r", T.FLOAT, [1, rows, n])],
               [helper.make_tensor_value_info("y", T.FLOAT, [1, rows, n])], inits)
    feeds = {"x": RNG.standard_normal((1, rows, k)).astype(np.float32),
             "r": RNG.standard_normal((1, rows, n)).astype(np.float32)}
    assert _check(m, feeds) == ["FusedMatMul"]


@pytest.mark.parametrize("trans_b,alpha,beta,c_shape", [(1, 0.5, 2.0, (30,)), (0, 1.0, 1.0, (1, 30)),
                                                        (1, 1.0, 0.0, (30,)), (0, 2.0, 1.0, None)])
def test_gemm_attributes(trans_b, alpha, beta, c_shape):
    """transB, alpha and beta folded (the weights transposed, C scaled), one node."""
    k, n = 16, 30
    inputs = ["a", "w"] + (["c"] if c_shape else [])
    nodes = [helper.make_node("Gemm", inputs, ["y"], transB=trans_b, alpha=alpha, beta=beta)]
    inits = [_c("w", *((n, k) if trans_b else (k, n)))] + ([_c("c", *c_shape)] if c_shape else [])
    m = _model(nodes, [helper.make_tensor_value_info("a", T.FLOAT, [3, k])],
               [helper.make_tensor_value_info("y", T.FLOAT, [3, n])], inits)
    ops = _check(m, {"a": RNG.standard_normal((3, k)).astype(np.float32)})
    assert ops == (["MatMul"] if alpha == 1.0 and (beta == 0.0 or not c_shape) else ["FusedMatMul"]), ops


def test_symbolic_rows_one_fused_node():
    """Rows unknown to the passes: one FusedMatMul with the bias, run at two row counts."""
    k, n = 16, 20
    nodes = [helper.make_node("Gemm", ["a", "w", "b"], ["y"], alpha=0.5)]
    m = _model(nodes, [helper.make_tensor_value_info("a", T.FLOAT, ["m", k])],
               [helper.make_tensor_value_info("y", T.FLOAT, ["m", n])], [_c("w", k, n), _c("b", n)])
    g = gemm_to_matmul(import_model(m))
    assert [x.op_type for x in g.nodes] == ["FusedMatMul"] and [u.op_type for u in g.nodes[0].unfused] == ["Gemm"]
    for rows in (1, 6):
        _check(m, {"a": RNG.standard_normal((rows, k)).astype(np.float32)})


@pytest.mark.parametrize("case", ["transA", "live_b", "full_c", "live_c_beta"])
def test_left_alone(case):
    """transA, live weights, a C of the output's shape, a live C with beta != 1: still a Gemm."""
    k, n = 8, 12
    attrs = {"transA": 1} if case == "transA" else {"beta": 0.5} if case == "live_c_beta" else {}
    a_shape = [k, 3] if case == "transA" else [3, k]
    ins = [helper.make_tensor_value_info("a", T.FLOAT, a_shape)]
    inits = [] if case == "live_b" else [_c("w", k, n)]
    if case == "live_b":
        ins.append(helper.make_tensor_value_info("w", T.FLOAT, [k, n]))
    if case == "live_c_beta":
        ins.append(helper.make_tensor_value_info("c", T.FLOAT, [n]))
    else:
        inits.append(_c("c", *((3, n) if case == "full_c" else (n,))))
    m = _model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], **attrs)], ins,
               [helper.make_tensor_value_info("y", T.FLOAT, [3, n])], inits)
    assert [x.op_type for x in gemm_to_matmul(import_model(m)).nodes] == ["Gemm"]
    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in ins}
    assert _check(m, feeds) == ["Gemm"]
