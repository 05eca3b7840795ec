"""Shared test setup: a private program cache and the `device` fixture.

Tests run on the default device (the first that can build a kernel; pocl on a machine
without a GPU) and on any other OpenCL device when CLGLOW_DEVICE selects it.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# Never write to the user's cache: unless the caller chose a folder, use a temporary one
# for this test session (set before anything imports clglow's cache).
if not os.environ.get("CLGLOW_CACHE_DIR"):
    _cache_dir = tempfile.mkdtemp(prefix="clglow-test-cache-")
    os.environ["CLGLOW_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, True)
# pocl's kernel cache stays where pocl keeps it by default (clglow would put it under the
# temporary folder above: every test session would then build every kernel from scratch);
# runtime.driver_cache checks it wherever it is.
if not os.environ.get("POCL_CACHE_DIR"):
    from clglow.runtime.driver_cache import default_pocl_dir

    os.environ["POCL_CACHE_DIR"] = str(default_pocl_dir())


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show which OpenCL device the session runs on, and how it was chosen."""
    sel = os.environ.get("CLGLOW_DEVICE") or os.environ.get("PYOPENCL_CTX") or "(default)"
    try:
        from clglow.runtime.device import select_device

        desc = select_device().describe()
    except Exception as e:  # noqa: BLE001 - the header must never break collection
        desc = f"unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return [f"clglow device [{sel}]: {desc}", f"clglow cache dir: {os.environ['CLGLOW_CACHE_DIR']}"]


@pytest.fixture(scope="session")
def device():
    """The clglow Device for this session (CLGLOW_DEVICE / PYOPENCL_CTX, else the default)."""
    from clglow.runtime.device import select_device

    return select_device()


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Tests marked `cpu_family` assert a CPU-family kernel path or policy (implicit-GEMM padded
    inputs, sub-batching, ...): skipped where sessions lower for another family (CLGLOW_TARGET,
    or a GPU device's own)."""
    marked = [item for item in items if item.get_closest_marker("cpu_family")]
    if not marked:
        return
    try:
        from clglow import config as clglow_config
        from clglow.runtime.device import select_device

        family = select_device().target(clglow_config.target_family()).family
    except Exception:  # noqa: BLE001 - no device: the tests fail or skip on their own
        return
    if family != "cpu":
        skip = pytest.mark.skip(reason=f"asserts a CPU-family path; sessions here lower for the {family} family")
        for item in marked:
            item.add_marker(skip)
