"""OpenCL devices: enumerate, select, and share one context per device.

Why this file exists: pyopencl's ``create_some_context()`` may prompt on a
terminal; clglow never does. We parse the selector ourselves (CLGLOW_DEVICE,
then PYOPENCL_CTX), accept pyopencl's ``platform:device`` syntax, and cache one
`Device` (context, in-order queue, program cache) per OpenCL device so that a
process creating many sessions creates one context.

Selectors (case-insensitive):
  ``0:1``               platform 0, device 1
  ``portable:pthread``  name substrings of platform and device
  ``nvidia`` / ``1``    a platform (its first device); a name that matches no
                        platform is tried against device names
  ``gpu`` / ``cpu`` / ``accelerator``   the first device of that type
  nothing               the first GPU, else the first device

Example::

    dev = select_device("cpu")
    prg = dev.program("gemm", ("-DTILE=16",))
"""
from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import logging
import os
import re
import threading
import weakref
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyopencl as cl

from .. import config
from ..errors import CompileError, InvalidArgument, NoDevice
from ..target import Target, device_type as _type_name, has_fp64 as _has_fp64
from ..target import pocl_target_cpu, query as query_target
from .cache import ProgramCache, atomic_write, default_cache_dir, disk_key, driver_caches_programs
from .compile_worker import CompileWorkers, default_count, encode_noop

log = logging.getLogger(__name__)

INSTALL_HINT = ('No OpenCL platform found. Install one, e.g. the CPU implementation pocl: '
                '`pip install "pyopencl[pocl]"` or `apt-get install pocl-opencl-icd`.')

# Compile helpers (runtime.compile_worker): the estimated LLVM time of a preparation, in about
# seconds on pocl (a GEMM variant 0.5-0.9 s, another program and kernel 0.1-0.3 s); program()
# waits at most _REMOTE_WAIT_S for a helper before building itself.
_GEMM_COST = 1.0
_OTHER_COST = 0.3
_LOCAL_HANDICAP = 1.0  # this process also loads the model (Python) while it builds
_REMOTE_WAIT_S = 120.0

_TYPE_WORDS = {"gpu": "gpu", "cpu": "cpu", "accelerator": "accelerator", "acc": "accelerator"}


# --- enumeration -----------------------------------------------------------------------------
def _has_fp16(device: cl.Device) -> bool:
    return "cl_khr_fp16" in device.extensions.split()


def _platforms() -> List[Tuple[cl.Platform, List[cl.Device]]]:
    """Every platform with its devices; [] when no ICD is installed. Never prompts."""
    try:
        platforms = cl.get_platforms()
    except (cl.Error, RuntimeError) as e:  # PLATFORM_NOT_FOUND_KHR: LogicError or RuntimeError
        log.debug("no OpenCL platform: %s", e)
        return []
    out = []
    for p in platforms:
        try:
            devices = list(p.get_devices())
        except cl.Error as e:  # DEVICE_NOT_FOUND on an empty platform
            log.debug("platform %r has no usable devices: %s", p.name, e)
            devices = []
        out.append((p, devices))
    return out


@dataclass(frozen=True)
class DeviceDescription:
    """One OpenCL device as `clglow devices` shows it, with the selector that picks it."""

    platform_index: int
    device_index: int
    platform_name: str
    platform_version: str
    name: str
    type: str  # "cpu" | "gpu" | "accelerator"
    compute_units: int
    global_mem_size: int
    max_alloc_size: int
    has_fp16: bool
    has_fp64: bool
    driver_version: str
    opencl_version: str
    selector: str  # exact CLGLOW_DEVICE value, "P:D" by index
    name_selector: Optional[str] = None  # e.g. "portable:pthread", when it picks this device alone

    def describe(self) -> str:
        """One line: name, type, platform, memory, and how to select it."""
        alt = f" or {self.name_selector}" if self.name_selector else ""
        return (f"[{self.selector}] {self.name} ({self.type.upper()}, {self.platform_name}, "
                f"{self.opencl_version}, {self.compute_units} CU, "
                f"{self.global_mem_size / 2**30:.1f} GiB) CLGLOW_DEVICE={self.selector}{alt}")


