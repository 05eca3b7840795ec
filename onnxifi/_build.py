"""Build ``libonnxifi-clglow.so`` from ``onnxifi/csrc`` with cffi's embedding mode.

The C lives in ``csrc/onnxifi_clglow.c`` (the 16 exports, the extension table, trace
allocation) and ``csrc/onnxifi_clglow_bridge.h`` (the functions between C and Python);
this module writes no C. It hands cffi what its embedding mode needs: the
``clglow_py_*`` declarations (``embedding_api``: C functions that Python implements,
see ``_cbridge``), the C helpers Python calls (``cdef``) and the types both mention,
all read from the headers (see `onnxifi._cdecl`), plus the init code the library
runs in its interpreter. The build needs a C compiler, the Python headers and a shared
libpython (``python3-dev`` on Debian); no network.

Where it goes: `build_dir` (``ONNXIFI_CLGLOW_BUILD_DIR``, else
``<clglow cache dir>/onnxifi/<python>-<environment>``). The folder keeps what a debugger
needs: copies of the sources that were compiled, cffi's generated glue
``_onnxifi_clglow.c``, the objects (built with ``-g``), the linker's export list and the
library, plus a stamp: a hash of every build input and of the library. `library_path`
rebuilds when an input changed or the library no longer matches the stamp.

Example::

    python -m onnxifi --library        # prints the absolute path, building first if needed
    python -m onnxifi --build-dir      # the folder with the library and its sources
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from ._cdecl import BRIDGE_HEADER, HEADER, CffiDeclarations, cffi_declarations

log = logging.getLogger(__name__)

LIBRARY_NAME = "libonnxifi-clglow.so"
MODULE_NAME = "_onnxifi_clglow"
SOURCE = "onnxifi_clglow.c"
SOURCES = (SOURCE, HEADER, BRIDGE_HEADER)
STAMP_NAME = LIBRARY_NAME + ".stamp"
EXPORTS_NAME = "exports.map"
#: The library's dynamic symbols: onnxifi.h's 15 core functions and onnxifi_ext.h's lookup.
EXPORTED = ("onnxGetBackendIDs", "onnxReleaseBackendID", "onnxGetBackendInfo", "onnxGetBackendCompatibility",
            "onnxInitBackend", "onnxReleaseBackend", "onnxInitEvent", "onnxSignalEvent", "onnxGetEventState",
            "onnxWaitEvent", "onnxReleaseEvent", "onnxInitGraph", "onnxSetGraphIO", "onnxRunGraph",
            "onnxReleaseGraph", "onnxGetExtensionFunctionAddress")
#: Where onnx/onnxifi.h is looked for, in the C compiler's order of its default include folders (so
#: that `#include <onnx/onnxifi.h>` reads the file the cdef was taken from; Debian's libonnx-dev
#: installs the second).
SYSTEM_HEADERS = (Path("/usr/local/include/onnx/onnxifi.h"), Path("/usr/include/onnx/onnxifi.h"))
#: Bump when the build steps change in a way the inputs in `BuildInputs` do not show.
BUILD_FORMAT = 2
COMPILE_ARGS = ("-O2", "-g", "-fvisibility=hidden", "-Wall", "-Wno-unused-function")

_HERE = Path(__file__).resolve().parent
CSRC = _HERE / "csrc"


# --- the interpreter's start inside the library -------------------------------------------------
def _python_paths() -> tuple[list[str], list[str]]:
    """(folders for sys.path, site folders whose .pth files count) for the embedded interpreter.

    This package's parent first, then the building interpreter's site-packages (a virtual
    environment's included, which the embedded interpreter would not find by itself).
    """
    import site

    sites: list[str] = []
    for p in list(site.getsitepackages()) + [site.getusersitepackages(),
                                             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
        if p and os.path.isdir(p) and os.path.abspath(p) not in sites:
            sites.append(os.path.abspath(p))
    return [str(_HERE.parent)], sites


def _init_code() -> str:
    """Python run once by the library's interpreter: find the environment, import, register, mark ready."""
    # RTLD_DEEPBIND: a host may carry its own libonnx/libprotobuf (ONNX's test driver links
    # Debian's libonnx.so); onnx's Python extension must bind to its own copies, not those.
    paths, sites = _python_paths()
    return f"""
import os, site, sys
for _s in {sites!r}:
    site.addsitedir(_s)
for _p in reversed({paths!r} + [p for p in os.environ.get("ONNXIFI_CLGLOW_PYTHONPATH", "").split(os.pathsep) if p]):
    if _p in sys.path:
        sys.path.remove(_p)
    sys.path.insert(0, _p)
_flags = sys.getdlopenflags()
if hasattr(os, "RTLD_DEEPBIND") and os.environ.get("ONNXIFI_CLGLOW_DEEPBIND", "1") != "0":
    sys.setdlopenflags(_flags | os.RTLD_DEEPBIND)
try:
    from {MODULE_NAME} import ffi, lib
    from onnxifi import _cbridge
    _cbridge.preload()
finally:
    sys.setdlopenflags(_flags)
_cbridge.install(ffi, lib)
lib.clglow_mark_ready()
"""


# --- the inputs of a build, and where it goes ----------------------------------------------------
def system_header() -> Optional[Path]:
    """The installed ``onnx/onnxifi.h`` the library is compiled against, or None (then the
    copy of the ABI in onnxifi_clglow.h is used)."""
    return next((p for p in SYSTEM_HEADERS if p.is_file()), None)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class BuildInputs:
    """Everything a build reads; `digest` changes when any of it does."""

    sources: dict[str, bytes]
    header: Optional[Path]
    declarations: CffiDeclarations
    init_code: str
    define_macros: list[tuple[str, str]]
    library_dirs: list[str]
    link_args: list[str]

    @functools.cached_property
    def digest(self) -> str:
        import cffi

        parts = {"format": BUILD_FORMAT, "python": sys.version, "executable": sys.executable,
                 "cffi": cffi.__version__, "compile": list(COMPILE_ARGS),
                 "sources": {n: _sha256(b) for n, b in sorted(self.sources.items())},
                 "header": [str(self.header), _sha256(self.header.read_bytes())] if self.header else None,
                 "cdef": self.declarations.cdef, "embedding_api": self.declarations.embedding_api,
                 "init": self.init_code, "macros": self.define_macros,
                 "libdirs": self.library_dirs, "link": self.link_args,
                 "env": {k: os.environ.get(k, "") for k in ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED")}}
        return _sha256(json.dumps(parts, sort_keys=True).encode())[:32]


def build_inputs(source_dir: Optional[Path] = None) -> BuildInputs:
    """Read the build's inputs now (sources, the installed onnxifi.h, this interpreter's paths)."""
    source_dir = Path(source_dir) if source_dir else CSRC
    header = system_header()
    soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    macros = [("CLGLOW_LIBPYTHON_SONAME", f'"{soname}"')] if soname.endswith(".so") or ".so." in soname else []
    if header is None:
        macros.append(("CLGLOW_NO_SYSTEM_ONNXIFI_H", "1"))
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    return BuildInputs(
        sources={n: (source_dir / n).read_bytes() for n in SOURCES}, header=header,
        declarations=cffi_declarations(header, source_dir), init_code=_init_code(), define_macros=macros,
        library_dirs=[libdir] if libdir else [],
        link_args=[f"-Wl,--version-script={EXPORTS_NAME}"] + ([f"-Wl,-rpath,{libdir}"] if libdir else []))


def build_dir() -> Path:
    """The folder of the library, its sources and the build's leftovers (see the module docstring)."""
    env = os.environ.get("ONNXIFI_CLGLOW_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve()
    from clglow.runtime.cache import default_cache_dir

    # The init code names this environment's folders: one build folder per environment.
    where = _sha256(f"{sys.prefix}\0{_HERE.parent}".encode())[:10]
    return (default_cache_dir() / "onnxifi" / f"{sys.implementation.cache_tag}-{where}").resolve()


# --- staleness ------------------------------------------------------------------------------------
def _stale_reason(out: Path, inputs: BuildInputs) -> Optional[str]:
    """Why the build in `out` cannot be used as it is (None: it can)."""
    lib = out / LIBRARY_NAME
    if not lib.is_file():
        return f"{lib} is missing"
    try:
        stamp = json.loads((out / STAMP_NAME).read_text())
    except (OSError, ValueError) as e:
        return f"no readable stamp ({e})"
    if not isinstance(stamp, dict) or stamp.get("inputs") != inputs.digest:
        return "the sources or the build inputs changed"
    if stamp.get("library_sha256") != _sha256(lib.read_bytes()):
        return f"{lib} does not match its stamp (damaged or replaced)"
    for name, data in inputs.sources.items():
        copy = out / name
        if not copy.is_file() or copy.read_bytes() != data:
            return f"the copy of {name} in {out} differs from the source"
    return None


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` by `data` in one step (a reader sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes building into the same folder."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- the build ------------------------------------------------------------------------------------
def _compile(out: Path, inputs: BuildInputs, verbose: bool) -> Path:
    """Compile in `out` (the caller holds the lock); the library replaces the old one in one step."""
    import cffi

    out.mkdir(parents=True, exist_ok=True)
    for name, data in inputs.sources.items():  # the sources compiled are the ones left beside the library
        if not (out / name).is_file() or (out / name).read_bytes() != data:
            _write_atomic(out / name, data)
    _write_atomic(out / EXPORTS_NAME, ("{ global: " + " ".join(f"{n};" for n in EXPORTED) + " local: *; };\n").encode())
    ffi = cffi.FFI()
    ffi.cdef(inputs.declarations.cdef)
    ffi.embedding_api(inputs.declarations.embedding_api)
    # cffi's glue (_onnxifi_clglow.c) only needs the bridge's declarations; onnxifi_clglow.c is a
    # translation unit of its own. Relative paths: cffi compiles with `out` as the working folder.
    ffi.set_source(MODULE_NAME, f'#include "{BRIDGE_HEADER}"', sources=[SOURCE],
                   include_dirs=[str(out)], define_macros=inputs.define_macros,
                   library_dirs=inputs.library_dirs, extra_compile_args=list(COMPILE_ARGS),
                   extra_link_args=inputs.link_args)
    ffi.embedding_init_code(inputs.init_code)
    log.info("building %s in %s (onnxifi.h: %s)", LIBRARY_NAME, out, inputs.header or "onnxifi_clglow.h's copy")
    target = f".{LIBRARY_NAME}.{os.getpid()}.tmp"
    try:
        built = Path(ffi.compile(tmpdir=str(out), target=target, verbose=verbose))
        os.replace(built, out / LIBRARY_NAME)  # a new file: processes that loaded the old one keep it
    finally:
        (out / target).unlink(missing_ok=True)
    lib = out / LIBRARY_NAME
    stamp = {"inputs": inputs.digest, "library_sha256": _sha256(lib.read_bytes()), "python": sys.version,
             "onnxifi_h": str(inputs.header) if inputs.header else None, "cdef_types_from": inputs.declarations.types_from}
    _write_atomic(out / STAMP_NAME, (json.dumps(stamp, indent=1) + "\n").encode())
    return lib


def build_library(out_dir: Optional[Path] = None, verbose: bool = False) -> Path:
    """Compile the library now into `out_dir` (default `build_dir`); returns its path.

    Raises what cffi raises when the compiler or the linker fails (its message holds
    the compiler's), FileNotFoundError when a source is missing.
    """
    out = Path(out_dir).expanduser().resolve() if out_dir else build_dir()
    inputs = build_inputs()
    with _locked(out / (LIBRARY_NAME + ".lock")):
        return _compile(out, inputs, verbose)


def library_path(build: bool = True, out_dir: Optional[Path] = None) -> str:
    """Absolute path of the library; (re)builds it first when it is stale and `build` is true.

    Stale: missing, built from other sources or inputs, or not the file its stamp records.
    Example::

        >>> import onnxifi
        >>> onnxifi.library_path()            # doctest: +SKIP
        '/home/me/.cache/clglow/onnxifi/cpython-311-1f2e3d4c5b/libonnxifi-clglow.so'
    """
    out = Path(out_dir).expanduser().resolve() if out_dir else build_dir()
    inputs = build_inputs()
    reason = _stale_reason(out, inputs)
    if reason is not None:
        if not build:
            raise FileNotFoundError(f"{out / LIBRARY_NAME} cannot be used ({reason}); run `python -m onnxifi --build`")
        with _locked(out / (LIBRARY_NAME + ".lock")):
            reason = _stale_reason(out, inputs)
            if reason is not None:
                log.info("rebuilding the ONNXIFI library: %s", reason)
                _compile(out, inputs, verbose=False)
    return str((out / LIBRARY_NAME).resolve())
