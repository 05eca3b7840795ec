"""Build ``libonnxifi-clglow.so``: the ONNXIFI C ABI over the Python module, with cffi embedding.

The library starts (or joins) a Python interpreter on its first call and forwards
every ONNXIFI function to ``onnxifi._cbridge``. Only the 15 core functions and
``onnxGetExtensionFunctionAddress`` are exported (a linker version script hides
the rest). The build needs a C compiler, the Python headers and a shared
libpython (``python3-dev`` / ``libpython3.X-dev`` on Debian); no network.

Where it goes: next to this package when that folder is writable, else the user
cache folder (``platformdirs``; ``ONNXIFI_CLGLOW_BUILD_DIR`` overrides both). A
stamp of the sources decides when to rebuild.

Example::

    python -m onnxifi --library        # prints the absolute path, building first if needed
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

LIBRARY_NAME = "libonnxifi-clglow.so"
MODULE_NAME = "_onnxifi_clglow"
_HERE = Path(__file__).resolve().parent
_CSRC = _HERE / "csrc"

#: (name, return type, parameter list) of every exported function, as in onnxifi.h.
CORE_SIGNATURES = [
    ("onnxGetBackendIDs", "onnxBackendID* backendIDs, size_t* numBackends"),
    ("onnxReleaseBackendID", "onnxBackendID backendID"),
    ("onnxGetBackendInfo", "onnxBackendID backendID, onnxBackendInfo infoType, void* infoValue, size_t* infoValueSize"),
    ("onnxGetBackendCompatibility", "onnxBackendID backendID, size_t onnxModelSize, const void* onnxModel"),
    ("onnxInitBackend", "onnxBackendID backendID, const uint64_t* auxPropertiesList, onnxBackend* backend"),
    ("onnxReleaseBackend", "onnxBackend backend"),
    ("onnxInitEvent", "onnxBackend backend, onnxEvent* event"),
    ("onnxSignalEvent", "onnxEvent event"),
    ("onnxGetEventState", "onnxEvent event, onnxEventState* state"),
    ("onnxWaitEvent", "onnxEvent event"),
    ("onnxReleaseEvent", "onnxEvent event"),
    ("onnxInitGraph", "onnxBackend backend, const uint64_t* auxPropertiesList, size_t onnxModelSize, "
                      "const void* onnxModel, uint32_t weightsCount, "
                      "const onnxTensorDescriptorV1* weightDescriptors, onnxGraph* graph"),
    ("onnxSetGraphIO", "onnxGraph graph, uint32_t inputsCount, const onnxTensorDescriptorV1* inputDescriptors, "
                       "uint32_t outputsCount, const onnxTensorDescriptorV1* outputDescriptors"),
    ("onnxRunGraph", "onnxGraph graph, const onnxMemoryFenceV1* inputFence, onnxMemoryFenceV1* outputFence"),
    ("onnxReleaseGraph", "onnxGraph graph"),
]
#: Extension functions implemented in Python (static in C, reached through onnxGetExtensionFunctionAddress).
EXT_SIGNATURES = [
    ("onnxSetIOAndRunGraph", "onnxGraph graph, uint32_t inputsCount, const onnxTensorDescriptorV1* inputDescriptors, "
                             "uint32_t outputsCount, const onnxTensorDescriptorV1* outputDescriptors, "
                             "onnxMemoryFenceV1* outputFence, onnxTraceEventList* traceEvents"),
    ("onnxWaitEventFor", "onnxEvent event, uint32_t timeoutMs, onnxEventState* eventState, "
                         "onnxStatus* eventStatus, char* message, size_t* messageLength"),
]
EXPORTED = [n for n, _ in CORE_SIGNATURES] + ["onnxGetExtensionFunctionAddress"]

# Types for cffi's parser (the C compiler sees the real header through onnxifi_clglow.h).
_CDEF_TYPES = """
typedef void* onnxBackendID; typedef void* onnxBackend; typedef void* onnxGraph; typedef void* onnxEvent;
typedef int32_t onnxStatus; typedef uint64_t onnxEnum; typedef uint64_t onnxPointer;
typedef int32_t onnxBackendInfo; typedef int32_t onnxEventState;
typedef struct onnxTensorDescriptorV1 {
  int32_t tag; const char* name; onnxEnum dataType; onnxEnum memoryType;
  uint32_t dimensions; const uint64_t* shape; onnxPointer buffer;
} onnxTensorDescriptorV1;
typedef struct onnxMemoryFenceV1 { int32_t tag; onnxEnum type; onnxEvent event; } onnxMemoryFenceV1;
typedef struct onnxTraceEvent {
  char eventName[33]; char eventType; uint64_t timestamp; uint32_t tid; uint64_t duration;
} onnxTraceEvent;
typedef struct onnxTraceEventList { uint64_t numEvents; onnxTraceEvent** traceEvents; } onnxTraceEventList;
int clglow_trace_alloc(onnxTraceEventList* list, uint64_t n);
void clglow_trace_free(onnxTraceEventList* list);
void clglow_mark_ready(void);
"""


def _arg_names(params: str) -> str:
    return ", ".join(p.strip().replace("*", " ").split()[-1] for p in params.split(","))


def _c_source() -> str:
    """The hand-written C layer: exported wrappers, extension table, trace allocation."""
    soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
    out = ['#include "onnxifi_clglow.h"', "#include <dlfcn.h>", "#include <stdlib.h>", "#include <string.h>", "",
           "static volatile int clglow_ready = 0;",
           "void clglow_mark_ready(void) { clglow_ready = 1; }", "",
           "/* Hosts dlopen() us with RTLD_LOCAL, which hides libpython's symbols from the extension",
           "   modules the embedded interpreter imports: promote libpython to global scope first. */",
           "__attribute__((constructor)) static void clglow_promote_libpython(void) {",
           f'  if (!dlopen("{soname}", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))',
           f'    dlopen("{soname}", RTLD_NOW | RTLD_GLOBAL);',
           "}", ""]
    for name, params in CORE_SIGNATURES + EXT_SIGNATURES:
        out.append(f"onnxStatus clglow_py_{name}({params});")
    out.append("onnxStatus clglow_py_onnxGetExtensionFunctionAddress(onnxBackendID backendID, const char* name, "
               "int hasFunction);")
    out.append("")
    # Until the embedded interpreter has started and imported onnxifi, cffi answers 0
    # (= SUCCESS); the ready flag turns a failed start into BACKEND_UNAVAILABLE.
    for name, params in CORE_SIGNATURES:
        out += [f"ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI {name}({params}) {{",
                f"  onnxStatus status = clglow_py_{name}({_arg_names(params)});",
                "  return clglow_ready ? status : ONNXIFI_STATUS_BACKEND_UNAVAILABLE;", "}", ""]
    for name, params in EXT_SIGNATURES:
        out += [f"static onnxStatus ONNXIFI_ABI clglow_ext_{name}({params}) {{",
                f"  return clglow_py_{name}({_arg_names(params)});", "}", ""]
    out += [
        "int clglow_trace_alloc(onnxTraceEventList* list, uint64_t n) {",
        "  list->numEvents = 0; list->traceEvents = NULL;",
        "  if (n == 0) return 1;",
        "  onnxTraceEvent** arr = (onnxTraceEvent**)calloc((size_t)n, sizeof(onnxTraceEvent*));",
        "  if (!arr) return 0;",
        "  for (uint64_t i = 0; i < n; i++) {",
        "    arr[i] = (onnxTraceEvent*)calloc(1, sizeof(onnxTraceEvent));",
        "    if (!arr[i]) { for (uint64_t j = 0; j < i; j++) free(arr[j]); free(arr); return 0; }",
        "  }",
        "  list->traceEvents = arr; list->numEvents = n;",
        "  return 1;",
        "}", "",
        "void clglow_trace_free(onnxTraceEventList* list) {",
        "  if (list->traceEvents) {",
        "    for (uint64_t i = 0; i < list->numEvents; i++) free(list->traceEvents[i]);",
        "    free(list->traceEvents);",
        "  }",
        "  list->traceEvents = NULL; list->numEvents = 0;",
        "}", "",
        "static onnxStatus ONNXIFI_ABI clglow_ext_onnxReleaseTraceEvents(onnxTraceEventList* traceEvents) {",
        "  if (!traceEvents) return ONNXIFI_STATUS_INVALID_POINTER;",
        "  clglow_trace_free(traceEvents);",
        "  return ONNXIFI_STATUS_SUCCESS;",
        "}", "",
        "ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetExtensionFunctionAddress(",
        "    onnxBackendID backendID, const char* name, onnxExtensionFunctionPointer* function);",
        "static onnxExtensionFunctionPointer clglow_ext_lookup(const char* name) {",
        "  size_t n = strlen(name);",
        '  const size_t sfx = sizeof("Function") - 1;',
        '  if (n > sfx && strcmp(name + n - sfx, "Function") == 0 &&',
        '      strcmp(name, "onnxGetExtensionFunctionAddress") != 0) n -= sfx;',
        '#define CLGLOW_EXT(NAME, FN) if (n == sizeof(NAME) - 1 && strncmp(name, NAME, n) == 0) '
        'return (onnxExtensionFunctionPointer)(FN);',
        '  CLGLOW_EXT("onnxGetExtensionFunctionAddress", onnxGetExtensionFunctionAddress)',
        '  CLGLOW_EXT("onnxSetIOAndRunGraph", clglow_ext_onnxSetIOAndRunGraph)',
        '  CLGLOW_EXT("onnxWaitEventFor", clglow_ext_onnxWaitEventFor)',
        '  CLGLOW_EXT("onnxReleaseTraceEvents", clglow_ext_onnxReleaseTraceEvents)',
        "#undef CLGLOW_EXT",
        "  return NULL;",
        "}", "",
        "ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetExtensionFunctionAddress(",
        "    onnxBackendID backendID, const char* name, onnxExtensionFunctionPointer* function) {",
        "  if (function) *function = NULL;",
        "  onnxStatus status = clglow_py_onnxGetExtensionFunctionAddress(backendID, name, function != NULL);",
        "  if (!clglow_ready) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;",
        "  if (status != ONNXIFI_STATUS_SUCCESS) return status;",
        "  onnxExtensionFunctionPointer fn = clglow_ext_lookup(name);",
        "  if (!fn) return ONNXIFI_STATUS_UNIDENTIFIED_NAME;",
        "  *function = fn;",
        "  return ONNXIFI_STATUS_SUCCESS;",
        "}", "",
    ]
    return "\n".join(out)


def _embedding_api() -> str:
    lines = [f"onnxStatus clglow_py_{n}({p});" for n, p in CORE_SIGNATURES + EXT_SIGNATURES]
    lines.append("onnxStatus clglow_py_onnxGetExtensionFunctionAddress(onnxBackendID backendID, const char* name, "
                 "int hasFunction);")
    return "\n".join(lines)


def _python_paths() -> tuple[list[str], list[str]]:
    """(folders for sys.path, site folders whose .pth files count) for the embedded interpreter.

    This package's parent first, then the building interpreter's site-packages (a virtual
    environment's included, which the embedded interpreter would not find by itself).
    """
    import site

    sites = []
    for p in list(site.getsitepackages()) + [site.getusersitepackages(),
                                             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
        if p and os.path.isdir(p) and p not in sites:
            sites.append(os.path.abspath(p))
    return [str(_HERE.parent)], sites


def _init_code() -> str:
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


def _stamp() -> str:
    h = hashlib.sha256()
    for part in (_c_source(), _embedding_api(), _CDEF_TYPES, _init_code(), sys.version,
                 (_CSRC / "onnxifi_clglow.h").read_text(), Path(__file__).read_text()):
        h.update(part.encode())
    return h.hexdigest()[:16]


def _build_dir() -> Path:
    env = os.environ.get("ONNXIFI_CLGLOW_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve()
    if os.access(_HERE, os.W_OK):
        return _HERE
    try:
        from platformdirs import user_cache_dir

        base = Path(user_cache_dir("clglow"))
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "clglow"
    return base / "onnxifi" / f"py{sys.version_info[0]}{sys.version_info[1]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_library(out_dir: Path | None = None, verbose: bool = False) -> Path:
    """Compile the library into `out_dir` (default: see module docstring); returns its path."""
    import cffi

    out_dir = Path(out_dir) if out_dir else _build_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    ffi = cffi.FFI()
    ffi.cdef(_CDEF_TYPES)
    ffi.embedding_api(_embedding_api())
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    with tempfile.TemporaryDirectory(prefix="onnxifi-build-") as tmp:
        version_script = Path(tmp) / "exports.map"
        version_script.write_text("{ global: " + " ".join(f"{n};" for n in EXPORTED) + " local: *; };\n")
        ffi.set_source(MODULE_NAME, _c_source(), include_dirs=[str(_CSRC)],
                       library_dirs=[libdir] if libdir else [],
                       extra_compile_args=["-O2", "-fvisibility=hidden", "-Wall", "-Wno-unused-function"],
                       extra_link_args=[f"-Wl,--version-script={version_script}"]
                       + ([f"-Wl,-rpath,{libdir}"] if libdir else []))
        ffi.embedding_init_code(_init_code())
        log.info("building %s in %s", LIBRARY_NAME, out_dir)
        built = ffi.compile(tmpdir=tmp, target=LIBRARY_NAME, verbose=verbose)
        final = out_dir / LIBRARY_NAME
        tmp_final = out_dir / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
        shutil.copy2(built, tmp_final)
        os.replace(tmp_final, final)
    (out_dir / (LIBRARY_NAME + ".stamp")).write_text(_stamp())
    return final


def library_path(build: bool = True) -> str:
    """Absolute path of the library; (re)builds it when missing or stale and `build` is true."""
    out_dir = _build_dir()
    lib = out_dir / LIBRARY_NAME
    stamp = out_dir / (LIBRARY_NAME + ".stamp")

    def fresh() -> bool:
        return lib.exists() and stamp.exists() and stamp.read_text().strip() == _stamp()

    if not fresh():
        if not build:
            raise FileNotFoundError(f"{lib} is not built (run `python -m onnxifi --build`)")
        with _locked(out_dir / (LIBRARY_NAME + ".lock")):
            if not fresh():
                build_library(out_dir)
    return str(lib.resolve())
