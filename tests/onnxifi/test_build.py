"""libonnxifi-clglow.so is built from the checked-in C (onnxifi/csrc), kept on disk, rebuilt when stale.

Each test builds into its own folder (ONNXIFI_CLGLOW_BUILD_DIR); a build takes about a second.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import onnxifi
from onnxifi import _build, _cdecl

pytestmark = pytest.mark.onnxifi


@pytest.fixture
def out(tmp_path, monkeypatch, cc) -> Path:
    d = tmp_path / "build"
    monkeypatch.setenv("ONNXIFI_CLGLOW_BUILD_DIR", str(d))
    return d


def _identity(path: Path) -> tuple:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


def test_builds_from_the_checked_in_source(out):
    lib = Path(onnxifi.library_path())
    assert lib == out / _build.LIBRARY_NAME and _build.build_dir() == out
    for name in _build.SOURCES:  # the sources compiled are left beside the library, unchanged
        assert (out / name).read_bytes() == (_build.CSRC / name).read_bytes(), name
    glue = (out / f"{_build.MODULE_NAME}.c").read_text()  # cffi's generated part: no C of ours but an include
    assert f'#include "{_build.BRIDGE_HEADER}"' in glue and not re.search(r"\bonnxGetBackendIDs\(", glue)
    assert (out / "onnxifi_clglow.o").is_file()
    assert b"onnxifi_clglow.c" in lib.read_bytes()  # debug information names the source
    stamp = json.loads((out / _build.STAMP_NAME).read_text())
    assert stamp["inputs"] == _build.build_inputs().digest
    assert _build.EXPORTED == onnxifi.api.CORE_FUNCTIONS + ("onnxGetExtensionFunctionAddress",)
    nm = shutil.which("nm")
    if nm:
        p = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
        assert sorted(line.split()[-1] for line in p.stdout.splitlines() if line.strip()) == sorted(_build.EXPORTED)


def test_cli_reports_the_build_folder(out):
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "onnxifi", "--build-dir"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0 and p.stdout.strip() == str(out)
    p = subprocess.run([sys.executable, "-m", "onnxifi", "--library"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()) == out / _build.LIBRARY_NAME and (out / _build.SOURCE).is_file()


def test_no_rebuild_when_nothing_changed(out, caplog):
    lib = Path(onnxifi.library_path())
    before = _identity(lib)
    caplog.set_level("INFO", logger="onnxifi._build")
    assert Path(onnxifi.library_path()) == lib
    assert _identity(lib) == before
    assert not [r for r in caplog.records if "build" in r.getMessage()]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
def test_damaged_library_is_rebuilt(out, damage):
    lib = Path(onnxifi.library_path())
    good = lib.read_bytes()
    if damage == "garbage":
        lib.write_bytes(b"not a library")
    elif damage == "truncated":
        lib.write_bytes(good[: len(good) // 2])
    else:
        lib.unlink()
    with pytest.raises(FileNotFoundError, match="python -m onnxifi --build"):
        _build.library_path(build=False)
    assert Path(onnxifi.library_path()) == lib
    assert lib.read_bytes()[:4] == b"\x7fELF" and len(lib.read_bytes()) == len(good)
    assert _build.library_path(build=False) == str(lib)


@pytest.mark.parametrize("what", ["stamp", "inputs", "source copy"])
def test_stale_build_is_rebuilt(out, what):
    lib = Path(onnxifi.library_path())
    before = _identity(lib)
    stamp = out / _build.STAMP_NAME
    if what == "stamp":
        stamp.write_text("{ broken")
    elif what == "inputs":
        stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "inputs": "0" * 32}))
    else:
        (out / _build.SOURCE).write_text("/* edited by hand */\n")
    assert Path(onnxifi.library_path()) == lib
    assert _identity(lib) != before
    assert (out / _build.SOURCE).read_bytes() == (_build.CSRC / _build.SOURCE).read_bytes()
    assert json.loads(stamp.read_text())["inputs"] == _build.build_inputs().digest


def test_changed_source_is_rebuilt(out, tmp_path, monkeypatch):
    lib = Path(onnxifi.library_path())
    before = _identity(lib)
    src = tmp_path / "csrc"
    shutil.copytree(_build.CSRC, src)
    marker = "/* test_changed_source_is_rebuilt */\n"
    (src / _build.SOURCE).write_text((src / _build.SOURCE).read_text() + marker)
    monkeypatch.setattr(_build, "CSRC", src)
    assert Path(onnxifi.library_path()) == lib
    assert _identity(lib) != before and (out / _build.SOURCE).read_text().endswith(marker)


def test_compile_error_leaves_the_previous_library(out, tmp_path, monkeypatch):
    lib = Path(onnxifi.library_path())
    good = lib.read_bytes()
    src = tmp_path / "csrc"
    shutil.copytree(_build.CSRC, src)
    (src / _build.SOURCE).write_text((src / _build.SOURCE).read_text() + "\nthis is not C;\n")
    monkeypatch.setattr(_build, "CSRC", src)
    with pytest.raises(Exception, match="CompileError|error"):
        onnxifi.library_path()
    assert lib.read_bytes() == good
    assert not list(out.glob(f".{_build.LIBRARY_NAME}.*.tmp"))


def test_build_python_writes_no_c():
    """The C is in csrc/: _build.py hands cffi declarations read from the headers, nothing written out."""
    text = Path(_build.__file__).read_text()
    assert "onnxStatus" not in text and "ONNXIFI_PUBLIC" not in text and "typedef" not in text


def test_cffi_types_come_from_onnxifi_h(header):
    decl = _cdecl.cffi_declarations(header, _build.CSRC)
    assert decl.types_from == ["onnxifi.h", _build.HEADER]
    body, _ = _cdecl._strip_preprocessor(header.read_text())
    from_header = [s for s in _cdecl._statements(body) if s.startswith("typedef struct onnxTensorDescriptorV1")]
    assert from_header and from_header[0] in decl.cdef
    bridge = (_build.CSRC / _build.BRIDGE_HEADER).read_text()
    names = sorted(set(n for n in re.findall(r"\b(clglow_py_\w+)\(", bridge)))
    assert len(names) == 18 and all(f"{n}(" in decl.embedding_api for n in names)
    assert "clglow_py_" not in decl.cdef and "clglow_trace_alloc(" in decl.cdef


def test_fallback_abi_matches_onnxifi_h(header):
    """onnxifi_clglow.h's copy of the ABI (used without libonnx-dev) lays the structs out as onnxifi.h."""
    import cffi

    layouts = []
    for h in (header, None):
        ffi = cffi.FFI()
        ffi.cdef(_cdecl.cffi_declarations(h, _build.CSRC).cdef)
        layouts.append({t: (ffi.sizeof(t), [(f, ffi.offsetof(t, f)) for f, _ in ffi.typeof(t).fields])
                        for t in ("onnxTensorDescriptorV1", "onnxMemoryFenceV1", "onnxTraceEvent",
                                  "onnxTraceEventList")})
    assert layouts[0] == layouts[1]


def test_package_data_ships_exactly_csrc():
    """pyproject.toml's package-data for onnxifi names the .c and .h files of csrc/, and nothing absent."""
    import glob

    try:
        import tomllib
    except ImportError:  # Python < 3.11
        pytest.skip("tomllib needs Python 3.11")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not run from a checkout")
    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["onnxifi"]
    pkg = Path(_build.__file__).parent
    matched = {Path(m).relative_to(pkg).as_posix() for p in patterns for m in glob.glob(str(pkg / p))}
    assert all(glob.glob(str(pkg / p)) for p in patterns), f"a pattern matches nothing: {patterns}"
    assert matched == {f"csrc/{n}" for n in _build.SOURCES}
