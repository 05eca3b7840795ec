"""Fixtures of the quantized-model tests (issue 22).

- `quantized_model(kind, fmt, per_channel=False)`: the path of a model quantized by
  onnxruntime.quantization (tests/quant/quant_models.py: kinds resnet / mobilenet / bert, formats
  qdq / qoperator / dynamic), cached across sessions.
- `quant_feeds(kind, seed=0)`: seeded inputs for those models.
- `ort_literal(model, feeds)`: onnxruntime with every graph optimisation off (ORT_DISABLE_ALL),
  so it runs each operator literally (no QDQ fusion): the oracle of the quantized ops.
- `clglow_run(model, feeds, device_only=True)`: clglow's outputs and its session; device_only sets
  CLGLOW_HOST_FALLBACK=0 (every node on OpenCL, or the load fails naming the node).
- `assert_steps(got, ref, steps)`: integer outputs within `steps` quantization steps.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Union

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/quant for `quant_models`

import quant_models  # noqa: E402

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


@pytest.fixture(scope="session")
def quantized_model() -> Callable[..., Path]:
    return quant_models.quantized_model


@pytest.fixture(scope="session")
def quant_feeds() -> Callable[..., dict]:
    return quant_models.sample_feeds


@pytest.fixture(scope="session")
def ort_literal() -> Callable[..., list]:
    return ort_literal_run


@pytest.fixture(scope="session")
def clglow_run() -> Callable[..., tuple]:
    return clglow_session_run


@pytest.fixture(scope="session")
def assert_steps() -> Callable[..., None]:
    return assert_within_steps
