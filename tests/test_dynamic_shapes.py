"""Dynamic shapes: symbolic dims resolved at run time, one cached plan per concrete shape.

A ResNet-50 with a symbolic batch runs at batch 1 and 2 (8 is marked slow); the transformer
encoder and the causal decoder of tests/models.py run at several sequence lengths; every
result matches onnxruntime, and a second run of a shape reuses its plan.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/ for `models`

import models  # noqa: E402

import clglow  # noqa: E402


def _close(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-3, atol_rel: float = 1e-4) -> None:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    atol = atol_rel * max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def resnet_dynamic():
    from clglow.models import resnet50

    model = resnet50(batch="N")
    return model, clglow.InferenceSession(model)


@pytest.mark.parametrize("batch", [1, 2, pytest.param(8, marks=pytest.mark.slow)])
def test_resnet50_dynamic_batch(resnet_dynamic, batch):
    model, sess = resnet_dynamic
    assert sess.get_inputs()[0].shape[0] == "N"
    x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    (got,) = sess.run(None, {"data": x})
    (ref,) = models.ort_run(model, {"data": x})
    assert got.shape == (batch, 1000)
    _close(got, ref)
    plan = sess._engine.last_plan
    sess.run(None, {"data": x})
    assert sess._engine.last_plan is plan, "the plan of a seen shape is reused"


@pytest.mark.parametrize("name", ["transformer_encoder", "causal_decoder", "causal_decoder_trilu"])
def test_sequence_lengths(name):
    build, _spec, outputs = models.MODEL_SPECS[name]
    model = build()
    sess = clglow.InferenceSession(model)
    seq_dim = "seq_len" if name == "transformer_encoder" else "seq"
    for seq in (1, 5, 16, 5):  # 5 twice: the second run reuses its plan
        feeds = models.sample_inputs(model, seed=seq, dims={seq_dim: seq})
        got = sess.run(outputs, feeds)
        ref = models.ort_run(model, feeds, outputs)
        for g, r in zip(got, ref):
            _close(g, r)
        assert got[0].shape[1] == seq
