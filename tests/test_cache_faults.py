"""Damaged caches cost a rebuild, never a crash (runtime.driver_cache, runtime.cache, runtime.tuning).

pocl aborts a process that reads a truncated file of its kernel cache (``pocl_llvm_build.cc:
Assertion program->data[device_i] failed``, or a failed dlopen of a kernel's .so), and every
later process too. Each test here runs the work in a NEW process after damaging the files a
first process left, as a crash or a full disk would, and checks the results against numpy or
onnx.reference.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from clglow.runtime import driver_cache as dc
from clglow.runtime.cache import driver_caches_programs

# Build global_pool (max over rows) and launch it, in a fresh process: program.bc and the
# kernel's .so land in pocl's cache. Checked against numpy; prints what the cache counters say.
POOL_SCRIPT = textwrap.dedent("""
    import logging, sys
    import numpy as np, pyopencl as cl
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from clglow.runtime.device import select_device
    dev = select_device(sys.argv[1])
    x = np.random.default_rng(0).standard_normal((6, 49)).astype(np.float32)
    xb = cl.Buffer(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(dev.context, cl.mem_flags.WRITE_ONLY, 6 * 4)
    knl = cl.Kernel(dev.program("pool", ["-DT=float", "-DPOOL_MAX", "-DCLGLOW_FAULT_TEST=1"]), "global_pool")
    knl.set_args(xb, yb, np.int32(6), np.int32(49))
    cl.enqueue_nd_range_kernel(dev.queue, knl, (64,), (64,))
    y = np.empty(6, np.float32)
    cl.enqueue_copy(dev.queue, y, yb)
    np.testing.assert_array_equal(y, x.max(axis=1))
    print("POOL OK")
""")

# A small CNN through a session (tuning on), checked against onnx.reference.
MODEL_SCRIPT = textwrap.dedent("""
    import logging, sys
    import numpy as np, onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    import clglow
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    fc = rng.standard_normal((8, 5)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "faults", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 3, 20, 20)).astype(np.float32)
    sess = clglow.InferenceSession(m.SerializeToString(), device=sys.argv[1])
    # the family-wide GEMM tiles, measured now and stored (a session alone measures them only in
    # the background after its first run, which a short process may not reach)
    sess.device.ensure_tuned()
    (y,) = sess.run(None, {"x": x})
    (ref,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    print("MODEL OK")
""")


@pytest.fixture
def pocl(device):
    if not driver_caches_programs(device.cl_device):
        pytest.skip("the driver-cache check serves pocl (a driver with its own kernel cache)")
    return device


def _run(script: str, device, env: dict) -> subprocess.CompletedProcess:
    env = dict(env, PYTHONPATH=os.pathsep.join(sys.path))  # the clglow this test imported
    return subprocess.run([sys.executable, "-c", script, device.selector], capture_output=True, text=True,
                          env=env, timeout=600)


def _env(tmp_path: Path, pocl_dir: Path | None, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR", "CLGLOW_CACHE")}
    env.update(CLGLOW_CACHE_DIR=str(tmp_path / "clglow"), **extra)
    if pocl_dir is not None:
        env["POCL_CACHE_DIR"] = str(pocl_dir)
    return env


def _damage(root: Path, how: str) -> int:
    """Damage every compiled file under `root` as a crash or a full disk would; how many."""
    n = 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or not p.name.endswith((".bc", ".so", ".clbin", ".json")) or p.name == dc.MANIFEST:
            continue
        data = p.read_bytes()
        if how == "truncate":
            p.write_bytes(data[: len(data) // 2])
        elif how == "empty":
            p.write_bytes(b"")
        else:  # the tail zeroed, the size kept (data that never reached the disk)
            p.write_bytes(data[: len(data) // 3] + bytes(len(data) - len(data) // 3))
        n += 1
    return n


def _ok(out: subprocess.CompletedProcess, word: str) -> None:
    assert out.returncode == 0, f"rc {out.returncode}\n{out.stdout}\n{out.stderr}"
    assert word in out.stdout and "Assertion" not in out.stderr, out.stdout + out.stderr


@pytest.mark.parametrize("how", ["truncate", "empty", "zero_tail"])
def test_damaged_pocl_cache_is_rebuilt_in_a_new_process(pocl, tmp_path, how):
    """POCL_CACHE_DIR set by the user (the issue's reproduction): after one run its program.bc
    and .so files are damaged; the next process drops those programs and runs correctly."""
    env = _env(tmp_path, tmp_path / "pocl", CLGLOW_COMPILE_WORKERS="0")
    _ok(_run(POOL_SCRIPT, pocl, env), "POOL OK")
    assert _damage(tmp_path / "pocl", how) >= 2  # at least program.bc and global_pool's .so
    again = _run(POOL_SCRIPT, pocl, env)
    _ok(again, "POOL OK")
    assert "damaged or truncated" in again.stderr  # the drop is reported (a warning), not silent
    _ok(_run(POOL_SCRIPT, pocl, env), "POOL OK")  # and the rebuilt entry serves the next one


def test_pocl_cache_folder_is_clglows_own(pocl, tmp_path):
    """Without POCL_CACHE_DIR, pocl's cache goes under the clglow cache folder and is checked."""
    env = _env(tmp_path, None, CLGLOW_COMPILE_WORKERS="0")
    _ok(_run(POOL_SCRIPT, pocl, env), "POOL OK")
    owned = tmp_path / "clglow" / "pocl"
    assert list(owned.rglob("program.bc")), "pocl wrote its cache under clglow's folder"
    _damage(owned, "truncate")
    _ok(_run(POOL_SCRIPT, pocl, env), "POOL OK")


@pytest.mark.slow
def test_every_cache_damaged_then_a_new_process_runs_the_model(pocl, tmp_path):
    """A session with every cache on (pocl's, clglow's program binaries with CLGLOW_CACHE=1, the
    GEMM tuning, the compile helpers' markers); every file damaged; a new process runs the
    model correctly (onnx.reference), then a third one from the rebuilt caches."""
    env = _env(tmp_path, None, CLGLOW_CACHE="1", CLGLOW_TUNE="1")
    _ok(_run(MODEL_SCRIPT, pocl, env), "MODEL OK")
    root = tmp_path / "clglow"
    assert list((root / "programs").glob("*.clbin")) and list((root / "tuning").glob("*.json"))
    assert _damage(root, "truncate") > 5
    again = _run(MODEL_SCRIPT, pocl, env)
    _ok(again, "MODEL OK")
    assert "damaged or truncated" in again.stderr
    _ok(_run(MODEL_SCRIPT, pocl, env), "MODEL OK")


# --- the checks themselves (files from a real pocl cache) ----------------------------------------
@pytest.fixture(scope="module")
def real_cache(tmp_path_factory, device):
    """A pocl cache folder built by a new process: the pool's program (program.bc and a kernel's
    .so), and the capability probe's (runtime/capabilities.py) where the device had none stored."""
    if not driver_caches_programs(device.cl_device):
        pytest.skip("needs pocl's kernel cache")
    tmp = tmp_path_factory.mktemp("pocl-real")
    _ok(_run(POOL_SCRIPT, device, _env(tmp, tmp / "pocl", CLGLOW_COMPILE_WORKERS="0")), "POOL OK")
    return tmp / "pocl"


def test_file_checks_pass_whole_files_and_fail_damaged_ones(real_cache):
    files = [p for p in real_cache.rglob("*") if p.is_file() and p.name.endswith((".bc", ".so"))]
    assert {p.suffix for p in files} == {".bc", ".so"}
    for p in files:
        data = p.read_bytes()
        whole = dc.elf_complete if p.suffix == ".so" else dc.bitcode_complete
        assert dc.file_intact(p) and whole(data)
        for cut in (0, 4, 64, len(data) // 2, len(data) - 4, len(data) - 1):
            assert not whole(data[:cut]), (p.name, cut)
        if p.suffix == ".so":  # the section table sits at the end: a zeroed tail is found too
            assert not whole(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    assert not dc.elf_complete(b"\x7fELF" + os.urandom(200)) and not dc.bitcode_complete(b"BC\xc0\xde" + bytes(60))


def test_check_drops_damaged_programs_and_remembers_whole_files(real_cache, tmp_path):
    root = tmp_path / "kcache"
    prog = max({p.parent for p in real_cache.rglob("program.bc")}, key=lambda d: len(list(d.rglob("*"))))
    rel = prog.relative_to(real_cache)
    shutil.copytree(prog, root / rel)
    shutil.copytree(prog, root / "ZZ" / "DAMAGED")
    (root / "tempfile_x").write_bytes(b"")  # pocl's own temporary files at the top level: ignored
    first = dc.check(root)
    assert first.dropped == [] and first.checked == first.files >= 2
    manifest = json.loads((root / dc.MANIFEST).read_text())["files"]
    assert set(manifest) == {str(p.relative_to(root)) for p in root.rglob("*")
                             if p.is_file() and p.suffix in (".bc", ".so")}
    assert dc.check(root).checked == 0  # a warm start only lists the folder
    bc = root / "ZZ" / "DAMAGED" / "program.bc"
    bc.write_bytes(bc.read_bytes()[:100])
    second = dc.check(root)
    assert second.dropped == [os.path.join("ZZ", "DAMAGED")] and second.checked == 1
    assert not (root / "ZZ" / "DAMAGED").exists() and (root / rel / "program.bc").exists()
    (root / dc.MANIFEST).write_text("{not json")  # a damaged manifest: everything checked again
    assert dc.check(root).checked == len([p for p in (root / rel).rglob("*") if p.suffix in (".bc", ".so")])


def test_prepare_owns_the_folder_unless_the_user_chose_one(tmp_path, monkeypatch):
    """POCL_CACHE_DIR: clglow's folder when unset (and the driver not loaded yet), the user's
    otherwise; CLGLOW_CACHE=0 leaves pocl's default."""
    monkeypatch.setattr(dc, "_done", False)
    monkeypatch.setattr(dc, "_driver_loaded", lambda: False)
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("POCL_CACHE_DIR", raising=False)
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    assert dc.prepare() == tmp_path / "c" / "pocl" and os.environ["POCL_CACHE_DIR"] == str(tmp_path / "c" / "pocl")
    assert dc.prepare() == tmp_path / "c" / "pocl"  # once per process
    monkeypatch.setattr(dc, "_done", False)
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "mine"))
    assert dc.prepare() == tmp_path / "mine"
    monkeypatch.setattr(dc, "_done", False)
    monkeypatch.delenv("POCL_CACHE_DIR")
    monkeypatch.setenv("CLGLOW_CACHE", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dc.prepare() == tmp_path / "xdg" / "pocl" / "kcache" and "POCL_CACHE_DIR" not in os.environ
    monkeypatch.setattr(dc, "_done", False)
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    assert dc.prepare() is None


def test_damaged_program_binaries_are_rebuilt_in_a_new_process(device, tmp_path):
    """clglow's own program cache in a new process: a truncated .clbin is rebuilt (runtime.cache
    keeps a hash per binary; a damaged tuning file is measured again: tests/kernels/test_tuning)."""
    env = _env(tmp_path, tmp_path / "pocl", CLGLOW_CACHE="1", CLGLOW_COMPILE_WORKERS="0")
    _ok(_run(POOL_SCRIPT, device, env), "POOL OK")
    bins = list((tmp_path / "clglow" / "programs").glob("*.clbin"))
    assert bins
    for b in bins:
        b.write_bytes(b.read_bytes()[:40])
    shutil.rmtree(tmp_path / "pocl")  # and nothing in pocl's cache to fall back on
    again = _run(POOL_SCRIPT, device, env)
    _ok(again, "POOL OK")
    assert "corrupt or truncated" in again.stderr


def test_cache_clear_empties_the_owned_pocl_folder(tmp_path, monkeypatch, capsys):
    """`clglow cache clear` removes the pocl folder clglow owns (and the prepared markers that
    point into it), and leaves a user's own POCL_CACHE_DIR alone."""
    from clglow import cli
    from clglow.runtime import driver_cache

    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "clglow"))
    owned = driver_cache.owned_dir()
    (owned / "ab" / "cdef").mkdir(parents=True)
    (owned / "ab" / "cdef" / "program.bc").write_bytes(b"BC\xc0\xde" + b"\0" * 60)
    (tmp_path / "clglow" / "prepared").mkdir()
    (tmp_path / "clglow" / "prepared" / "marker").write_bytes(b"")
    users = tmp_path / "users-pocl"
    users.mkdir()
    (users / "keep.bc").write_bytes(b"x")
    monkeypatch.setenv("POCL_CACHE_DIR", str(users))
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 1 file(s)" in capsys.readouterr().out
    assert not owned.exists() and not (tmp_path / "clglow" / "prepared").exists()
    assert (users / "keep.bc").exists()


def test_cache_info_and_clear_cover_the_host_stores(tmp_path, monkeypatch, capsys):
    """`clglow cache info` lists the warm-start stores (optimized graphs, packed weights) and
    `clglow cache clear` empties them."""
    from clglow import cli
    from clglow.frontend import graph_cache
    from clglow.runtime import derived_cache

    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "clglow"))
    for store in (graph_cache.store(), derived_cache.store()):
        assert store.put("ab" * 32, {"k": 1}, [b"\0" * 256])
    from clglow.runtime import blob_store

    blob_store.flush()
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "optimized graphs" in out and "packed weights" in out and "1 entries" in out
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 1 cached optimized graphs" in capsys.readouterr().out
    assert graph_cache.store().usage() == (0, 0) and derived_cache.store().usage() == (0, 0)
