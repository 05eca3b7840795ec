"""Attention kernel vs onnx.reference: 3-D/4-D inputs, masks, causal, grouped-query heads, past key/value."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(7)


def r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_4d_gqa_past(causal, mask):
    feeds = {"q": r(2, 4, 3, 8), "k": r(2, 2, 3, 8), "v": r(2, 2, 3, 6)}
    ins = ["q", "k", "v", "", "pk", "pv"]
    if mask == "bool":
        feeds["m"] = RNG.random((3, 5)) > 0.3
        ins[3] = "m"
    elif mask == "float":
        feeds["m"] = r(2, 1, 3, 4)
        ins[3] = "m"
    feeds["pk"], feeds["pv"] = r(2, 2, 2, 8), r(2, 2, 2, 6)
    check(helper.make_node("Attention", ins, ["y", "pko", "pvo", "qk"], is_causal=causal, qk_matmul_output_mode=2),
          feeds, opset=23, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", [0, 3])
def test_attention_float16_with_absent_middle_outputs(mode):
    """A float16 Attention (run on float32 copies, lower/half.py) whose present key / value are not
    asked for but qk_matmul_output is: each half output gets its own copy back (the copies were
    once matched to the outputs by the position among the present ones, so qk received Y)."""
    h = np.float16
    feeds = {"q": r(1, 2, 3, 8).astype(h), "k": r(1, 2, 4, 8).astype(h), "v": r(1, 2, 4, 6).astype(h)}
    check(helper.make_node("Attention", ["q", "k", "v"], ["y", "", "", "qk"], is_causal=1, qk_matmul_output_mode=mode),
          feeds, opset=23, rtol=2e-3, atol=2e-3)


def test_attention_3d_softcap():
    feeds = {"q": r(2, 3, 16), "k": r(2, 5, 8), "v": r(2, 5, 8)}
    check(helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2, softcap=2.0,
                           scale=0.3), feeds, opset=23, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [0, 4])
@pytest.mark.parametrize("pos", [True, False])
def test_rotary_embedding(interleaved, rot, pos):
    x = r(2, 3, 5, 8)  # (B, H, S, HD)
    half = (rot or 8) // 2
    feeds = {"x": x}
    if pos:
        feeds.update(c=r(10, half), s=r(10, half), p=RNG.integers(0, 10, (2, 5)).astype(np.int64))
    else:
        feeds.update(c=r(2, 5, half), s=r(2, 5, half))
    ins = ["x", "c", "s"] + (["p"] if pos else [])
    check(helper.make_node("RotaryEmbedding", ins, ["y"], interleaved=interleaved, rotary_embedding_dim=rot),
          feeds, opset=23, rtol=1e-5, atol=1e-5)
