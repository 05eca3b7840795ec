"""The 9 light models shipped with onnx: shipped outputs, then seeded random weights vs onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_all_on_device, assert_close
from light_models import light_inputs, light_model_names, load_light_model, ort_run, randomize_weights

import clglow

NAMES = light_model_names()
SLOW = {"vgg19", "bvlc_alexnet", "zfnet512", "densenet121", "resnet50", "inception_v2"}


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


def test_nine_light_models_are_present():
    assert len(NAMES) == 9, NAMES


@pytest.mark.parametrize("name", _params(NAMES))
def test_light_model_shipped_outputs(name):
    lm = load_light_model(name)
    sess = clglow.InferenceSession(lm.model)
    assert_all_on_device(sess)
    got = sess.run(None, lm.inputs)
    for out, g in zip(sess.get_outputs(), got):
        np.testing.assert_allclose(g, lm.outputs[out.name], rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("name", _params(NAMES))
def test_light_model_random_weights(name):
    lm = load_light_model(name)
    model = randomize_weights(lm.model, seed=1)
    feeds = light_inputs(model)
    sess = clglow.InferenceSession(model)
    assert_all_on_device(sess)
    got = sess.run(None, feeds)
    ref = ort_run(model, feeds)
    for g, r in zip(got, ref):
        assert float(np.std(r)) > 1e-3  # the weights make a difference
        assert_close(g, r)
