"""passes/fuse_layernorm.fuse_channel_norm: Transpose(NCHW -> NHWC) -> LayerNormalization(last
axis) -> Transpose(back) becomes one clglow.ChannelNorm (norm.cl channelnorm: 16 pixels a
work-item, the pixels past an image's last full 16 one at a time); other permutations, an LN over
another axis or a used intermediate stay. Against onnxruntime, float32 and half storage."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.frontend.onnx_model import import_model
from clglow.passes.pipeline import optimize

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(11)


def _model(shape, case: str = "plain", bias: bool = True):
    r = len(shape)
    to_last = [0] + list(range(2, r)) + [1]
    back = [0, r - 1] + list(range(1, r - 1))
    if case == "wrong_back":
        back = to_last
    c = shape[1]
    ln_in = [ "t", "g"] + (["b"] if bias else [])
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=to_last),
             helper.make_node("LayerNormalization", ln_in, ["n"], axis=-1, epsilon=1e-6),
             helper.make_node("Transpose", ["n"], ["y"], perm=back)]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [shape[i] for i in np.argsort(np.argsort(back))]
                                          if case == "wrong_back" else list(shape))]
    if case == "ln_used":
        outs.append(helper.make_tensor_value_info("n", T.FLOAT, [shape[i] for i in to_last]))
    inits = [numpy_helper.from_array((RNG.random(c) + 0.5).astype(np.float32), "g"),
             numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "b")]
    g = helper.make_graph(nodes, "cn", [helper.make_tensor_value_info("x", T.FLOAT, list(shape))], outs,
                          inits[:2] if bias else inits[:1])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("shape", [(1, 40, 8, 8), (2, 24, 5, 7), (2, 3, 33), (1, 8, 2, 3, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_channel_norm_matches_onnxruntime(shape, bias):
    m = _model(shape, bias=bias)
    assert [n.op_type for n in optimize(import_model(m)).nodes] == ["ChannelNorm"]
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], models.ort_run(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_channel_norm_on_half_storage():
    m = _model((1, 16, 6, 6))
    x = RNG.standard_normal((1, 16, 6, 6)).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString(), clglow.SessionOptions(precision="fp16"))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], models.ort_run(m, {"x": x})[0], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("case", ["wrong_back", "ln_used"])
def test_other_patterns_stay(case):
    m = _model((1, 8, 4, 4), case)
    assert "ChannelNorm" not in [n.op_type for n in optimize(import_model(m)).nodes]
    x = RNG.standard_normal((1, 8, 4, 4)).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString())
    for got, want in zip(sess.run(None, {"x": x}), models.ort_run(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
