"""The program cache: memory hits, warm starts from disk, CLGLOW_CACHE=0, corrupt entries,
build errors, and parallel builds."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

from clglow import __version__
from clglow.errors import CompileError
from clglow.runtime import cache as C

SRC = """
__kernel void axpb(__global float* x, const float a) {
    size_t i = get_global_id(0);
    x[i] = a * x[i] + B;
}
"""


def run_axpb(device, prg, a=2.0):
    x = np.arange(16, dtype=np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    cl.Kernel(prg, "axpb")(device.queue, x.shape, None, buf, np.float32(a))
    out = np.empty_like(x)
    cl.enqueue_copy(device.queue, out, buf)
    return x, out


def new_cache(device, tmp_path, **kw):
    """A cache on tmp_path with its disk layer on (the default skips it on pocl, see below)."""
    kw.setdefault("enabled", True)
    return C.ProgramCache(device.context, device.cl_device, directory=tmp_path, **kw)


def binaries(tmp_path: Path):
    return sorted((tmp_path / "programs").glob("*.clbin"))


def test_memory_hit(device, tmp_path):
    cache = new_cache(device, tmp_path)
    p1 = cache.get("axpb", SRC, ("-DB=1.0f",))
    p2 = cache.get("axpb", SRC, ("-DB=1.0f",))
    assert p1 is p2
    assert cache.stats()["source_builds"] == 1 and cache.stats()["memory_hits"] == 1
    x, out = run_axpb(device, p1)
    np.testing.assert_allclose(out, 2 * x + 1)
    # other options: another program
    p3 = cache.get("axpb", SRC, ("-DB=5.0f",))
    assert p3 is not p1 and cache.stats()["source_builds"] == 2
    assert len(binaries(tmp_path)) == 2


def test_warm_start_from_disk(device, tmp_path):
    before = C.stats()
    new_cache(device, tmp_path).get("axpb", SRC, ("-DB=1.0f",))
    fresh = new_cache(device, tmp_path)
    prg = fresh.get("axpb", SRC, ("-DB=1.0f",))
    s = fresh.stats()
    assert s["source_builds"] == 0 and s["binary_loads"] == 1, s
    x, out = run_axpb(device, prg)
    np.testing.assert_allclose(out, 2 * x + 1)
    after = C.stats()
    assert after["binary_loads"] - before["binary_loads"] == 1
    assert after["source_builds"] - before["source_builds"] == 1
    assert not [p for p in (tmp_path / "programs").iterdir() if p.name.startswith(".tmp-")]


def test_warm_start_in_a_new_process(device, tmp_path):
    """A second process with the same cache folder builds nothing from source."""
    new_cache(device, tmp_path).get("axpb", SRC, ("-DB=1.0f",))
    code = textwrap.dedent(f"""
        import sys
        from clglow.runtime import cache as C
        from clglow.runtime.device import select_device
        dev = select_device({device.selector!r})
        C.ProgramCache(dev.context, dev.cl_device, directory=sys.argv[1], enabled=True).get(
            "axpb", {SRC!r}, ("-DB=1.0f",))
        s = C.stats()
        print(s["source_builds"], s["binary_loads"])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))  # the clglow this test imported
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["0", "1"], out.stdout + out.stderr


def test_cache_disabled_writes_nothing(device, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CLGLOW_CACHE", "0")
    cache = C.ProgramCache(device.context, device.cl_device)
    assert cache.directory is None
    cache.get("axpb", SRC, ("-DB=1.0f",))
    assert cache.get("axpb", SRC, ("-DB=1.0f",)) is not None
    assert cache.stats()["disk_writes"] == 0
    assert not any(tmp_path.rglob("*"))
    # explicit switch, same result
    off = new_cache(device, tmp_path, enabled=False)
    off.get("axpb", SRC, ("-DB=2.0f",))
    assert not any(tmp_path.rglob("*"))


def test_env_cache_dir_is_used(device, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CLGLOW_CACHE", "1")
    assert C.default_cache_dir() == tmp_path
    C.ProgramCache(device.context, device.cl_device).get("axpb", SRC, ("-DB=3.0f",))
    assert C.disk_usage(tmp_path)[0] == 1
    assert C.clear_disk(tmp_path) == 1
    assert C.disk_usage(tmp_path) == (0, 0)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "bad_binary"])
