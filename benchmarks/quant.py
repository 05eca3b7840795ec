"""Quantized models side by side: clglow's int8 run (QDQ fusion + integer kernels) vs
onnxruntime's int8 run of the same file, and vs clglow's own float32 run of the float model.

    python -m benchmarks quant                          # QDQ ResNet-50, per-channel
    python -m benchmarks quant resnet50 mobilenet bert --repeat 20
    python -m benchmarks quant resnet50 --per-tensor --format qdq

The quantized file is made the way a user makes one: onnxruntime.quantization.quant_pre_process
(shape inference, BatchNormalization folded into Conv by onnxruntime's optimiser) and then
quantize_static (QDQ format by default; uint8 activations, int8 weights, per-channel unless
--per-tensor) with seeded calibration batches (CALIBRATION_SEED, CALIBRATION_BATCHES). Files are
cached in a temporary folder keyed by the arguments and the onnxruntime version.

Timings alternate the backends round by round (runner.alternate); onnxruntime runs with the
runner's options (one intra-op thread per core, no spinning). The table gives median latency,
clglow int8 / onnxruntime int8 (below 1: clglow is faster), clglow fp32 / clglow int8 (above 1:
the int8 run is faster), the largest difference from onnxruntime's literal run of the quantized
file (ORT_DISABLE_ALL) next to onnxruntime's own fused-vs-literal difference, and how many
integer nodes clglow's plan runs on OpenCL (QLinearConv, QLinearMatMul, QGemm, com.microsoft QLinear*).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import onnx

from . import models as M
from .runner import alternate, clglow_session, device_name, ort_session

CALIBRATION_SEED = 1234
CALIBRATION_BATCHES = 4
QUANT_MODELS = ("resnet50", "resnet18", "mobilenet", "bert")
INTEGER_OPS = {"QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "QLinearConcat",
               "QLinearAveragePool", "QLinearGlobalAveragePool", "MatMulInteger", "ConvInteger"}


class Calibration:
    """onnxruntime's CalibrationDataReader over seeded feeds of `model`."""

    def __init__(self, model: onnx.ModelProto):
        self._it = iter([M.feeds(model, seed=CALIBRATION_SEED + i) for i in range(CALIBRATION_BATCHES)])

    def get_next(self) -> Optional[dict]:
        return next(self._it, None)

    def rewind(self) -> None:
        pass


def cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"clglow-bench-quant-{os.getuid() if hasattr(os, 'getuid') else 0}"


def quantized(name: str, model: onnx.ModelProto, fmt: str, per_channel: bool) -> Path:
    """Path of `model` pre-processed and quantized by onnxruntime's tool (cached)."""
    import onnxruntime
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    blob = model.SerializeToString()
    key = hashlib.sha256(blob + f"{fmt}{per_channel}{onnxruntime.__version__}".encode()).hexdigest()[:12]
    out = cache_dir() / f"{name}-{fmt}-{'pc' if per_channel else 'pt'}-{key}.onnx"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src, pre, dst = (Path(tmp) / f for f in ("float.onnx", "pre.onnx", "quant.onnx"))
        onnx.save(model, src)
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        if fmt == "dynamic":
            quantize_dynamic(str(pre), str(dst), per_channel=per_channel, weight_type=QuantType.QInt8)
        else:
            quantize_static(str(pre), str(dst), Calibration(model),
                            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                            per_channel=per_channel, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8)
        os.replace(dst, out)
    return out


def literal_session(model_bytes: bytes):
    """onnxruntime running the file as written (each Q/DQ and float op), the reference."""
    import onnxruntime as ort

    from .runner import ort_options

    opts = ort_options()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def max_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) for x, y in zip(a, b))


def bench_one(name: str, batch: int, fmt: str, per_channel: bool, repeat: int, warmup: int, log=print) -> dict:
    """One model's row (latencies in ms, ratios, differences, integer node count)."""
    model, _, _ = M.load(name, batch)
    path = quantized(name, model, fmt, per_channel)
    qbytes = path.read_bytes()
    feeds = M.feeds(model, seed=0)
    log(f"{name}: loading (quantized file {path})")
    ours_q, ort_q, ours_f = clglow_session(qbytes), ort_session(qbytes), clglow_session(model.SerializeToString())
    ref = literal_session(qbytes).run(None, feeds)
    fused = ort_q.run(None, feeds)
    got = ours_q.run(None, feeds)
    # what the plan runs (a fused node whose kernel refused runs as its float nodes instead)
    integer = sum(p.op_type in INTEGER_OPS and p.where == "opencl" for p in ours_q.placement)
    t = alternate({"clglow int8": lambda: ours_q.run(None, feeds), "onnxruntime int8": lambda: ort_q.run(None, feeds),
                   "clglow fp32": lambda: ours_f.run(None, feeds)}, repeat, warmup)
    ms = {k: v.median * 1e3 for k, v in t.items()}
    return {"model": name, "batch": batch, "format": fmt, "per_channel": per_channel, "ms": ms,
            "vs_ort": ms["clglow int8"] / ms["onnxruntime int8"], "fp32_over_int8": ms["clglow fp32"] / ms["clglow int8"],
            "diff": max_diff(got, ref), "ort_gap": max_diff(fused, ref), "integer_nodes": integer,
            "device": device_name(ours_q)}


def table(rows: list) -> str:
    head = ("| model | format | clglow int8 ms | onnxruntime int8 ms | clglow/ort | clglow fp32 ms | fp32/int8 "
            "| max diff vs ort literal (ort fused) | integer nodes |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        ms = r["ms"]
        fmt = f"{r['format']} {'per-channel' if r['per_channel'] else 'per-tensor'}"
        lines.append(f"| {r['model']} b{r['batch']} | {fmt} | {ms['clglow int8']:.2f} | {ms['onnxruntime int8']:.2f} "
                     f"| {r['vs_ort']:.2f} | {ms['clglow fp32']:.2f} | {r['fp32_over_int8']:.2f} "
                     f"| {r['diff']:.3g} ({r['ort_gap']:.3g}) | {r['integer_nodes']} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks quant", description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=["resnet50"], help=f"builtin models ({', '.join(QUANT_MODELS)})")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--format", choices=("qdq", "qoperator", "dynamic"), default="qdq")
    p.add_argument("--per-tensor", action="store_true", help="per-tensor weight scales (default per-channel)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args(argv)
    rows = []
    for name in a.models:
        if name not in QUANT_MODELS:
            raise SystemExit(f"unknown model {name!r}; choose from {', '.join(QUANT_MODELS)}")
        rows.append(bench_one(name, a.batch, a.format, not a.per_tensor, a.repeat, a.warmup))
    print(f"device: {rows[0]['device'] if rows else '?'}")
    print(table(rows))
    return 0