def _first_word(name: str) -> str:
    words = re.split(r"[\s\-_()@,]+", name.strip().lower())
    return next((w for w in words if w), "")


def list_devices() -> List[DeviceDescription]:
    """Every device of every platform, in (platform, device) index order; [] without OpenCL.

    Example::

        for d in list_devices():
            print(d.describe())
    """
    plats = _platforms()
    out = []
    for pi, (p, devices) in enumerate(plats):
        for di, d in enumerate(devices):
            cand = f"{_first_word(p.name)}:{_first_word(d.name)}"
            try:
                name_sel = cand if _resolve(cand, plats) == (pi, di) else None
            except NoDevice:
                name_sel = None
            out.append(DeviceDescription(
                platform_index=pi, device_index=di, platform_name=p.name.strip(),
                platform_version=p.version.strip(), name=d.name.strip(), type=_type_name(d),
                compute_units=int(d.max_compute_units), global_mem_size=int(d.global_mem_size),
                max_alloc_size=int(d.max_mem_alloc_size), has_fp16=_has_fp16(d),
                has_fp64=_has_fp64(d), driver_version=d.driver_version.strip(),
                opencl_version=d.version.strip(), selector=f"{pi}:{di}", name_selector=name_sel))
    return out


# --- selection -------------------------------------------------------------------------------
def _available(plats: List[Tuple[cl.Platform, List[cl.Device]]]) -> str:
    lines = [f"  {pi}:{di}  {d.name.strip()} ({_type_name(d)}, {p.name.strip()})"
             for pi, (p, devs) in enumerate(plats) for di, d in enumerate(devs)]
    return "Available devices (CLGLOW_DEVICE=...):\n" + ("\n".join(lines) if lines else "  (none)")


def _pick(part: str, names: Sequence[str], what: str) -> int:
    """Index of `part` among `names`: an integer index, else the first case-insensitive substring match."""
    part = part.strip()
    if re.fullmatch(r"\d+", part):
        idx = int(part)
        if idx >= len(names):
            raise LookupError(f"{what} index {idx} out of range (there are {len(names)})")
        return idx
    low = part.lower()
    for i, n in enumerate(names):
        if low in n.lower():
            return i
    raise LookupError(f"no {what} name contains {part!r}")


def _resolve(selector: Optional[str],
             plats: List[Tuple[cl.Platform, List[cl.Device]]]) -> Tuple[int, int]:
    """(platform index, device index) for a selector; raises NoDevice listing the choices."""
    if not any(devs for _, devs in plats):
        raise NoDevice(INSTALL_HINT)
    flat = [(pi, di, d) for pi, (_, devs) in enumerate(plats) for di, d in enumerate(devs)]
    sel = (selector or "").strip()
    if not sel:
        gpus = [(pi, di) for pi, di, d in flat if _type_name(d) == "gpu"]
        return gpus[0] if gpus else (flat[0][0], flat[0][1])
    word = sel.lower()
    if word in _TYPE_WORDS:
        matches = [(pi, di) for pi, di, d in flat if _type_name(d) == _TYPE_WORDS[word]]
        if not matches:
            raise NoDevice(f"No {_TYPE_WORDS[word].upper()} device found for selector {sel!r}.\n"
                           + _available(plats))
        return matches[0]
    plat_part, sep, dev_part = sel.partition(":")
    try:
        pi = _pick(plat_part, [p.name for p, _ in plats], "platform") if plat_part.strip() else 0
        devs = plats[pi][1]
        if sep and dev_part.strip():
            return pi, _pick(dev_part, [d.name for d in devs], f"device of platform {pi}")
        if not devs:
            raise LookupError(f"platform {pi} ({plats[pi][0].name.strip()}) has no devices")
        return pi, 0
    except LookupError as e:
        if not sep and not re.fullmatch(r"\d+", plat_part.strip()):
            # A bare name that is no platform's: try it against device names (e.g. "rtx").
            for pi2, di2, d in flat:
                if plat_part.strip().lower() in d.name.lower():
                    return pi2, di2
        raise NoDevice(f"Device selector {sel!r} matches no OpenCL device: {e}.\n"
                       + _available(plats)) from None


