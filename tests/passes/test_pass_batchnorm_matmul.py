"""passes/batchnorm.py's MatMul fold: BatchNormalization over [M, C] fed by MatMul(x, W [K, C]
constant), directly or through a Flatten / Reshape that keeps the last index (LeViT's Linear +
BatchNorm1d), becomes the MatMul with scaled columns and an Add of the shift; a reshape that
moves the channel axis, a live W or a MatMul output read twice stay. Against onnxruntime."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.frontend.onnx_model import import_model
from clglow.passes.batchnorm import fold_batchnorm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(7)


def _model(case: str):
    c = 6
    x_shape = x_shape_of(case)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"])]
    bn_in = "m"
    if case in ("flatten", "moved_channel", "read_twice"):
        nodes.append(helper.make_node("Flatten", ["m"], ["f"], axis=2 if case != "moved_channel" else 1))
        bn_in = "f"
    elif case == "reshape":
        nodes.append(helper.make_node("Reshape", ["m", "shape"], ["f"]))
        bn_in = "f"
    nodes.append(helper.make_node("BatchNormalization", [bn_in, "g", "b", "mu", "var"], ["y"], epsilon=1e-3))
    ch = c if case != "moved_channel" else 5 * c
    inits = [numpy_helper.from_array(RNG.standard_normal((8, c)).astype(np.float32), "w"),
             numpy_helper.from_array((RNG.random(ch) + 0.5).astype(np.float32), "g"),
             numpy_helper.from_array(RNG.standard_normal(ch).astype(np.float32), "b"),
             numpy_helper.from_array(RNG.standard_normal(ch).astype(np.float32), "mu"),
             numpy_helper.from_array((RNG.random(ch) + 0.5).astype(np.float32), "var"),
             numpy_helper.from_array(np.array([10, c], np.int64), "shape")]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [2, 5 * c] if case == "moved_channel" else [10, c])]
    if case == "read_twice":
        outs.append(helper.make_tensor_value_info("m", T.FLOAT, [2, 5, c]))
    if case == "live_w":
        inits = inits[1:]
    ins = [helper.make_tensor_value_info("x", T.FLOAT, x_shape)]
    if case == "live_w":
        ins.append(helper.make_tensor_value_info("w", T.FLOAT, [8, c]))
    g = helper.make_graph(nodes, "bn_mm", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("case,folds", [("direct", True), ("flatten", True), ("reshape", True),
                                        ("moved_channel", False), ("read_twice", False), ("live_w", False)])
def test_batchnorm_after_matmul(case, folds):
    m = _model(case)
    g = fold_batchnorm(import_model(m))
    assert ("BatchNormalization" not in [n.op_type for n in g.nodes]) == folds
    feeds = {"x": RNG.standard_normal(x_shape_of(case)).astype(np.float32)}
    if case == "live_w":
        feeds["w"] = RNG.standard_normal((8, 6)).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString())
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def x_shape_of(case: str) -> list:
    return [10, 8] if case in ("direct", "live_w") else [2, 5, 8]
