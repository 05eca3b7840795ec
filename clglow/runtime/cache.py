"""The OpenCL program cache: in memory per device, and on disk.

Why our own cache: pyopencl skips its binary cache on pocl and NVIDIA (it trusts
the ICD to cache), so nothing guarantees a warm start. We build through
``Program.build(..., cache_dir=False)`` so pyopencl never writes a second copy,
keep built programs in memory per (source hash, options), and store program
binaries on disk under a key that includes everything that can change the
binary: source, options, platform/device/driver versions and clglow's version
(Glow's cache once omitted the device; we do not).

Where the driver keeps a compiled-kernel cache of its own (pocl: ``POCL_CACHE_DIR``, on by
default), the disk layer is skipped unless forced (``CLGLOW_CACHE=1``): asking pocl for a
program's binary makes it generate machine code for a work-group size nobody launches, about
3 s per GEMM variant on a 2-core CPU (measured: ResNet-50 cold start 28 s with our binaries,
11 s without), while its own cache already makes a second process build nothing. Binaries that
a compile helper stored in the background are still read there (`read_directory`,
`store_binary`, runtime.compile_worker): loading one takes ~4 ms of CPU where pocl spends ~25 ms
finding a source build in its own cache, and a warm start loads a model's programs one at a time.

The driver's own cache is checked before the driver loads (runtime.driver_cache: a damaged
file there would crash pocl); what the driver prints while it builds goes to logging
(runtime.build_output), and a CompileError carries the whole build log.

Disk layout: ``<cache dir>/programs/<key>.clbin``, written atomically (temp file
+ ``os.replace``); each file is ``MAGIC + sha256(binary) + binary``, so a torn
or corrupt file is detected, ignored and rebuilt, never fatal.

Example::

    cache = ProgramCache(ctx, dev)
    prg = cache.get("gemm", source, ("-DTILE=16",))
    cache.stats()  # {'source_builds': 1, 'binary_loads': 0, 'memory_hits': 0, ...}
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import pyopencl as cl

from .. import config
from .._version import __version__
from ..errors import CompileError
from .build_output import program_log, quiet_build

log = logging.getLogger(__name__)

MAGIC = b"CLGLOWBIN1\n"
_SUFFIX = ".clbin"
_COUNTERS = ("source_builds", "binary_loads", "memory_hits", "disk_writes", "disk_rejects")

# Process-wide totals over every ProgramCache (the CLI reports these).
_totals: Dict[str, int] = dict.fromkeys(_COUNTERS, 0)
_totals_lock = threading.Lock()


def stats() -> Dict[str, int]:
    """Process-wide counters summed over every ProgramCache: builds, loads, hits, writes, rejects."""
    with _totals_lock:
        return dict(_totals)


def reset_stats() -> None:
    """Zero the process-wide counters (tests, benchmarks)."""
    with _totals_lock:
        for k in _totals:
            _totals[k] = 0


def default_cache_dir() -> Path:
    """The cache root: CLGLOW_CACHE_DIR, else platformdirs' user cache dir for ``clglow``."""
    override = config.cache_dir()
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("clglow", appauthor=False))


def programs_dir(root: Optional[Path] = None) -> Path:
    """Where program binaries live inside the cache root."""
    return (root if root is not None else default_cache_dir()) / "programs"


def prepared_dir(root: Optional[Path] = None) -> Path:
    """Where the markers of background preparations live (runtime.preparation): one empty file
    per program and kernel whose code the driver's own cache holds."""
    return (root if root is not None else default_cache_dir()) / "prepared"


def disk_usage(root: Optional[Path] = None) -> Tuple[int, int]:
    """(number of cached binaries, total bytes) under the cache root; (0, 0) when absent."""
    d = programs_dir(root)
    count = size = 0
    if d.is_dir():
        for p in d.glob("*" + _SUFFIX):
            try:
                size += p.stat().st_size
                count += 1
            except OSError:
                pass
    return count, size