# --- Device ---------------------------------------------------------------------------------
class Device:
    """One OpenCL device with its context, in-order queue and program cache.

    Get one with `select_device()` or `Device.from_context()`; both return a shared
    instance, so every session on a device shares one context, queue and cache.
    """

    def __init__(self, context: cl.Context, device: cl.Device, selector: Optional[str] = None):
        self.context = context
        self.cl_device = device
        self.platform: cl.Platform = device.platform
        self.info: Target = query_target(device)
        self.selector = selector  # the "P:D" selector when chosen by select_device
        self.queue = cl.CommandQueue(context, device)  # in-order
        self.cache = ProgramCache(context, device)
        self._profiling_queue: Optional[cl.CommandQueue] = None
        self._lock = threading.Lock()
        # background preparation of programs (see prepare)
        self._prep_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._prepared: set = set()
        self._prep_futures: list = []
        self._warm_queue: Optional[cl.CommandQueue] = None
        self._dummy: Optional[cl.Buffer] = None
        # helper processes for a cold start on pocl (runtime.compile_worker), made on first need
        self._workers: Optional[CompileWorkers] = None
        self._workers_checked = False
        self._remote: Dict[Tuple[str, Tuple[str, ...]], concurrent.futures.Future] = {}
        self._local_programs: set = set()
        self._local_load = _LOCAL_HANDICAP  # estimated cost of the preparations given to this process
        self._tune_lock = threading.Lock()
        self._tuned = False

    @classmethod
    def from_context(cls, ctx: Union[cl.Context, int], device: Optional[cl.Device] = None) -> "Device":
        """Wrap a context the caller shares (ONNXIFI's OPENCL_CONTEXT); `device` defaults to its first.

        `ctx` may be a raw ``cl_context`` handle (an int, as ONNXIFI passes it); it is retained.
        The same (context, device) gives the same Device while any user holds it.
        """
        if isinstance(ctx, int):
            try:
                ctx = cl.Context.from_int_ptr(ctx, retain=True)
            except cl.Error as e:
                raise InvalidArgument(f"not a valid OpenCL context handle: {ctx:#x} ({e})") from e
        ctx_devices = list(ctx.devices)
        if device is None:
            device = ctx_devices[0]
        elif device not in ctx_devices:
            raise InvalidArgument(f"device {device.name.strip()!r} is not in the given context "
                                  f"(it holds {[d.name.strip() for d in ctx_devices]})")
        key = (ctx.int_ptr, device.int_ptr)
        with _registry_lock:
            dev = _wrapped.get(key)
            if dev is None or dev.context != ctx:
                dev = cls(ctx, device)
                _wrapped[key] = dev
            return dev

    @property
    def name(self) -> str:
        return self.info.name

    def make_queue(self, profiling: bool = False) -> cl.CommandQueue:
        """A new in-order queue on this device's context; with `profiling`, events carry timings."""
        props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
        return cl.CommandQueue(self.context, self.cl_device, properties=props)

    @property
    def profiling_queue(self) -> cl.CommandQueue:
        """A shared in-order queue with profiling enabled, created on first use."""
        with self._lock:
            if self._profiling_queue is None:
                self._profiling_queue = self.make_queue(profiling=True)
            return self._profiling_queue

    def program(self, name: str, options: Sequence[str] = ()) -> cl.Program:
        """The built program ``kernels_cl/<name>.cl`` with `options`, through the program cache.

        Thread-safe. Raises CompileError (with the build log) when the source does not build
        or does not exist.
        """
        options = tuple(options)
        with self._lock:
            remote = self._remote.get((name, options))
        if remote is not None and not remote.done():
            # a helper process is building it into pocl's cache: wait, then load it from there
            concurrent.futures.wait([remote], timeout=_REMOTE_WAIT_S)
        if self.info.float16_math_split:
            options += ("-DCLG_SPLIT16=1",)  # kernels_cl/vmath.h
        try:
            source = kernel_source(name)
        except (FileNotFoundError, InvalidArgument) as e:
            raise CompileError(name, self.describe(), options, str(e)) from e
        return self.cache.get(name, source, options)

    def set_gemm_tiles(self, tiles: Optional[tuple]) -> None:
        """Lower GEMMs with these (MR, VW, NV, local size) from now on (runtime.tuning)."""
        with self._lock:
            self.info = dataclasses.replace(self.info, gemm_tiles=None if tiles is None else tuple(tiles))

    def ensure_tuned(self) -> None:
        """Choose the GEMM tiles once per process (from disk, or by measuring; runtime.tuning)."""
        with self._tune_lock:
            if self._tuned:
                return
            from .tuning import tune_gemm

            try:
                tune_gemm(self)
            except Exception as e:  # noqa: BLE001 - tuning is an optimisation; defaults always work
                log.warning("GEMM tuning failed on %s (%s); using default tiles", self.info.name, e)
            self._tuned = True

    def prepare(self, program: str, options: Sequence[str], kernel: str, lsize: Optional[tuple],
                noop_args: Optional[list]) -> None:
        """Start building a program in the background, and then get the driver to generate the
        kernel's machine code for `lsize` by enqueueing it once with `noop_args` (arguments that
        make it return at once; buffer arguments may be anything, a dummy buffer stands in).

        Why: on pocl a build only parses; machine code is generated per work-group size at the
        first launch, in pocl's worker threads. Doing both while the rest of the model loads
        (weights packed, other nodes lowered) overlaps them; a cold start is dominated by them.
        Best effort: a failure here is left for the real `program()` call to report.
        """
        options = tuple(options)
        key = (program, options, kernel, None if lsize is None else tuple(lsize), noop_args is not None)
        with self._lock:
            if key in self._prepared:
                return
            self._prepared.add(key)
            if self._prep_pool is None:
                self._prep_pool = concurrent.futures.ThreadPoolExecutor(
                    max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="clglow-prepare")
            pool = self._prep_pool
        marker = self._marker(program, options, kernel, lsize)
        workers = None if marker is None or marker.exists() else self._compile_workers()
        cost = _GEMM_COST if program == "gemm" else _OTHER_COST
        fut: concurrent.futures.Future
        if workers is not None and self._goes_remote(program, options, cost, workers):
            # built and generated in a helper process first, then here from pocl's cache
            fut = concurrent.futures.Future()
            job = {"program": program, "options": list(options), "kernel": kernel,
                   "lsize": None if lsize is None else list(lsize), "noop": encode_noop(noop_args)}
            remote = workers.submit(job, cost)
            log.debug("preparing %s %s %s in a compile helper", program, " ".join(options), kernel)
            with self._lock:
                self._remote.setdefault((program, options), remote)

            def follow(r: concurrent.futures.Future) -> None:
                if r.exception() is not None:
                    log.debug("compile helper could not prepare %s %s: %s", program, " ".join(options),
                              r.exception())
                else:
                    log.debug("compile helper prepared %s %s %s", program, " ".join(options), kernel)
                try:
                    local = pool.submit(self._prepare_one, program, options, kernel, lsize, noop_args, marker)
                except RuntimeError:  # the process is exiting (pool shut down): nothing left to warm
                    fut.set_result(None)
                    return
                local.add_done_callback(lambda _l: fut.set_result(None))
            remote.add_done_callback(follow)
        else:
            fut = pool.submit(self._prepare_one, program, options, kernel, lsize, noop_args, marker)
        with self._lock:
            self._prep_futures = [f for f in self._prep_futures if not f.done()] + [fut]

    def _goes_remote(self, program: str, options: tuple, cost: float, workers: CompileWorkers) -> bool:
        """Whether a preparation goes to a helper: where its program went before, else to the
        side given less work so far (a helper's start counts as work; so does this process's
        loading of the model)."""
        with self._lock:
            if (program, options) in self._remote:
                return True
            if (program, options) in self._local_programs:
                return False
            if workers.load() <= self._local_load:
                return True
            self._local_programs.add((program, options))
            self._local_load += cost
            return False

    def _compile_workers(self) -> Optional[CompileWorkers]:
        """This device's helper processes when they can help (pocl with its kernel cache on, more
        than one core, not turned off by CLGLOW_COMPILE_WORKERS=0), else None."""
        with self._lock:
            if not self._workers_checked:
                self._workers_checked = True
                count = default_count()
                index = _device_index(self.cl_device)
                if count > 0 and index is not None and driver_caches_programs(self.cl_device):
                    self._workers = CompileWorkers(index, count)
                    atexit.register(self._workers.close)
            return self._workers

    def start_compile_helpers_if_cold(self) -> None:
        """Start the compile helpers now if this device has never prepared a program here (first
        use on this machine, or a new driver or clglow): they then get ready while the model
        loads rather than when its first program is asked for."""
        marker = self._marker("", (), "", None)
        if marker is not None and not marker.exists():
            workers = self._compile_workers()
            if workers is not None:
                workers.start()

    def _marker(self, program: str, options: tuple, kernel: str, lsize: Optional[tuple]) -> Optional[Path]:
        """The file saying this preparation was done on this device before (its program and code
        are then in pocl's cache: no helper needed); None without a clglow cache folder."""
        if not config.cache_enabled():
            return None
        try:
            key = disk_key(kernel_source(program) if program else "", options, self.cl_device,
                           extra=f"prepared {kernel} {None if lsize is None else tuple(lsize)}")
        except (OSError, InvalidArgument):
            return None
        return default_cache_dir() / "prepared" / key

    def wait_prepared(self, timeout: Optional[float] = None) -> None:
        """Wait until every background preparation started so far has finished (tests, benchmarks)."""
        with self._lock:
            futures = list(self._prep_futures)
        concurrent.futures.wait(futures, timeout=timeout)
        with self._lock:
            queue = self._warm_queue
        if queue is not None:
            queue.finish()

    def launch_noop(self, prg: cl.Program, kernel: str, lsize: Sequence[int], noop_args: Sequence) -> cl.Event:
        """Enqueue `kernel` once as a single work-group of `lsize` with arguments that make it
        return at once (anything but a numpy scalar becomes a dummy buffer), on a queue of its
        own, and flush: the driver generates its machine code for `lsize` (pocl does at a
        kernel's first launch) without a model's run waiting for it."""
        with self._lock:
            if self._warm_queue is None:
                self._warm_queue = self.make_queue()
                self._dummy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 64)
            queue, dummy = self._warm_queue, self._dummy
        knl = cl.Kernel(prg, kernel)
        knl.set_args(*[a if isinstance(a, np.generic) else dummy for a in noop_args])
        ev = cl.enqueue_nd_range_kernel(queue, knl, tuple(lsize), tuple(lsize))
        queue.flush()
        return ev

    def _prepare_one(self, program: str, options: tuple, kernel: str, lsize: Optional[tuple],
                     noop_args: Optional[list], marker: Optional[Path] = None) -> None:
        try:
            prg = self.program(program, options)
            if noop_args is not None and lsize is not None:
                self.launch_noop(prg, kernel, lsize, noop_args)
            if marker is not None and not marker.exists():
                try:
                    atomic_write(marker, b"")
                    device_marker = self._marker("", (), "", None)
                    if device_marker is not None and not device_marker.exists():
                        atomic_write(device_marker, b"")
                except OSError:
                    pass
        except Exception as e:  # noqa: BLE001 - best effort; program() reports real failures
            log.debug("preparing %s %s in the background failed: %s", program, " ".join(options), e)

    def describe(self) -> str:
        """One line: name, type, platform, OpenCL version, compute units, memory, selector."""
        d = self.cl_device
        sel = f" CLGLOW_DEVICE={self.selector}" if self.selector else ""
        return (f"{self.info.name} ({self.info.type.upper()}, {self.platform.name.strip()}, "
                f"{d.version.strip()}, {self.info.compute_units} CU, "
                f"{self.info.global_mem_size / 2**30:.1f} GiB){sel}")

    def __repr__(self) -> str:
        return f"<clglow Device {self.describe()}>"


