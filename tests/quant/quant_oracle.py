"""Helpers of the quantized-model tests: onnxruntime's literal run (the oracle), a clglow run with
host fallback off, and the quantization-step comparison. The fixtures of conftest.py hand them out."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np
import onnx


ModelArg = Union[onnx.ModelProto, str, Path]


def _bytes(model: ModelArg) -> bytes:
    return model.SerializeToString() if isinstance(model, onnx.ModelProto) else Path(model).read_bytes()


def ort_literal_run(model: ModelArg, feeds: dict) -> list:
    """onnxruntime (CPU) with ORT_DISABLE_ALL: every node run as written."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(_bytes(model), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def clglow_session_run(model: ModelArg, feeds: dict, device_only: bool = True) -> tuple:
    """(outputs, session) of clglow; with device_only, host fallback is off for this session."""
    import clglow

    old = os.environ.get("CLGLOW_HOST_FALLBACK")
    if device_only:
        os.environ["CLGLOW_HOST_FALLBACK"] = "0"
    try:
        sess = clglow.InferenceSession(_bytes(model))
        return sess.run(None, feeds), sess
    finally:
        if old is None:
            os.environ.pop("CLGLOW_HOST_FALLBACK", None)
        else:
            os.environ["CLGLOW_HOST_FALLBACK"] = old


def assert_within_steps(got: np.ndarray, ref: np.ndarray, steps: int = 1) -> None:
    """Same shape and dtype, integer values at most `steps` apart."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    worst = int(diff.max()) if diff.size else 0
    assert worst <= steps, f"{int((diff > steps).sum())} of {diff.size} values off by more than {steps} " \
                           f"(worst {worst})"


ORT_EXACT_WEIGHT_RANGE = (-64, 64)


def ort_exact_weights(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """int8 weights in [-64, 64], as onnxruntime's quantizer writes them with reduce_range: its x86
    uint8 x int8 kernels without VNNI add products in saturating int16 pairs (255 * 64 * 2 = 32,640
    fits, 255 * 127 * 2 does not), so with these weights its output is exact on every CPU and
    can be the oracle. Full-range weights are checked against exact numpy references instead."""
    lo, hi = ORT_EXACT_WEIGHT_RANGE
    return rng.integers(lo, hi + 1, size=shape).astype(np.int8)


def ort_int8_gemm_is_exact() -> bool:
    """Whether onnxruntime's uint8 x int8 GEMMs (QLinearConv, QLinearMatMul, QGemm, MatMulInteger)
    are exact on this CPU: on x86 without VNNI its AVX2 kernels add int8 products in int16 pairs that
    saturate when the weights use all 8 bits (issue 22: GPT-2's MatMulIntegers off by up to 2,339),
    so there its int8 outputs are no oracle. Elsewhere (VNNI, ARM) they are exact."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return True
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags
