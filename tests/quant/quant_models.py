"""Quantized test models, made by onnxruntime's own quantization tool from the suite's float models.

`quantized_model(kind, fmt, per_channel)` returns the path of a cached quantized ONNX file:
  kind        "resnet" (ResNet-18 topology, 32x32 images, 10 classes), "mobilenet" (the suite's
              MobileNetV2/EfficientNet-style net with squeeze-excite, 32x32) or "bert" (the suite's
              BERT-style encoder, 1 layer, d_model 32)
  fmt         "qdq" (quantize_static, QuantFormat.QDQ), "qoperator" (quantize_static,
              QuantFormat.QOperator: QLinearConv/QLinearMatMul and the com.microsoft QLinear* ops) or
              "dynamic" (quantize_dynamic: DynamicQuantizeLinear + MatMulInteger / ConvInteger)
  per_channel per-channel weight scales (static formats)

Calibration data are seeded (CALIBRATION_SEED), so the same call gives the same file; files live
in a per-user temporary folder keyed by the arguments and the onnxruntime version (or
CLGLOW_QUANT_MODEL_DIR), written atomically.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/ for `models`

import models  # noqa: E402  (tests/models.py)

KINDS = ("resnet", "mobilenet", "bert")
# a small CNN made so that onnxruntime's quantizer writes the contrib ops the three above lack
# (QLinearLeakyRelu, QLinearAveragePool, QLinearConcat, QLinearSoftmax); not in KINDS
EXTRA_KINDS = ("contrib_mix",)
FORMATS = ("qdq", "qoperator", "dynamic")
CALIBRATION_SEED = 1234
CALIBRATION_BATCHES = 4
BERT_SEQ = 8


def float_model(kind: str) -> onnx.ModelProto:
    """The float32 model that `kind` quantizes (small sizes: the tests stay quick)."""
    if kind == "resnet":
        from clglow.models.resnet import resnet

        return resnet(18, opset=13, image_size=32, num_classes=10, seed=0)
    if kind == "mobilenet":
        return models.mobilenet_se(image_size=32, num_classes=10, seed=0)
    if kind == "bert":
        return models.transformer_encoder(seq=BERT_SEQ, vocab=100, d_model=32, heads=2, ffn=64, layers=1,
                                          max_pos=64, seed=0)
    if kind == "contrib_mix":
        return contrib_mix_model()
    raise ValueError(f"unknown model kind {kind!r}; choose one of {KINDS + EXTRA_KINDS}")


def contrib_mix_model(seed: int = 0) -> onnx.ModelProto:
    """Conv -> LeakyRelu -> two branches (AveragePool 3x3 / Conv 1x1) -> Concat -> Conv ->
    Sigmoid * x -> GlobalAveragePool -> Flatten -> Gemm -> Softmax, opset 13, input ``x``
    [1, 3, 16, 16] -> ``probs`` [1, 10]."""
    from clglow.models._graph import GraphBuilder, TensorProto

    g = GraphBuilder("contrib_mix", opset=13, seed=seed)
    x = g.input("x", TensorProto.FLOAT, [1, 3, 16, 16])

    def conv(inp: str, c_in: int, c_out: int, k: int, name: str) -> str:
        w = g.const(f"{name}.w", g.he_normal((c_out, c_in, k, k), c_in * k * k))
        b = g.const(f"{name}.b", (0.1 * g.rng.standard_normal(c_out)).astype(np.float32))
        return g.node("Conv", [inp, w, b], name, pads=[k // 2] * 4)

    h = g.node("LeakyRelu", [conv(x, 3, 8, 3, "c1")], "lrelu", alpha=0.1)
    a = g.node("AveragePool", [h], "avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    b = conv(h, 8, 8, 1, "c2")
    h = g.node("Concat", [a, b], "cat", axis=1)
    h = conv(h, 16, 16, 3, "c3")
    h = g.node("Mul", [h, g.node("Sigmoid", [h], "sig")], "swish")
    h = g.node("Flatten", [g.node("GlobalAveragePool", [h], "gap")], "flat", axis=1)
    w = g.const("fc.w", (0.3 * g.rng.standard_normal((16, 10))).astype(np.float32))
    fc = g.node("Gemm", [h, w, g.const("fc.b", np.zeros(10, np.float32))], "fc")
    g.node("Softmax", [fc], "probs", axis=-1)
    g.output("probs", TensorProto.FLOAT, [1, 10])
    return g.model(doc="CNN for the quantized contrib ops")


def sample_feeds(kind: str, seed: int = 0) -> dict:
    """Seeded inputs for `kind`'s float (and quantized) model."""
    model = float_model(kind)
    feeds = models.sample_inputs(model, seed=seed, dims={"seq_len": BERT_SEQ, "N": 1, "batch": 1})
    if kind == "bert":
        rng = np.random.default_rng(seed)
        feeds["input_ids"] = rng.integers(0, 100, size=feeds["input_ids"].shape).astype(np.int64)
        feeds["attention_mask"] = np.ones(feeds["attention_mask"].shape, np.float32)
    return feeds


class _Calibration:
    """onnxruntime's CalibrationDataReader protocol over seeded feeds."""

    def __init__(self, kind: str):
        self._it: Iterator[dict] = iter([sample_feeds(kind, CALIBRATION_SEED + i)
                                         for i in range(CALIBRATION_BATCHES)])

    def get_next(self) -> Optional[dict]:
        return next(self._it, None)

    def rewind(self) -> None:  # onnxruntime >= 1.17 may call it
        pass


def cache_dir() -> Path:
    base = os.environ.get("CLGLOW_QUANT_MODEL_DIR")
    if base:
        return Path(base)
    return Path(tempfile.gettempdir()) / f"clglow-quant-models-{os.getuid() if hasattr(os, 'getuid') else 0}"


def _key(kind: str, fmt: str, per_channel: bool) -> str:
    import onnxruntime

    src = Path(models.__file__).read_bytes() + Path(__file__).read_bytes()
    h = hashlib.sha256(src + onnxruntime.__version__.encode()).hexdigest()[:12]
    return f"{kind}-{fmt}-{'pc' if per_channel else 'pt'}-{h}"


def quantized_model(kind: str, fmt: str, per_channel: bool = False) -> Path:
    """Path of `kind` quantized by onnxruntime.quantization in format `fmt` (cached)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    out = cache_dir() / f"{_key(kind, fmt, per_channel)}.onnx"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / "float.onnx"
        onnx.save(float_model(kind), src)
        dst = Path(tmp) / "quant.onnx"
        if fmt == "dynamic":
            # reduce_range (7-bit weights) keeps onnxruntime's uint8 x int8 kernels exact on x86
            # without VNNI (quant_oracle.ort_exact_weights), so its runs are an oracle on every CPU
            quantize_dynamic(str(src), str(dst), per_channel=per_channel, weight_type=QuantType.QInt8,
                             reduce_range=True)
        else:
            quantize_static(str(src), str(dst), _Calibration(kind),
                            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                            per_channel=per_channel, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, reduce_range=True)
        os.replace(dst, out)
    return out


def op_counts(path: Path) -> dict:
    """{(domain, op_type): count} of a model file's nodes (what the quantizer wrote)."""
    counts: dict = {}
    for n in onnx.load(str(path)).graph.node:
        key = (n.domain or "ai.onnx", n.op_type)
        counts[key] = counts.get(key, 0) + 1
    return counts
