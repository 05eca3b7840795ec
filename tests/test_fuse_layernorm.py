"""A LayerNorm written out in primitive ops (exports before opset 17) becomes one
clglow.LayerNormalization node (passes/fuse_layernorm.py), computing what onnxruntime computes;
near misses are left alone and still compute the right thing."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)

W = 48


def _ln_model(opset: int = 13, square: str = "Pow", affine: bool = True, extra_output: str = "",
              axes=(-1,), keepdims: int = 1):
    def mean(src: str, dst: str):
        if opset >= 18:
            return helper.make_node("ReduceMean", [src, "axes"], [dst], keepdims=keepdims)
        return helper.make_node("ReduceMean", [src], [dst], axes=list(axes), keepdims=keepdims)

    nodes = [mean("x", "m"), helper.make_node("Sub", ["x", "m"], ["d"])]
    nodes.append(helper.make_node("Pow", ["d", "two"], ["p"]) if square == "Pow"
                 else helper.make_node("Mul", ["d", "d"], ["p"]))
    nodes += [mean("p", "v"), helper.make_node("Add", ["v", "eps"], ["ve"]),
              helper.make_node("Sqrt", ["ve"], ["s"]), helper.make_node("Div", ["d", "s"], ["n"])]
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(np.array(list(axes), np.int64), "axes")]
    last = "n"
    if affine:
        nodes += [helper.make_node("Mul", ["n", "g"], ["ng"]), helper.make_node("Add", ["ng", "b"], ["y"])]
        inits += [numpy_helper.from_array(rng.standard_normal(W).astype(np.float32), "g"),
                  numpy_helper.from_array(rng.standard_normal(W).astype(np.float32), "b")]
        last = "y"
    outs = [helper.make_tensor_value_info(last, T.FLOAT, [2, 5, W])]
    if extra_output:
        outs.append(helper.make_tensor_value_info(extra_output, T.FLOAT, [2, 5, W if extra_output == "d" else 1]))
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", T.FLOAT, [2, 5, W])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _run(model):
    x = (np.random.default_rng(12).standard_normal((2, 5, W)) * 3 + 1).astype(np.float32)
    sess = clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, {"x": x})
    want = models.ort_run(model, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_decomposed_layernorm_is_one_node(opset, square, affine):
    assert _run(_ln_model(opset, square, affine)) == ["LayerNormalization"]


@pytest.mark.parametrize("kwargs", [dict(extra_output="m"), dict(extra_output="d"), dict(axes=(1,))],
                         ids=["mean_is_an_output", "centered_is_an_output", "other_axis"])
def test_near_misses_are_left_alone(kwargs):
    ops = _run(_ln_model(**kwargs))
    assert "LayerNormalization" not in ops and "ReduceMean" in ops


def _rms_model(square: str = "Pow", scaling: str = "one_over", gamma: str = "after", extra_output: str = "",
               axes=(-1,)):
    """Hugging Face's T5LayerNorm / LlamaRMSNorm as exported: x * (1 / sqrt(mean(x^2) + eps)) * g,
    with the scaling written each way exporters write it."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]) if square == "Pow"
             else helper.make_node("Mul", ["x", "x"], ["p"]),
             helper.make_node("ReduceMean", ["p"], ["v"], axes=list(axes), keepdims=1),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"])]
    if scaling == "one_over":
        nodes += [helper.make_node("Div", ["one", "s"], ["r"]), helper.make_node("Mul", ["x", "r"], ["n"])]
    elif scaling == "reciprocal":
        nodes += [helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Mul", ["r", "x"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["x", "s"], ["n"]))
    rng = np.random.default_rng(13)
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(rng.standard_normal(W).astype(np.float32), "g")]
    last = "n"
    if gamma:
        nodes.append(helper.make_node("Mul", ["g", "n"] if gamma == "before" else ["n", "g"], ["y"]))
        last = "y"
    outs = [helper.make_tensor_value_info(last, T.FLOAT, [2, 5, W])]
    if extra_output:
        outs.append(helper.make_tensor_value_info(extra_output, T.FLOAT, [2, 5, 1]))
    g = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", T.FLOAT, [2, 5, W])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("scaling", ["one_over", "reciprocal", "divide"])
@pytest.mark.parametrize("gamma", ["after", "before", ""], ids=["gamma_after", "gamma_before", "no_gamma"])
def test_decomposed_rms_norm_is_one_node(square, scaling, gamma):
    assert _run(_rms_model(square, scaling, gamma)) == ["RMSNormalization"]


@pytest.mark.parametrize("kwargs", [dict(extra_output="v"), dict(axes=(1,))], ids=["mean_is_an_output", "other_axis"])
def test_rms_near_misses_are_left_alone(kwargs):
    ops = _run(_rms_model(**kwargs))
    assert "RMSNormalization" not in ops and "ReduceMean" in ops
