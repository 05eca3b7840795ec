"""The model builders produce checker-valid models that onnxruntime runs with sane outputs.

No OpenCL here: onnxruntime (CPU) is the oracle; these tests guard the models that the e2e
tests and ``clglow demo`` use.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models as tm  # noqa: E402  (tests/models.py)
from e2e import light_models as lm  # noqa: E402

from clglow.models import resnet18, resnet50  # noqa: E402

ort = pytest.importorskip("onnxruntime")


def _check_sane(y: np.ndarray) -> None:
    assert np.isfinite(y).all()
    assert float(np.std(y)) > 1e-3, "outputs are (nearly) constant"


def _ops(m: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in m.graph.node}


# ---------------------------------------------------------------------------- test builders


@pytest.mark.parametrize("name", [n for n in tm.MODEL_SPECS if n != "resnet50_dynamic_batch"])
def test_builder_valid_and_runs(name: str) -> None:
    builder, inputs, outputs = tm.MODEL_SPECS[name]
    m = builder()
    onnx.checker.check_model(m, full_check=True)
    assert [i.name for i in m.graph.input] == list(inputs)
    assert [o.name for o in m.graph.output] == outputs
    for dims in ({}, {"seq": 3, "seq_len": 12}):
        feeds = tm.sample_inputs(m, dims=dims)
        for k, v in feeds.items():
            assert v.dtype == inputs[k][0]
        (y,) = tm.ort_run(m, feeds)
        _check_sane(y)


def test_builders_are_seeded() -> None:
    a, b, c = tm.mobilenet_se(seed=1), tm.mobilenet_se(seed=1), tm.mobilenet_se(seed=2)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()


def test_transformer_encoder_ops_and_mask() -> None:
    m = tm.transformer_encoder()
    assert {"Gather", "MatMul", "Reshape", "Transpose", "Softmax", "Unsqueeze", "Sub", "Erf",
            "LayerNormalization", "Range", "Shape"} <= _ops(m)
    feeds = tm.sample_inputs(m, dims={"seq_len": 9})
    feeds["attention_mask"][:] = 1.0
    feeds["attention_mask"][0, 6:] = 0.0
    (full,) = tm.ort_run(m, feeds)
    # padded tokens must not influence the others
    feeds2 = {k: v.copy() for k, v in feeds.items()}
    feeds2["input_ids"][0, 6:] = (feeds2["input_ids"][0, 6:] + 1) % 1000
    (changed,) = tm.ort_run(m, feeds2)
    np.testing.assert_allclose(full[0, :6], changed[0, :6], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mask", ["less", "trilu"])
def test_causal_decoder_is_causal(mask: str) -> None:
    m = tm.causal_decoder(mask=mask)
    assert {"Shape", "Gather", "Range", "Unsqueeze", "Where"} <= _ops(m)
    assert ("Trilu" if mask == "trilu" else "Less") in _ops(m)
    ids = np.random.default_rng(0).integers(0, 512, (1, 10), dtype=np.int64)
    (y10,) = tm.ort_run(m, {"input_ids": ids})
    (y4,) = tm.ort_run(m, {"input_ids": ids[:, :4]})
    assert y10.shape == (1, 10, 512) and y4.shape == (1, 4, 512)
    np.testing.assert_allclose(y10[:, :4], y4, rtol=1e-4, atol=1e-4)


def test_mobilenet_and_pooling_ops() -> None:
    assert {"Conv", "BatchNormalization", "Clip", "Sigmoid", "Mul", "GlobalAveragePool", "Add",
            "Gemm"} <= _ops(tm.mobilenet_se())
    m = tm.pooling_cnn()
    assert {"MaxPool", "AveragePool", "LRN", "Concat", "Softmax", "Dropout", "Identity"} <= _ops(m)
    attrs = {(n.op_type, a.name): onnx.helper.get_attribute_value(a) for n in m.graph.node for a in n.attribute}
    assert attrs[("MaxPool", "ceil_mode")] == 1 and attrs[("AveragePool", "count_include_pad")] == 1
    (p,) = tm.ort_run(m, tm.sample_inputs(m))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)


# ---------------------------------------------------------------------------- ResNets


@pytest.mark.parametrize("size", [64, pytest.param(224, marks=pytest.mark.slow)])
def test_resnet18_opsets_agree(size: int) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, size, size), dtype=np.float32)
    outs = []
    for kw in ({"opset": 13}, {"opset": 9}, {"opset": 13, "bn": False}):
        m = resnet18(image_size=size, **kw)  # the builder runs check_model(full_check=True)
        assert m.opset_import[0].version == kw["opset"]
        (y,) = tm.ort_run(m, {"data": x})
        assert y.shape == (1, 1000)
        _check_sane(y)
        outs.append(y)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[2], outs[0], rtol=1e-3, atol=1e-3)  # BN folded


def test_resnet_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        resnet50(opset=8)
    with pytest.raises(ValueError):
        resnet50(batch=0)
    with pytest.raises(ValueError):
        resnet18(head="pool")  # type: ignore[arg-type]


@pytest.mark.slow
def test_resnet50_topology_and_outputs() -> None:
    t = time.perf_counter()
    m = resnet50()
    build_s = time.perf_counter() - t
    assert build_s < 30
    counts: dict[str, int] = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    assert counts["Conv"] == 53 and counts["BatchNormalization"] == 53 and counts["Add"] == 16
    assert counts["MaxPool"] == 1 and counts["Gemm"] == 1 and counts["GlobalAveragePool"] == 1
    # torchvision resnet50: 25,557,032 trainable params (+ BN running stats here)
    n_params = sum(int(np.prod(t.dims)) for t in m.graph.initializer if "running" not in t.name)
    assert n_params == 25_557_032
    (y,) = tm.ort_run(m, {"data": np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)})
    _check_sane(y)
    assert 0.3 < float(y.std()) < 30


@pytest.mark.slow
def test_resnet50_dynamic_batch_and_opset9() -> None:
    m = tm.resnet50_dynamic_batch()
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    x = np.random.default_rng(0).standard_normal((3, 3, 224, 224), dtype=np.float32)
    (y3,) = tm.ort_run(m, {"data": x})
    (y1,) = tm.ort_run(m, {"data": x[1:2]})
    np.testing.assert_allclose(y3[1:2], y1, rtol=1e-4, atol=1e-4)
    m9 = resnet50(opset=9)
    onnx.checker.check_model(m9, full_check=True)
    (y9,) = tm.ort_run(m9, {"data": x[1:2]})
    np.testing.assert_allclose(y9, y1, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- light models


def test_light_models_listed() -> None:
    names = lm.light_model_names()
    assert len(names) == 9 and "resnet50" in names and "squeezenet" in names


_FAST_LIGHT = ["squeezenet", "inception_v1", "shufflenet", "inception_v2"]
_SLOW_LIGHT = ["bvlc_alexnet", "densenet121", "resnet50", "vgg19", "zfnet512"]


def _light_params() -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_LIGHT else n for n in _FAST_LIGHT + _SLOW_LIGHT]


@pytest.mark.parametrize("name", _light_params())
def test_light_model_shipped_outputs(name: str) -> None:
    lmod = lm.load_light_model(name)
    assert lmod.outputs, "no shipped output"
    got = tm.ort_run(lmod.model, lmod.inputs)
    for y, (out_name, expected) in zip(got, lmod.outputs.items()):
        np.testing.assert_allclose(y, expected, rtol=lmod.rtol, atol=1e-6, err_msg=out_name)


@pytest.mark.parametrize("name", _light_params())
def test_light_model_randomized(name: str) -> None:
    lmod = lm.load_light_model(name)
    r = lm.randomize_weights(lmod.model, seed=0)
    assert "ConstantOfShape" not in _ops(r)
    (y,) = tm.ort_run(r, lmod.inputs)
    (y0,) = list(lmod.outputs.values())
    assert y.shape == y0.shape
    _check_sane(y)
    assert np.unique(np.round(y, 6)).size > 10, "randomised outputs still (nearly) constant"
    r2 = lm.randomize_weights(lmod.model, seed=0)
    assert r2.SerializeToString() == r.SerializeToString()