_registry_lock = threading.Lock()
_selected: Dict[int, Device] = {}  # cl.Device.int_ptr -> Device (lives for the process)
_wrapped: "weakref.WeakValueDictionary[Tuple[int, int], Device]" = weakref.WeakValueDictionary()
_default: Optional[Device] = None  # the default choice, probed once per process


_PROBE_SOURCE = "__kernel void clglow_probe(__global int* a) { a[get_global_id(0)] = 1; }"


def _probe(ctx: cl.Context, device: cl.Device) -> Optional[str]:
    """None when `device` builds a trivial kernel, else why not.

    Why: a pocl whose LLVM does not know the host CPU lists a device that cannot compile
    anything ("unknown target CPU 'generic'"); the default choice must skip it.
    """
    try:
        cl.Program(ctx, _PROBE_SOURCE).build(devices=[device], cache_dir=False)
        return None
    except cl.Error as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return next((ln for ln in lines if "error" in ln.lower() and "clBuildProgram" not in ln),
                    lines[-1] if lines else type(e).__name__)


def probe(selector: str) -> Optional[str]:
    """None when the device `selector` picks can build a kernel, else the reason (for `clglow devices`)."""
    plats = _platforms()
    pi, di = _resolve(selector, plats)
    cl_dev = plats[pi][1][di]
    try:
        ctx = cl.Context([cl_dev])
    except cl.Error as e:
        return f"cannot create a context: {e}"
    return _probe(ctx, cl_dev)