def clear_disk(root: Optional[Path] = None) -> int:
    """Delete every cached binary (and stray temp files); returns how many binaries were removed."""
    d = programs_dir(root)
    removed = 0
    if d.is_dir():
        for p in d.iterdir():
            if p.suffix == _SUFFIX or p.name.startswith(".tmp-"):
                try:
                    p.unlink()
                    removed += p.suffix == _SUFFIX
                except OSError as e:
                    log.warning("could not remove %s: %s", p, e)
    return removed


def _sha256(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def disk_key(source: str, options: Sequence[str], device: cl.Device, extra: str = "") -> str:
    """The on-disk key: everything that can change the binary, hashed.

    `extra` carries what the caller knows changes the program too (e.g. the hash of
    included headers).
    """
    plat = device.platform
    fields = {
        "source": _sha256(source),
        "options": list(options),
        "platform": plat.name,
        "platform_version": plat.version,
        "device": device.name,
        "device_version": device.version,
        "driver_version": device.driver_version,
        "clglow": __version__,
        "pyopencl_build_options": os.environ.get("PYOPENCL_BUILD_OPTIONS", ""),
        "extra": extra,
    }
    return _sha256(json.dumps(fields, sort_keys=True))


def driver_caches_programs(device: cl.Device) -> bool:
    """Whether the OpenCL driver keeps its own on-disk cache of built programs.

    pocl does (``POCL_KERNEL_CACHE``, default on); for other drivers we do not rely on it.
    """
    try:
        pocl = "portable computing language" in device.platform.name.lower()
    except cl.Error:
        return False
    return pocl and os.environ.get("POCL_KERNEL_CACHE", "1").strip() not in ("0", "")


def _device_label(device: cl.Device) -> str:
    return f"{device.name.strip()} ({device.platform.name.strip()})"


def _build_log(prg: Optional[cl.Program], device: cl.Device, err: Exception) -> str:
    """The whole build log from the program when reachable, else pyopencl's message (which
    embeds it)."""
    text = program_log(prg, device) if prg is not None else ""
    return text or str(err)


def _kernel_count(prg: cl.Program) -> int:
    """How many kernels a built program holds (-1 when the driver cannot say)."""
    try:
        return int(prg.get_info(cl.program_info.NUM_KERNELS))
    except Exception:  # noqa: BLE001 - an old driver without the query: trust the build
        return -1


class ProgramCache:
    """Programs for one (context, device): memory first, then disk, then a source build.

    Thread-safe: concurrent requests for the same program wait for one build;
    different programs build in parallel (pyopencl releases the GIL while building).
    `directory`/`enabled` default to the CLGLOW_CACHE_DIR / CLGLOW_CACHE settings,
    read at each call so a changed environment takes effect. With `enabled` left unset the disk
    layer is skipped on a driver that caches its own programs (see driver_caches_programs)
    unless CLGLOW_CACHE=1; `enabled=True` always uses it.
    """

    def __init__(self, context: cl.Context, device: cl.Device,
                 directory: Optional[os.PathLike | str] = None, enabled: Optional[bool] = None):
        self.context = context
        self.device = device
        self._directory = Path(directory) if directory is not None else None
        self._enabled = enabled
        self._memory: Dict[Tuple[str, Tuple[str, ...]], cl.Program] = {}
        self._inflight: Dict[Tuple[str, Tuple[str, ...]], Future] = {}
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = dict.fromkeys(_COUNTERS, 0)

    # -- configuration ----------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """Whether the disk layer is used (the memory layer always is)."""
        if self._enabled is not None:
            return self._enabled
        if not config.cache_enabled():
            return False
        return config.cache_forced() or not driver_caches_programs(self.device)

    @property
    def directory(self) -> Optional[Path]:
        """The folder holding binaries, or None when the disk cache is disabled."""
        if not self.enabled:
            return None
        return programs_dir(self._directory if self._directory is not None else None)

    @property
    def read_directory(self) -> Optional[Path]:
        """Where binaries are looked for: `directory`, and on a driver with its own program cache
        (which the disk layer leaves alone at build time) the same folder whenever the cache is
        on, since compile helpers store binaries there in the background (`store_binary`): a
        binary loads in about 4 ms of CPU where pocl takes about 25 ms to find a source build in
        its own cache (measured, 2-vCPU Zen 5)."""
        if self._enabled is False or (self._enabled is None and not config.cache_enabled()):
            return None
        return programs_dir(self._directory if self._directory is not None else None)

    def store_binary(self, name: str, source: str, options: Sequence[str] = (), extra_key: str = "") -> bool:
        """Write this program's binary for later processes unless one is there (asking pocl for it
        generates code: ~1 s of CPU per GEMM variant, so compile helpers do it when idle).
        False when nothing was written."""
        directory = self.read_directory
        if directory is None or not directory.parent.is_dir():  # the cache folder was removed: not again
            return False
        path = directory / (disk_key(source, tuple(options), self.device, extra_key) + _SUFFIX)
        if path.exists():
            return False
        return self._store(path, self.get(name, source, options, extra_key=extra_key))

    # -- counters ---------------------------------------------------------------------------
    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1
        with _totals_lock:
            _totals[name] += 1

    def stats(self) -> Dict[str, int]:
        """This cache's counters: source_builds, binary_loads, memory_hits, disk_writes, disk_rejects."""
        with self._lock:
            return dict(self._counts)

    def clear_memory(self) -> None:
        """Forget built programs (the disk copies stay)."""
        with self._lock:
            self._memory.clear()

    # -- the entry point --------------------------------------------------------------------
    def get(self, name: str, source: str, options: Sequence[str] = (),
            build_options: Sequence[str] = (), extra_key: str = "") -> cl.Program:
        """A built program for `source` with `options`.

        `name` labels logs and errors. `build_options` are passed to the compiler but kept
        out of the keys (e.g. ``-I <path>`` that differs between installs); `extra_key`
        goes into the disk key instead (e.g. a hash of the included headers).
        Raises CompileError with the build log, the options and the device.
        """
        options = tuple(options)
        key = (_sha256(source + "\0" + extra_key), options)
        with self._lock:
            prg = self._memory.get(key)
            if prg is not None:
                self._counts["memory_hits"] += 1
                with _totals_lock:
                    _totals["memory_hits"] += 1
                return prg
            fut = self._inflight.get(key)
            owner = fut is None
            if owner:
                fut = Future()
                self._inflight[key] = fut
        if not owner:
            prg = fut.result()  # re-raises the builder's CompileError
            self._count("memory_hits")
            return prg
        try:
            prg = self._load_or_build(name, source, options, tuple(build_options), extra_key)
        except BaseException as e:
            with self._lock:
                del self._inflight[key]
            fut.set_exception(e)
            raise
        with self._lock:
            self._memory[key] = prg
            del self._inflight[key]
        fut.set_result(prg)
        return prg

    # -- layers -----------------------------------------------------------------------------
    def _load_or_build(self, name: str, source: str, options: Tuple[str, ...],
                       build_options: Tuple[str, ...], extra_key: str) -> cl.Program:
        directory = self.read_directory
        path = None
        if directory is not None:
            path = directory / (disk_key(source, options, self.device, extra_key) + _SUFFIX)
            prg = self._load(name, path, options + build_options)
            if prg is not None:
                return prg
        prg = self._build(name, source, options, build_options)
        if path is not None and self.enabled:
            self._store(path, prg)
        return prg

    def _load(self, name: str, path: Path, all_options: Tuple[str, ...]) -> Optional[cl.Program]:
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("program cache: cannot read %s (%s); rebuilding", path, e)
            return None
        head = len(MAGIC) + 32
        binary = blob[head:]
        if (len(blob) <= head or not blob.startswith(MAGIC)
                or hashlib.sha256(binary).digest() != blob[len(MAGIC):head]):
            return self._reject(path, name, "corrupt or truncated file")
        t0 = time.perf_counter()
        try:
            with quiet_build():
                prg = cl.Program(self.context, [self.device], [binary]).build(
                    options=list(all_options), devices=[self.device])
        except Exception as e:  # noqa: BLE001 - any unloadable binary is rebuilt, never fatal
            return self._reject(path, name, f"binary did not load: {str(e).splitlines()[0]}")
        if _kernel_count(prg) == 0:
            return self._reject(path, name, "binary holds no kernels")
        self._count("binary_loads")
        log.debug("program %s %s loaded from %s in %.3f s", name, " ".join(all_options),
                  path, time.perf_counter() - t0)
        return prg

    def _reject(self, path: Path, name: str, why: str) -> None:
        log.warning("program cache: ignoring %s for %s (%s); rebuilding", path.name, name, why)
        self._count("disk_rejects")
        try:
            path.unlink()
        except OSError:
            pass
        return None

    def _build(self, name: str, source: str, options: Tuple[str, ...],
               build_options: Tuple[str, ...]) -> cl.Program:
        prg = self._build_once(name, source, options, build_options)
        if _kernel_count(prg) == 0 and "__kernel" in source:
            # A driver that serves a program from its own cache may hand back one without its
            # kernels: seen with PyPI's pocl 3.0-rc2 (LLVM 14) on an AVX2 target for programs
            # calling float16 builtins (softmax.cl, fused_elementwise.cl), on every process after
            # the first, until kernels_cl/vmath.h split that math; kept as a safety net. A define
            # no source reads makes the driver's cache key new: a real build.
            log.warning("OpenCL driver on %s returned %s %s without kernels (from its program "
                        "cache?); building it again", _device_label(self.device), name, " ".join(options))
            fresh = (f"-DCLGLOW_FRESH_BUILD={os.getpid()}_{time.time_ns()}",)
            prg = self._build_once(name, source, options, build_options + fresh)
            if _kernel_count(prg) == 0:
                raise CompileError(name, _device_label(self.device), options,
                                   "the driver reported success but the program holds no kernels")
        return prg

    def _build_once(self, name: str, source: str, options: Tuple[str, ...],
                    build_options: Tuple[str, ...]) -> cl.Program:
        t0 = time.perf_counter()
        prg = cl.Program(self.context, source)
        all_options = list(options + build_options)
        try:
            # cache_dir=False: pyopencl writes no binary cache of its own (we are the cache).
            with quiet_build():  # the driver's output goes to logging, not the terminal
                prg = prg.build(options=all_options, devices=[self.device], cache_dir=False)
        except cl.Error as e:
            # On the path pyopencl takes for pocl the program object exists and holds the log;
            # on the other path the log is only in the message.
            has_prg = getattr(prg, "_prg", None) is not None
            raise CompileError(name, _device_label(self.device), options,
                               _build_log(prg if has_prg else None, self.device, e)) from e
        self._count("source_builds")
        log.info("built OpenCL program %s %s for %s in %.2f s", name, " ".join(options),
                 self.device.name.strip(), time.perf_counter() - t0)
        text = program_log(prg, self.device)
        if text:
            log.debug("build log of %s %s on %s:\n%s", name, " ".join(options), _device_label(self.device), text)
        return prg

    def _store(self, path: Path, prg: cl.Program) -> bool:
        try:
            devices = prg.get_info(cl.program_info.DEVICES)
            binaries = prg.get_info(cl.program_info.BINARIES)
            binary = binaries[list(devices).index(self.device)]
        except Exception as e:  # noqa: BLE001 - some ICDs cannot export binaries; memory only then
            log.debug("program cache: no binary to store (%s)", e)
            return False
        if not binary:
            return False
        try:
            atomic_write(path, MAGIC + hashlib.sha256(binary).digest() + bytes(binary))
            self._count("disk_writes")
            return True
        except OSError as e:
            log.warning("program cache: cannot write %s (%s); continuing without it", path, e)
            return False


def atomic_write(path: Path, data: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
    """Write `data` (one buffer, or parts one after another) to `path` through a temporary file
    and os.replace, so a reader sees the old file or the whole new one, never a torn one. Raises
    OSError (the temporary file removed)."""
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for p in parts:
                f.write(p)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise

__all__ = ["ProgramCache", "stats", "reset_stats", "default_cache_dir", "programs_dir",
           "prepared_dir", "disk_usage", "clear_disk", "disk_key", "driver_caches_programs", "atomic_write", "MAGIC"]
