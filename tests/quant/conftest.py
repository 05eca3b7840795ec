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
from typing import Callable

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/quant for `quant_models`

import quant_models  # noqa: E402
from quant_oracle import assert_within_steps, clglow_session_run, ort_literal_run  # noqa: E402


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