def _device_index(device: cl.Device) -> Optional[str]:
    """The "P:D" index selector of `device` (a helper process opens the same one), or None."""
    for pi, (_, devs) in enumerate(_platforms()):
        for di, d in enumerate(devs):
            if d == device:
                return f"{pi}:{di}"
    return None


def _make_device(cl_dev: cl.Device, pi: int, di: int, ctx: Optional[cl.Context] = None) -> Device:
    """The shared Device for `cl_dev` (caller holds _registry_lock)."""
    dev = _selected.get(cl_dev.int_ptr)
    if dev is None:
        try:
            ctx = ctx if ctx is not None else cl.Context([cl_dev])
        except cl.Error as e:
            raise NoDevice(f"cannot create an OpenCL context on {cl_dev.name.strip()!r}: {e}") from e
        dev = Device(ctx, cl_dev, selector=f"{pi}:{di}")
        _selected[cl_dev.int_ptr] = dev
        log.info("selected OpenCL device %s", dev.describe())
    return dev


def _first_working(candidates: List[Tuple[int, int, cl.Device]]) -> Tuple[Optional[Device], List[str]]:
    """The first candidate that can build a kernel (caller holds _registry_lock), and the failures."""
    failures = []
    for pi, di, d in candidates:
        dev = _selected.get(d.int_ptr)
        if dev is not None:
            return dev, failures
        try:
            ctx = cl.Context([d])
        except cl.Error as e:
            failures.append(f"  {pi}:{di}  {d.name.strip()}: cannot create a context: {e}")
            continue
        why = _probe(ctx, d)
        if why is not None:
            failures.append(f"  {pi}:{di}  {d.name.strip()}: {why}")
            log.warning("skipping OpenCL device %s:%s %s: it cannot build a kernel (%s)",
                        pi, di, d.name.strip(), why)
            continue
        return _make_device(d, pi, di, ctx), failures
    return None, failures


