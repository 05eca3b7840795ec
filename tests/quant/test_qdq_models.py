"""QDQ fusion end to end on models quantized by onnxruntime's own tool (tests/quant/quant_models:
the suite's ResNet-18-style, MobileNetV2/EfficientNet-style and BERT-style models,
quantize_static in QDQ format, per-tensor and per-channel, seeded calibration).

Checked: every Conv/Gemm/MatMul of the quantized model is rewritten to its integer node (and the
Add/Mul/pools to the com.microsoft ones); onnxruntime running the rewritten graph with its own
integer kernels, and clglow's session, agree with onnxruntime's literal run (ORT_DISABLE_ALL)
within max(onnxruntime's fused-vs-literal gap, one output step); with CLGLOW_HOST_FALLBACK=0
the session loads with the integer nodes whose device lowerings are registered kept in the graph.
"""
from __future__ import annotations

import os
import sys
from collections import Counter

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import qdq_graphs as qg  # noqa: E402
import quant_models as qm  # noqa: E402

from clglow import InferenceSession  # noqa: E402
from clglow.frontend.onnx_model import import_model  # noqa: E402
from clglow.ir import Node  # noqa: E402
from clglow.lower.base import lookup  # noqa: E402
from clglow.partition import DEVICE  # noqa: E402
from clglow.passes.qdq import fuse_qdq  # noqa: E402

# float op -> the integer node the pass writes for it in these models
REWRITES = {"Conv": "QLinearConv", "Gemm": "QGemm", "MatMul": "QLinearMatMul"}
CONTRIB = {"resnet": {"QLinearAdd": 8, "QLinearGlobalAveragePool": 1},
           "mobilenet": {"QLinearAdd": 4, "QLinearMul": 17, "QLinearSigmoid": 17, "QLinearGlobalAveragePool": 5},
           "bert": {"QLinearAdd": 11, "QLinearMul": 4, "QLinearSoftmax": 1}}


