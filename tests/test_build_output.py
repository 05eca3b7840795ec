"""The driver's build output goes to logging, never to the terminal (runtime.build_output).

A build that succeeds with warnings makes pyopencl warn (CompilerWarning) and pocl's clang
print "1 warning generated." on the process's stderr; a failed build prints "N errors
generated.". Through clglow neither reaches stdout/stderr: the log is logged at DEBUG, and a
CompileError carries the whole log. The oracle for the logs is the source itself (the
identifiers and lines the test wrote), for the results numpy.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pyopencl as cl
import pytest

from clglow.errors import CompileError
from clglow.runtime import build_output
from clglow.runtime.cache import ProgramCache, driver_caches_programs

# "equality comparison result unused": a warning (not an error) in the clang of every pocl seen
WARNS = """
__kernel void twice(__global float* x) {
    x[0] == 1.0f;
    x[get_global_id(0)] *= 2.0f;
}
"""


def _nonce() -> str:
    """A define no source reads: a new key for the driver's cache, so its compiler really runs."""
    return f"-DCLGLOW_TEST_NONCE={os.getpid()}_{time.time_ns()}"


def test_build_with_a_warning_is_quiet_and_logged(device, capfd, caplog):
    caplog.set_level(logging.DEBUG, logger="clglow.runtime")
    cache = ProgramCache(device.context, device.cl_device, enabled=False)
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CompilerWarning reaching the user would raise here
        prg = cache.get("twice", WARNS, (_nonce(),))
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)
    logged = [r for r in caplog.records if r.levelno == logging.DEBUG and "build log of twice" in r.getMessage()]
    if not logged:
        pytest.skip("this driver reports no warning for the test kernel")
    assert "comparison result unused" in logged[0].getMessage()
    x = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    cl.Kernel(prg, "twice")(device.queue, x.shape, None, buf)
    y = np.empty_like(x)
    cl.enqueue_copy(device.queue, y, buf)
    np.testing.assert_array_equal(y, x * 2)


def test_the_same_build_without_clglow_is_noisy(device, capfd):
    """What the test above keeps quiet (so it checks something): a plain pyopencl build of the
    same source warns in Python and, on pocl, prints clang's summary on fd 2."""
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prg = cl.Program(device.context, WARNS).build(options=[_nonce()], devices=[device.cl_device],
                                                        cache_dir=False)
    _, err = capfd.readouterr()
    if not build_output.program_log(prg, device.cl_device):
        pytest.skip("this driver reports no warning for the test kernel")
    assert any(issubclass(w.category, cl.CompilerWarning) for w in caught)
    if driver_caches_programs(device.cl_device):  # pocl: its clang prints the summary itself
        assert "generated" in err


def test_compile_error_carries_the_whole_log(device, capfd):
    names = [f"undeclared_{i}" for i in range(40)]
    body = "\n".join(f"    x[{i}] = {n};" for i, n in enumerate(names))
    src = f"__kernel void broken(__global float* x) {{\n{body}\n}}\n"
    cache = ProgramCache(device.context, device.cl_device, enabled=False)
    capfd.readouterr()
    with pytest.raises(CompileError) as ei:
        cache.get("broken", src, (_nonce(),))
    out, err = capfd.readouterr()
    assert out == "" and "generated" not in err, (out, err)
    e = ei.value
    missing = [n for n in names if n not in e.log]
    assert not missing, f"{len(missing)} of {len(names)} errors missing from the log"
    assert all(n in str(e) for n in names)  # the message shows the whole log too
    assert e.program == "broken" and device.cl_device.name.strip() in e.device


def test_concurrent_builds_share_one_capture(device, capfd):
    """Builds in several threads: nothing printed, every program works, fd 2 restored."""
    import threading

    cache = ProgramCache(device.context, device.cl_device, enabled=False)
    errors, progs = [], []

    def work(i):
        try:
            progs.append(cache.get("twice", WARNS, (_nonce(), f"-DI={i}")))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    capfd.readouterr()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.write(2, b"after the builds\n")  # fd 2 is the test's stderr again
    out, err = capfd.readouterr()
    assert not errors and len(progs) == 4
    assert out == "" and err == "after the builds\n", (out, err)


def test_other_output_during_a_build_is_passed_through(capfd):
    capfd.readouterr()
    with build_output.quiet_build():
        os.write(2, b"3 warnings generated.\n")
        os.write(2, b"a message of someone else\n")
    _, err = capfd.readouterr()
    assert err == "a message of someone else\n"


def test_a_crash_inside_a_build_is_reported_by_the_next_process(tmp_path, monkeypatch, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    monkeypatch.setattr(build_output, "_capture_dir", lambda: tmp_path)
    left = tmp_path / f"clglow-build-stderr-{pid}.txt"
    left.write_text("python: pocl_llvm_build.cc:638: Assertion `program->data[device_i]' failed.\n")
    mine = tmp_path / f"clglow-build-stderr-{os.getpid()}.txt"
    mine.write_text("")
    caplog.set_level(logging.WARNING, logger="clglow.runtime.build_output")
    build_output.report_leftovers()
    assert not left.exists() and mine.exists()
    assert any(str(pid) in r.getMessage() and "Assertion" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_demo_prints_no_compiler_chatter(tmp_path):
    """`clglow demo` from empty caches: its output is its own report, nothing from the compiler."""
    env = {k: v for k, v in os.environ.items() if k != "POCL_CACHE_DIR"}
    env.update(CLGLOW_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-m", "clglow", "demo", "--repeat", "1"], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "PASS" in out.stdout
    for word in ("generated", "CompilerWarning", "warning:", "Non-empty compiler output"):
        assert word not in text, text
