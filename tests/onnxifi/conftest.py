"""Fixtures for the ONNXIFI tests: the C library, a C compiler, the installed onnxifi.h."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnxifi_testutil import onnxifi_header  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "onnxifi: ONNXIFI tests (Python API, C library, C hosts)")
    config.addinivalue_line("markers", "slow: slow tests (ResNet-50, the ONNX test driver)")


@pytest.fixture(scope="session")
def header() -> Path:
    h = onnxifi_header()
    if h is None:
        pytest.skip("onnx/onnxifi.h not found (apt-get install libonnx-dev)")
    return h


@pytest.fixture(scope="session")
def cc() -> str:
    c = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if c is None:
        pytest.skip("no C compiler (apt-get install gcc)")
    return c


@pytest.fixture(scope="session")
def library(cc: str) -> str:
    """Absolute path of libonnxifi-clglow.so, built for this session when needed."""
    import onnxifi

    try:
        return onnxifi.library_path()
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"building the ONNXIFI library failed: {e}")


@pytest.fixture(scope="session")
def device_env(device) -> dict:
    """Environment for child processes: the same OpenCL device as this session."""
    env = dict(os.environ)
    if getattr(device, "selector", None):
        env["CLGLOW_DEVICE"] = device.selector
    return env
