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


def _scale_model(case: str):
    """Conv -> Mul(gamma) -> Add(x): a layer scale; GELU in erf form after a 1x1 conv."""
    c = 4
    gamma_shape = {"per_channel": [c, 1, 1], "leading_one": [1, c, 1, 1], "scalar": [],
                   "per_pixel": [1, 1, 5, 5]}[case]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["y0", "gamma"] if case != "scalar" else ["gamma", "y0"], ["ys"]),
             helper.make_node("Add", ["ys", "x"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["hd"]), helper.make_node("Erf", ["hd"], ["he"]),
             helper.make_node("Add", ["he", "one"], ["h1"]), helper.make_node("Mul", ["h", "h1"], ["hm"]),
             helper.make_node("Mul", ["hm", "half"], ["y"])]
    inits = [numpy_helper.from_array(RNG.standard_normal((c, c, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(RNG.standard_normal(gamma_shape).astype(np.float32), "gamma"),
             numpy_helper.from_array(RNG.standard_normal((8, c, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.array(2 ** 0.5, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, "ls", [helper.make_tensor_value_info("x", T.FLOAT, [1, c, 5, 5])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 8, 5, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("case,folds", [("per_channel", True), ("leading_one", True), ("scalar", True),
                                        ("per_pixel", False)])
def test_layer_scale_folds_into_the_conv_and_gelu_fuses(case, folds):
    """The scale folds (then fuse_conv takes the residual Add: one FusedConv); a per-pixel factor
    does not. The erf GELU after the 1x1 conv is that conv's epilogue either way."""
    from clglow.passes.pipeline import optimize

    m = _scale_model(case)
    g = optimize(import_model(m))
    ops = [n.op_type for n in g.nodes]
    assert ops == (["FusedConv", "FusedConv"] if folds else ["Conv", "FusedElementwise", "FusedConv"]), ops
    assert [n.attrs.get("activation") for n in g.nodes if n.op_type == "FusedConv"][-1] == "Gelu"
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString())
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], models.ort_run(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
