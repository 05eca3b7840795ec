"""ONNX's own ONNXIFI test driver, built from Debian's packages, loads our library as libonnxifi.so.

Needs: python3-onnx (driver sources under onnx/backend/test/cpp), libonnx-dev (headers,
libonnx, libonnxifi_loader.a), libprotobuf-dev, libgtest-dev and g++. The driver compares
outputs with an absolute tolerance (ONNXIFI_TESTDATA_EPS, 1e-5 by default; ResNet-50 uses
a binary built with 1e-3).
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from onnxifi_testutil import HERE, run

pytestmark = pytest.mark.onnxifi
sys.path.insert(0, str(HERE))
import onnxifi_driver_cases as driver_cases  # noqa: E402

DRIVER_SRC = Path("/usr/lib/python3/dist-packages/onnx/backend/test/cpp")
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
SOURCES = ["driver_test.cc", "gtest_utils.cc", "test_main.cc", "driver/test_driver.cc"]


def _build_driver(out: Path, eps: str) -> Path:
    missing = [p for p in (DRIVER_SRC / "driver_test.cc", Path("/usr/include/onnx/onnxifi_loader.h"),
                           LIBDIR / "libonnxifi_loader.a", Path("/usr/include/gtest/gtest.h"),
                           Path("/usr/include/google/protobuf/message.h")) if not p.exists()]
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if missing or cxx is None:
        pytest.skip(f"ONNX test driver prerequisites missing ({missing or 'g++'}): "
                    "apt-get install python3-onnx libonnx-dev libprotobuf-dev libgtest-dev g++")
    # The sources include "onnx/backend/test/cpp/...": mirror that layout, other headers come from /usr/include.
    src = out / "src" / "onnx" / "backend" / "test" / "cpp"
    if not src.exists():
        shutil.copytree(DRIVER_SRC, src)
    exe = out / f"onnxifi_driver_eps{eps}"
    p = run([cxx, "-std=c++17", "-O1", "-w", "-DONNX_NAMESPACE=onnx", "-DONNX_ML=1", f"-DONNXIFI_TESTDATA_EPS={eps}",
             "-I", out / "src", *[src / s for s in SOURCES], "-o", exe, "-lonnx", "-lonnx_proto", "-lprotobuf",
             LIBDIR / "libonnxifi_loader.a", "-lgtest", "-ldl", "-pthread"], timeout=600)
    assert p.returncode == 0, "the ONNX test driver does not build"
    return exe


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("onnx_driver")


@pytest.fixture(scope="module")
def as_libonnxifi(library, driver_dir) -> dict:
    """An LD_LIBRARY_PATH folder where our library is libonnxifi.so (the loader's default name)."""
    d = driver_dir / "lib"
    d.mkdir(exist_ok=True)
    link = d / "libonnxifi.so"
    if not link.exists():
        link.symlink_to(library)
    return {"LD_LIBRARY_PATH": os.pathsep.join([str(d), os.environ.get("LD_LIBRARY_PATH", "")])}


def _run_driver(exe: Path, cases: Path, env: dict, timeout: float) -> str:
    p = run([exe, cases], timeout=timeout, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, "ONNX's ONNXIFI test driver failed"
    assert "[  PASSED  ]" in out and "FAILED" not in out
    return out


def test_onnx_driver_node_cases(driver_dir, as_libonnxifi, device_env, tmp_path):
    exe = _build_driver(driver_dir, "1e-5")
    names = driver_cases.write_all(tmp_path / "cases", driver_cases.node_cases())
    out = _run_driver(exe, tmp_path / "cases", {**device_env, **as_libonnxifi}, timeout=900)
    assert f"[  PASSED  ] {len(names)} tests" in out, "a case was skipped as unsupported or did not run"


@pytest.mark.slow
def test_onnx_driver_resnet50(driver_dir, as_libonnxifi, device_env, tmp_path):
    from clglow.models import resnet50

    exe = _build_driver(driver_dir, "1e-3")
    model = resnet50(opset=13, batch=1, seed=0)
    model.ir_version = min(model.ir_version, driver_cases.IR_VERSION)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    name = model.graph.input[0].name
    y = driver_cases.expected_outputs(model, {name: x})[0]
    driver_cases.write_case(tmp_path / "cases", "resnet50", model, {name: x},
                            {model.graph.output[0].name: y})
    out = _run_driver(exe, tmp_path / "cases", {**device_env, **as_libonnxifi}, timeout=1800)
    assert "[  PASSED  ] 1 test" in out