def test_corrupt_entry_is_rebuilt(device, tmp_path, damage):
    new_cache(device, tmp_path).get("axpb", SRC, ("-DB=1.0f",))
    (path,) = binaries(tmp_path)
    blob = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a program at all" * 10)
    elif damage == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a well-formed file whose binary the driver cannot load
        import hashlib
        junk = b"\x7fELF" + os.urandom(256)
        path.write_bytes(C.MAGIC + hashlib.sha256(junk).digest() + junk)
    fresh = new_cache(device, tmp_path)
    prg = fresh.get("axpb", SRC, ("-DB=1.0f",))
    s = fresh.stats()
    assert s["source_builds"] == 1 and s["disk_rejects"] == 1 and s["disk_writes"] == 1, s
    x, out = run_axpb(device, prg)
    np.testing.assert_allclose(out, 2 * x + 1)
    # the entry was rewritten and loads again
    again = new_cache(device, tmp_path)
    again.get("axpb", SRC, ("-DB=1.0f",))
    assert again.stats()["binary_loads"] == 1


def test_unwritable_cache_dir_is_not_fatal(device, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    cache = new_cache(device, blocker)
    prg = cache.get("axpb", SRC, ("-DB=1.0f",))
    assert prg is not None and cache.stats()["disk_writes"] == 0


def test_compile_error_carries_log_options_device(device, tmp_path):
    cache = new_cache(device, tmp_path)
    bad = "__kernel void f(__global float* x) { x[0] = undeclared_thing; }"
    with pytest.raises(CompileError) as ei:
        cache.get("bad_prog", bad, ("-DFOO=1", "-cl-mad-enable"))
    err = ei.value
    assert err.program == "bad_prog"
    assert err.options == ["-DFOO=1", "-cl-mad-enable"]
    assert device.cl_device.name.strip() in err.device
    assert "undeclared_thing" in err.log
    assert "-DFOO=1" in str(err) and "undeclared_thing" in str(err)
    assert err.onnxifi_status  # maps to a status code
    # failures are not cached: the next call tries again
    with pytest.raises(CompileError):
        cache.get("bad_prog", bad, ("-DFOO=1", "-cl-mad-enable"))
    assert not binaries(tmp_path)


def test_concurrent_builds(device, tmp_path):
    cache = new_cache(device, tmp_path)
    n_programs, n_threads = 4, 12
    barrier = threading.Barrier(n_threads)
    got, errors = {}, []
    lock = threading.Lock()

    def work(i):
        try:
            barrier.wait()
            opts = (f"-DB={i % n_programs}.0f",)
            prg = cache.get("axpb", SRC, opts)
            with lock:
                got.setdefault(opts, set()).add(id(prg))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(got) == n_programs and all(len(ids) == 1 for ids in got.values())
    s = cache.stats()
    assert s["source_builds"] == n_programs and s["memory_hits"] == n_threads - n_programs, s
    assert len(binaries(tmp_path)) == n_programs


def test_concurrent_failure_reaches_every_waiter(device, tmp_path):
    cache = new_cache(device, tmp_path)
    bad = "__kernel void f(__global float* x) { x[0] = nope; }"
    barrier = threading.Barrier(4)
    errors = []

    def work():
        barrier.wait()
        try:
            cache.get("bad", bad)
        except CompileError as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4


def test_auto_policy_leaves_pocl_to_its_own_cache(device, tmp_path, monkeypatch):
    """Unset CLGLOW_CACHE: no binaries on a driver with its own program cache (pocl), binaries
    elsewhere; CLGLOW_CACHE=1 forces them; CLGLOW_CACHE=0 turns them off everywhere."""
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    pocl = "portable computing language" in device.cl_device.platform.name.lower()
    assert C.driver_caches_programs(device.cl_device) == pocl
    cache = C.ProgramCache(device.context, device.cl_device)
    assert cache.enabled == (not pocl)
    cache.get("axpb", SRC, ("-DB=4.0f",))
    assert len(binaries(tmp_path)) == (0 if pocl else 1)
    monkeypatch.setenv("CLGLOW_CACHE", "1")
    assert C.ProgramCache(device.context, device.cl_device).enabled
    monkeypatch.setenv("CLGLOW_CACHE", "0")
    assert not C.ProgramCache(device.context, device.cl_device).enabled
    if pocl:  # pocl's own cache switched off: ours is used again
        monkeypatch.delenv("CLGLOW_CACHE")
        monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
        assert C.ProgramCache(device.context, device.cl_device).enabled


def test_disk_key_covers_everything():
    def dev(**over):
        fields = dict(name="dev", version="OpenCL 3.0", driver_version="1.0")
        plat = SimpleNamespace(name=over.pop("platform", "plat"), version=over.pop("platform_version", "p1"))
        fields.update(over)
        return SimpleNamespace(platform=plat, **fields)

    base = C.disk_key("src", ("-DA=1",), dev())
    assert base == C.disk_key("src", ("-DA=1",), dev())
    variants = [
        C.disk_key("src2", ("-DA=1",), dev()),
        C.disk_key("src", ("-DA=2",), dev()),
        C.disk_key("src", ("-DA=1",), dev(name="other")),
        C.disk_key("src", ("-DA=1",), dev(version="OpenCL 1.2")),
        C.disk_key("src", ("-DA=1",), dev(driver_version="2.0")),
        C.disk_key("src", ("-DA=1",), dev(platform="other")),
        C.disk_key("src", ("-DA=1",), dev(platform_version="p2")),
        C.disk_key("src", ("-DA=1",), dev(), extra="headers"),
    ]
    assert len(set(variants + [base])) == len(variants) + 1
    assert __version__  # part of the key (checked by construction in disk_key)


def test_program_without_kernels_is_built_again(device, tmp_path, monkeypatch):
    """A driver that serves a program from its own cache without its kernels (PyPI's pocl
    3.0-rc2 on an AVX2 target): the cache builds it again under a fresh define."""
    cache = new_cache(device, tmp_path, enabled=False)
    calls = []
    real = C._kernel_count

    def first_empty(prg):
        calls.append(prg)
        return 0 if len(calls) == 1 else real(prg)

    monkeypatch.setattr(C, "_kernel_count", first_empty)
    built = []
    real_once = C.ProgramCache._build_once

    def spy(self, name, source, options, build_options):
        built.append(build_options)
        return real_once(self, name, source, options, build_options)

    monkeypatch.setattr(C.ProgramCache, "_build_once", spy)
    prg = cache.get("axpb", SRC, ("-DB=1.0f",))
    assert len(built) == 2 and not any("CLGLOW_FRESH_BUILD" in o for o in built[0])
    assert any(o.startswith("-DCLGLOW_FRESH_BUILD=") for o in built[1])
    x, out = run_axpb(device, prg)
    np.testing.assert_allclose(out, 2 * x + 1)


def test_program_that_never_holds_kernels_is_a_compile_error(device, tmp_path, monkeypatch):
    cache = new_cache(device, tmp_path, enabled=False)
    monkeypatch.setattr(C, "_kernel_count", lambda prg: 0)
    with pytest.raises(CompileError, match="holds no kernels"):
        cache.get("axpb", SRC, ("-DB=1.0f",))
    monkeypatch.undo()
    x, out = run_axpb(device, cache.get("axpb", SRC, ("-DB=1.0f",)))  # still usable
    np.testing.assert_allclose(out, 2 * x + 1)


def test_stored_binary_is_loaded_under_the_auto_policy(device, tmp_path, monkeypatch):
    """Unset CLGLOW_CACHE: a build writes no binary (on pocl), but one that store_binary wrote (a
    compile helper, in the background) is what a later cache loads, and it computes the same;
    CLGLOW_CACHE=0 neither stores nor reads."""
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    first = C.ProgramCache(device.context, device.cl_device)
    assert first.store_binary("axpb", SRC, ("-DB=5.0f",))
    assert not first.store_binary("axpb", SRC, ("-DB=5.0f",))  # there already
    assert len(binaries(tmp_path)) == 1
    later = C.ProgramCache(device.context, device.cl_device)
    prg = later.get("axpb", SRC, ("-DB=5.0f",))
    assert later.stats()["binary_loads"] == 1 and later.stats()["source_builds"] == 0
    x = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    queue = cl.CommandQueue(device.context, device.cl_device)
    prg.axpb(queue, (8,), None, buf, np.float32(2.0))
    out = np.empty_like(x)
    cl.enqueue_copy(queue, out, buf)
    np.testing.assert_allclose(out, 2 * x + 5)
    monkeypatch.setenv("CLGLOW_CACHE", "0")
    off = C.ProgramCache(device.context, device.cl_device)
    assert off.read_directory is None and not off.store_binary("axpb", SRC, ("-DB=6.0f",))
    off.get("axpb", SRC, ("-DB=5.0f",))
    assert off.stats()["binary_loads"] == 0