def output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear writing output 0 (0 when another op writes it)."""
    out = model.graph.output[0].name
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if out in n.output and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            return float(np.max(onnx.numpy_helper.to_array(inits[n.input[1]])))
    return 0.0


@pytest.fixture(scope="module", params=[(k, pc) for k in qm.KINDS for pc in (False, True)],
                ids=[f"{k}-{'pc' if pc else 'pt'}" for k in qm.KINDS for pc in (False, True)])
def case(request):
    kind, pc = request.param
    path = qm.quantized_model(kind, "qdq", pc)
    model = onnx.load(str(path))
    feeds = qm.sample_feeds(kind, seed=11)
    literal = qg.ort_outputs(model, feeds)[0]
    # the models' weights are 7-bit (quant_models: reduce_range), so onnxruntime's fused integer
    # kernels are exact on every CPU and its fused-vs-literal gap is the tolerance
    gap = float(np.max(np.abs(qg.ort_outputs(model, feeds, True)[0] - literal)))
    return kind, path, model, feeds, literal, max(gap, output_step(model), 1e-5)


def test_every_quantized_op_rewritten(case):
    kind, _, model, _, _, _ = case
    before = Counter(n.op_type for n in model.graph.node)
    g = fuse_qdq(import_model(model), require_kernel=False)
    after = Counter(n.op_type for n in g.nodes)
    for op, qop in REWRITES.items():
        assert after[op] == 0, (op, after)
        assert after[qop] == before[op], (qop, after)
    for qop, count in CONTRIB[kind].items():
        assert after[qop] == count, (qop, after)
    # the weights stay 8-bit constants
    for n in g.nodes:
        if n.op_type in ("QLinearConv", "QGemm"):
            assert g.const(n.inputs[3]) is not None and g.values[n.inputs[3]].dtype == np.int8, n.name


def test_rewritten_graph_on_onnxruntime(case):
    """onnxruntime's own integer kernels on the rewritten graph: the rewrite means what the QDQ
    graph means."""
    _, _, model, feeds, literal, tol = case
    g = fuse_qdq(import_model(model), require_kernel=False)
    ours = qg.ort_outputs(qg.graph_model(g, model.opset_import[0].version), feeds)[0]
    assert float(np.max(np.abs(ours - literal))) <= tol


def test_session_matches_literal_run(case):
    _, path, _, feeds, literal, tol = case
    got = InferenceSession(str(path)).run(None, feeds)[0]
    assert got.shape == literal.shape
    assert float(np.max(np.abs(got - literal))) <= tol


def test_integer_nodes_on_opencl(case, monkeypatch):
    kind, path, model, feeds, literal, tol = case
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    sess = InferenceSession(str(path))
    ops = Counter(n.op_type for n in sess.graph.nodes)
    before = Counter(n.op_type for n in model.graph.node)
    expected = [qop for op, qop in REWRITES.items() if before[op]] + list(CONTRIB[kind])
    kept = [qop for qop in expected if ops[qop]]
    for qop in expected:
        domain = "" if qop in REWRITES.values() else "com.microsoft"
        if lookup(Node(qop, qop, [], [], {}, domain)) is not None:
            assert qop in kept, (qop, ops)
    assert kept, f"no integer node of {expected} has a device lowering yet"
    got = sess.run(None, feeds)[0]
    assert float(np.max(np.abs(got - literal))) <= tol
    assert {p.where for p in sess.placement if p.op_type in kept} == {DEVICE}  # the plan's placement


class Calibration:
    """onnxruntime's CalibrationDataReader over quant_models' seeded feeds."""

    def __init__(self, kind: str):
        self._it = iter([qm.sample_feeds(kind, qm.CALIBRATION_SEED + i) for i in range(qm.CALIBRATION_BATCHES)])

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        pass


@pytest.fixture(scope="module")
def kept_relu_model(tmp_path_factory):
    """The ResNet-style model preprocessed (BatchNormalization folded into Conv) and quantized with
    onnxruntime's QDQKeepRemovableActivations: Conv -> Relu -> Q chains as the quantizer writes them."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    tmp = tmp_path_factory.mktemp("kept_relu")
    src, pre, dst = (tmp / f for f in ("float.onnx", "pre.onnx", "quant.onnx"))
    onnx.save(qm.float_model("resnet"), src)
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    quantize_static(str(pre), str(dst), Calibration("resnet"),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, reduce_range=True,
                    extra_options={"QDQKeepRemovableActivations": True})
    return dst


def test_kept_activations_fused(kept_relu_model):
    """Every Relu the quantizer kept becomes a QLinearConv's qclamp (or an integer Clip), on
    OpenCL, within onnxruntime's fused-vs-literal gap."""
    model = onnx.load(str(kept_relu_model))
    before = Counter(n.op_type for n in model.graph.node)
    assert before["Relu"] > 0
    g = fuse_qdq(import_model(model), require_kernel=False)
    after = Counter(n.op_type for n in g.nodes)
    assert after["Relu"] == 0 and after["Conv"] == 0, after
    # each Relu: a QLinearConv's qclamp, or the integer Clip after a residual QLinearAdd
    assert sum("qclamp" in n.attrs for n in g.nodes) + after["Clip"] == before["Relu"], (before, after)
    feeds = qm.sample_feeds("resnet", seed=3)
    literal = qg.ort_outputs(model, feeds)[0]
    gap = float(np.max(np.abs(qg.ort_outputs(model, feeds, True)[0] - literal)))  # 7-bit weights: exact
    sess = InferenceSession(str(kept_relu_model))
    assert {p.where for p in sess.placement if p.op_type == "QLinearConv"} == {DEVICE}
    got = sess.run(None, feeds)[0]
    assert float(np.max(np.abs(got - literal))) <= max(gap, output_step(model), 1e-5)
