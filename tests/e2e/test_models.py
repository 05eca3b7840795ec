"""Transformer, causal decoder, depthwise CNN with SE blocks, pooling CNN: clglow vs onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_all_on_device, assert_close

import clglow
import models as tm


@pytest.mark.parametrize("name", ["mobilenet_se", "pooling_cnn"])
def test_cnn_all_on_device(name):
    builder = tm.MODEL_SPECS[name][0]
    model = builder()
    sess = clglow.InferenceSession(model)
    assert_all_on_device(sess)
    feeds = tm.sample_inputs(model, seed=3)
    for g, r in zip(sess.run(None, feeds), tm.ort_run(model, feeds)):
        assert_close(g, r)


@pytest.mark.parametrize("name", ["transformer_encoder", "causal_decoder", "causal_decoder_trilu"])
def test_sequence_models_at_several_lengths(name):
    model = tm.MODEL_SPECS[name][0]()
    sess = clglow.InferenceSession(model)
    for seq in (3, 8, 17):
        dims = {"seq": seq, "seq_len": seq}
        feeds = tm.sample_inputs(model, seed=seq, dims=dims)
        for g, r in zip(sess.run(None, feeds), tm.ort_run(model, feeds)):
            assert_close(g, r)
