"""Opset 27's ops of recurrent hybrid models on OpenCL: CausalConvWithState (kernels_cl/causal_conv.cl)
and LinearAttention (kernels_cl/linear_attention.cl), against onnx.reference at shapes beyond the
node suite's (several work-groups of channels and state columns, prefill lengths, GQA groups,
ragged sizes), with and without the optional inputs and the present-state output. The node
suite's own cases (tests/onnx_backend) run them with the host fallback off too."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import run_node  # noqa: E402
except ImportError:
    from run_launches import run_node  # type: ignore  # noqa: E402

OPSET = 27
RNG = np.random.default_rng(27)


def _f(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("b,c,length,k", [(2, 70, 37, 4), (1, 130, 1, 4), (3, 5, 2, 6), (1, 64, 9, 1)])
@pytest.mark.parametrize("bias,past,act", [(True, True, "silu"), (False, False, "none"), (True, False, "swish"),
                                           (False, True, "none")])
def test_causal_conv_with_state(b, c, length, k, bias, past, act):
    feeds = {"x": _f(b, c, length)}
    consts = {"w": _f(c, 1, k)}
    names = ["x", "w", "bias" if bias else "", "past" if past else ""]
    if bias:
        consts["bias"] = _f(c)
    if past:
        feeds["past"] = _f(b, c, k - 1)
    node = helper.make_node("CausalConvWithState", names, ["y", "present"], activation=act)
    got, want = run_node(node, feeds, consts, opset=OPSET)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_causal_conv_without_the_present_state():
    """present_state not asked for: only the output is written."""
    node = helper.make_node("CausalConvWithState", ["x", "w"], ["y"], activation="silu")
    got, want = run_node(node, {"x": _f(2, 33, 17)}, {"w": _f(33, 1, 3)}, opset=OPSET)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule,decay,beta", [("linear", None, None), ("gated", "head", None),
                                             ("gated", "key", None), ("delta", None, "head"),
                                             ("gated_delta", "key", "head"), ("gated_delta", "head", "shared")])
@pytest.mark.parametrize("b,t,hq,hkv,dk,dv,past", [(2, 13, 4, 2, 48, 20, True), (1, 1, 3, 3, 16, 70, True),
                                                   (1, 21, 6, 1, 5, 9, False)])
def test_linear_attention(rule, decay, beta, b, t, hq, hkv, dk, dv, past):
    # keys normalised and decays negative, as the layers that use these rules make them: the
    # delta rule's state then stays bounded over the tokens
    kk = _f(b, t, hkv, dk)
    kk /= np.linalg.norm(kk, axis=-1, keepdims=True)
    feeds = {"q": _f(b, t, hq * dk), "k": kk.reshape(b, t, hkv * dk), "v": _f(b, t, hkv * dv)}
    names = ["q", "k", "v", "past" if past else "", "g" if decay else "", "beta" if beta else ""]
    if past:
        feeds["past"] = _f(b, hkv, dk, dv) * 0.1
    if decay:
        feeds["g"] = -np.abs(_f(b, t, hkv * dk if decay == "key" else hkv)) * 0.3
    if beta:
        feeds["beta"] = RNG.random((b, t, 1 if beta == "shared" else hkv)).astype(np.float32)
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "present"], update_rule=rule, q_num_heads=hq,
                            kv_num_heads=hkv)
    got, want = run_node(node, feeds, {}, opset=OPSET)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))


def test_linear_attention_scale_and_no_present_state():
    """An explicit scale, the present state not asked for."""
    feeds = {"q": _f(1, 7, 2 * 8), "k": _f(1, 7, 2 * 8), "v": _f(1, 7, 2 * 11)}
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y"], update_rule="linear", q_num_heads=2,
                            kv_num_heads=2, scale=0.37)
    got, want = run_node(node, feeds, {}, opset=OPSET)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4 * float(np.abs(want[0]).max()))


def test_float16_models():
    """Both ops on float16 tensors (read and written as half, float arithmetic) vs onnx.reference,
    within half rounding."""
    h = np.float16
    node = helper.make_node("CausalConvWithState", ["x", "w", "bias", "past"], ["y", "present"], activation="silu")
    feeds = {"x": _f(2, 40, 19).astype(h), "past": _f(2, 40, 3).astype(h)}
    got, want = run_node(node, feeds, {"w": _f(40, 1, 4).astype(h), "bias": _f(40).astype(h)}, opset=OPSET)
    for g, w in zip(got, want):
        assert g.dtype == h
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2e-3, atol=2e-3)
    kk = _f(1, 9, 2, 16)
    kk /= np.linalg.norm(kk, axis=-1, keepdims=True)
    feeds = {"q": _f(1, 9, 4 * 16).astype(h), "k": kk.reshape(1, 9, 32).astype(h), "v": _f(1, 9, 2 * 12).astype(h),
             "past": (_f(1, 2, 16, 12) * 0.1).astype(h), "g": (-np.abs(_f(1, 9, 2)) * 0.3).astype(h),
             "beta": RNG.random((1, 9, 2)).astype(h)}
    node = helper.make_node("LinearAttention", ["q", "k", "v", "past", "g", "beta"], ["y", "present"],
                            update_rule="gated_delta", q_num_heads=4, kv_num_heads=2)
    got, want = run_node(node, feeds, {}, opset=OPSET)
    for g, w in zip(got, want):
        assert g.dtype == h
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=3e-3,
                                   atol=3e-3 * max(1.0, float(np.abs(w.astype(np.float32)).max())))