def select_device(selector: Optional[str] = None) -> Device:
    """The Device for `selector`, else CLGLOW_DEVICE / PYOPENCL_CTX, else the default.

    The default is the first GPU that can build a kernel, else the first other device that
    can; `gpu`/`cpu`/`accelerator` likewise pick the first of that type that can build. (A
    device that cannot compile anything, e.g. a pocl whose LLVM does not know the host CPU,
    is skipped with a warning.) An explicit ``P:D`` or name is taken as given. Raises
    NoDevice listing the available devices when nothing matches, or saying how to install
    pocl when there is no OpenCL platform. Never prompts.

    Example::

        dev = select_device("0:0")      # or "gpu", "portable:pthread", "nvidia"
    """
    global _default
    if selector is None:
        selector = config.device_selector()
    sel = (selector or "").strip()
    if not sel and _default is not None:
        return _default  # no re-enumeration: sessions call this once each
    plats = _platforms()
    pi, di = _resolve(sel, plats)  # NoDevice with the choices (or the install hint)
    word = _TYPE_WORDS.get(sel.lower())
    with _registry_lock:
        if sel and word is None:
            return _make_device(plats[pi][1][di], pi, di)
        if not sel and _default is not None:
            return _default
        flat = [(p_, d_, d) for p_, (_, devs) in enumerate(plats) for d_, d in enumerate(devs)]
        if word is not None:
            flat = [t for t in flat if _type_name(t[2]) == word]
        else:
            flat.sort(key=lambda t: _type_name(t[2]) != "gpu")  # stable: GPUs first, then index order
        dev, failures = _first_working(flat)
        if dev is None:
            raise NoDevice(f"No OpenCL device{' for ' + repr(sel) if sel else ''} can build a kernel:\n"
                           + "\n".join(failures) + "\n"
                           + INSTALL_HINT.replace("No OpenCL platform found. ", ""))
        if not sel:
            _default = dev
        return dev


