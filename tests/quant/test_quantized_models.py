"""Models quantized by onnxruntime's own tool (tests/quant/quant_models.py: the suite's ResNet-,
MobileNet- and BERT-style models, seeded calibration) end to end against onnxruntime's literal run.

QOperator format (QLinearConv, QLinearMatMul and the com.microsoft QLinear*/QGemm ops) and dynamic
quantization (DynamicQuantizeLinear, MatMulInteger, ConvInteger) run with host fallback off:
every node on OpenCL. The QDQ format's fusion is tested in test_qdq*.py; here only that such
models load and run correctly.

Tolerance: one quantization step of the output's DequantizeLinear (where the output comes from
one), else onnxruntime's float tolerance; clglow is exact on the integer ops, so the outputs are
expected equal but for float rounding in the float ops between them. QDQ models: within
onnxruntime's own gap between its fused and literal runs where that is larger (the BERT-style
model: 3 output steps, which clglow's fused run reproduces exactly).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from quant_models import EXTRA_KINDS, KINDS, op_counts, quantized_model, sample_feeds
from quant_oracle import clglow_session_run, ort_literal_run


def _output_step(path) -> float:
    """The scale of the DequantizeLinear producing the model's first output, 0 if none does."""
    m = onnx.load(str(path))
    out = m.graph.output[0].name
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if out in n.output and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            return float(np.max(inits[n.input[1]]))
    return 0.0


def _ort_gap(path, feeds: dict, literal: list) -> float:
    """onnxruntime's own gap between its optimised run (QDQ groups fused into integer kernels)
    and its literal run of the same model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    fused = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    return max(float(np.abs(f - r).max()) for f, r in zip(fused, literal))


def _compare(path, kind: str, device_only: bool, allow_ort_gap: bool = False) -> object:
    """clglow vs onnxruntime's literal run: within one output step (or 1e-4 of the largest
    value), or, with `allow_ort_gap` (QDQ models, which clglow fuses as onnxruntime does), within
    onnxruntime's own fused-vs-literal gap when that is larger."""
    feeds = sample_feeds(kind, seed=7)
    ref = ort_literal_run(path, feeds)
    got, sess = clglow_session_run(path, feeds, device_only=device_only)
    step = max(_output_step(path), _ort_gap(path, feeds, ref) if allow_ort_gap else 0.0)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        scale = float(np.abs(r).max())
        atol = max(step * 1.0001, 1e-4 * scale)
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=atol)
    return sess


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("kind", KINDS + EXTRA_KINDS)
def test_qoperator_model_on_opencl(kind, per_channel):
    path = quantized_model(kind, "qoperator", per_channel)
    ops = op_counts(path)
    assert any(d == "com.microsoft" for d, _ in ops), ops  # the contrib ops are really there
    sess = _compare(path, kind, device_only=True)
    assert all(p.where == "opencl" for p in sess.placement)


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_model_on_opencl(kind):
    path = quantized_model(kind, "dynamic", False)
    sess = _compare(path, kind, device_only=True)
    assert all(p.where == "opencl" for p in sess.placement)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("kind", KINDS + EXTRA_KINDS)
def test_qdq_model_loads_and_runs(kind, per_channel):
    _compare(quantized_model(kind, "qdq", per_channel), kind, device_only=False, allow_ort_gap=True)


def test_contrib_mix_has_every_contrib_op():
    """The extra model makes the quantizer write the contrib ops the ResNet/MobileNet/BERT models
    lack, so that each runs inside a real quantized model (test_qoperator_model_on_opencl)."""
    ops = {op for d, op in op_counts(quantized_model("contrib_mix", "qoperator")) if d == "com.microsoft"}
    assert {"QLinearLeakyRelu", "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QLinearSigmoid",
            "QLinearMul", "QLinearGlobalAveragePool", "QGemm"} <= ops


def test_quantized_model_cache_is_stable(tmp_path, monkeypatch):
    """The same arguments give the same file (seeded calibration), written once."""
    monkeypatch.setenv("CLGLOW_QUANT_MODEL_DIR", str(tmp_path))
    a = quantized_model("bert", "qoperator", False)
    mtime = a.stat().st_mtime_ns
    b = quantized_model("bert", "qoperator", False)
    assert a == b and b.stat().st_mtime_ns == mtime
    monkeypatch.setenv("CLGLOW_QUANT_MODEL_DIR", str(tmp_path / "other"))
    c = quantized_model("bert", "qoperator", False)
    assert c.read_bytes() == a.read_bytes()