# --- kernel sources --------------------------------------------------------------------------
_KERNEL_NAME = re.compile(r"[A-Za-z0-9_]+")
_source_cache: Dict[str, str] = {}


def _kernels_root():
    """The kernels_cl folder as a Traversable: the installed package data, else the checkout's."""
    try:
        return resources.files("clglow.kernels_cl")
    except (ModuleNotFoundError, TypeError):
        # Source checkout on PYTHONPATH: kernels_cl/ sits beside the clglow package.
        return Path(__file__).resolve().parents[2] / "kernels_cl"


def kernels_dir():
    """Where the ``.cl`` files are (a Traversable; a Path in a wheel or a checkout)."""
    return _kernels_root()


def kernel_source(name: str) -> str:
    """The text of ``kernels_cl/<name>.cl`` with its ``#include "x.h"`` headers (from the same
    folder) spliced in; FileNotFoundError when absent.

    Headers are inlined here rather than found by the driver through ``-I``: no path in the
    build options (an install path with spaces would not survive the driver's option parsing),
    and the program cache's key, a hash of this text, changes whenever a header does.
    """
    if not _KERNEL_NAME.fullmatch(name):
        raise InvalidArgument(f"invalid kernel program name {name!r}")
    src = _source_cache.get(name)
    if src is None:
        f = _kernels_root() / f"{name}.cl"
        if not f.is_file():
            raise FileNotFoundError(f"kernel source {name}.cl not found in {_kernels_root()}")
        src = _splice_headers(f.read_text(encoding="utf-8"), f"{name}.cl", set())
        _source_cache[name] = src
    return src


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([A-Za-z0-9_.]+\.(?:h|clh))"[ \t]*$', re.M)


def _splice_headers(text: str, where: str, seen: set) -> str:
    """Replace each ``#include "x.h"`` line by the header's text (each header once per program)."""
    def one(m: "re.Match[str]") -> str:
        hname = m.group(1)
        if hname in seen:
            return f"/* {hname} already included */"
        h = _kernels_root() / hname
        if not h.is_file():
            raise FileNotFoundError(f"{where} includes {hname}, not found in {_kernels_root()}")
        seen.add(hname)
        body = _splice_headers(h.read_text(encoding="utf-8"), hname, seen)
        return f"/* begin {hname} */\n{body}\n/* end {hname} */"
    return _INCLUDE.sub(one, text)


__all__ = ["Device", "DeviceDescription", "list_devices", "select_device", "probe", "kernel_source",
           "kernels_dir", "INSTALL_HINT"]
