"""OpenCL devices as clglow uses them: one shared context, queues and program cache per device.

Why this file exists: a process creating many sessions must create one context per device, and
every session on a device must share its built programs. `select_device()` (and
`Device.from_context()` for a context the caller shares, as ONNXIFI does) return one `Device`
per OpenCL device; the Device owns its context, in-order queue and program cache and knows its
`Target` (clglow.target). What it delegates, each to the module named after it:

- runtime.selection: which device a selector names (the grammar, enumeration, probing);
- runtime.sources: the kernel text (``kernels_cl/*.cl`` with headers spliced in);
- runtime.cache: built programs in memory and on disk; runtime.driver_cache: pocl's own cache,
  checked before the driver loads;
- runtime.preparation: background builds and warm-up launches, and the compile helpers;
- runtime.tuning: the GEMM tiles per target family (`target(family)`, `ensure_tuned(family)`,
  `load_tuned(family)`),
  and the tuning database's per-shape entries each Target carries (`Target.tuned`, `reload_tuning`).

Example::

    dev = select_device("cpu")
    prg = dev.program("gemm", ("-DTILE=16",))
    dev.target("gpu")          # the GPU kernel families on this device, with their tuned tiles
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import weakref
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pyopencl as cl

from .. import config
from ..errors import CompileError, InvalidArgument, NoDevice
from ..target import Target, query as query_target
from .capabilities import prefetch_builds
from . import selection
from .cache import ProgramCache
from .preparation import Preparer
from .selection import INSTALL_HINT, DeviceDescription, list_devices, probe
from .sources import kernel_source, kernels_dir
from .tuning import TuningState

log = logging.getLogger(__name__)


class Device:
    """One OpenCL device with its context, in-order queue and program cache.

    Get one with `select_device()` or `Device.from_context()`; both return a shared
    instance, so every session on a device shares one context, queue and cache.
    """

    def __init__(self, context: cl.Context, device: cl.Device, selector: Optional[str] = None):
        self.context = context
        self.cl_device = device
        self.platform: cl.Platform = device.platform
        self.selector = selector  # the "P:D" selector when chosen by select_device
        self.queue = cl.CommandQueue(context, device)  # in-order
        self.cache = ProgramCache(context, device)
        self.tuning = TuningState()
        self.preparation = Preparer(self)
        self._lock = threading.Lock()
        self._base: Target = dataclasses.replace(query_target(device), gemm_tiles=None, xgemm_tiles=None, tuned=(),
                                                 prefetch=prefetch_builds(context, device))
        self._targets: Dict[str, Target] = {}  # family -> Target with that family's tiles
        self._profiling_queue: Optional[cl.CommandQueue] = None
        self._build_lock = threading.RLock()  # builds one at a time where the driver needs it
        self._recording = threading.local()  # recording(): the (name, options) this thread asks for

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

    # -- the target ---------------------------------------------------------------------------
    @property
    def info(self) -> Target:
        """This device's own Target, with its family's tuned GEMM tiles (`target()`)."""
        return self.target(None)

    @info.setter
    def info(self, value: Target) -> None:
        """Replace the device facts (tests: e.g. another float16 policy); its `gemm_tiles` become
        the choice of its family."""
        with self._lock:
            self._base = dataclasses.replace(value, gemm_tiles=None, xgemm_tiles=None, tuned=())
            self._targets.clear()
        self.tuning.set(value.family, value.gemm_tiles)
        self.tuning.set_xgemm(value.family, value.xgemm_tiles)

    def target(self, family: Optional[str] = None) -> Target:
        """This device under `family`'s kernels and policies (None: the device's own family),
        carrying that family's tuned GEMM tiles (None until tuned: the family's defaults) and its
        tuning database entries (`Target.tuned`, read once per process; `reload_tuning`)."""
        with self._lock:
            base = self._base
            fam = family or base.family
            cached = self._targets.get(fam)
        tiles, xtiles = self.tuning.tiles(fam), self.tuning.xgemm(fam)
        tuned = self.tuning.table(self, fam)  # the tuning database's per-shape choices (runtime.tuning_db)
        if cached is not None and (cached.gemm_tiles, cached.xgemm_tiles, cached.tuned) == (tiles, xtiles, tuned):
            return cached
        t = base.with_family(fam)
        if (t.gemm_tiles, t.xgemm_tiles, t.tuned) != (tiles, xtiles, tuned):
            t = dataclasses.replace(t, gemm_tiles=tiles, xgemm_tiles=xtiles, tuned=tuned)
        with self._lock:
            if self._base is base:
                self._targets[fam] = t
        return t

    def set_gemm_tiles(self, tiles: Optional[tuple], family: Optional[str] = None) -> None:
        """Lower `family`'s GEMMs (None: the device's own family) with these (MR, VW, NV, local
        size) from now on (runtime.tuning); None goes back to the family's defaults."""
        self.tuning.set(family or self._base.family, tiles)

    def reload_tuning(self, family: Optional[str] = None) -> None:
        """Read `family`'s tuning database entries again: sessions created from now on lower with
        what searches stored since (a running session plans again with them at its next run)."""
        self.tuning.reload(self, family or self._base.family)

    def ensure_tuned(self, family: Optional[str] = None, tune: Optional[bool] = None) -> None:
        """Choose `family`'s GEMM tiles once per process (from disk, or by measuring;
        runtime.tuning). `tune` False (default CLGLOW_TUNE) measures nothing: defaults apply."""
        self.tuning.ensure(self, family or self._base.family, tune)

    def load_tuned(self, family: Optional[str] = None, tune: Optional[bool] = None) -> None:
        """`family`'s stored GEMM tiles, without measuring (a session's start): a miss keeps the
        defaults and leaves the measurement to the session's background search
        (TuningState.load, measure_owed)."""
        self.tuning.load(self, family or self._base.family, tune)

    @property
    def name(self) -> str:
        return self._base.name

    # -- queues and programs ------------------------------------------------------------------
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

    def device_options(self, options: Sequence[str]) -> Tuple[str, ...]:
        """A program's build options with the ones this device adds (the float16 math split of
        kernels_cl/vmath.h, no prefetches where they do not build: Target.prefetch); a compile
        helper builds with exactly these."""
        options = tuple(options)
        if self._base.float16_math_split:
            options += ("-DCLG_SPLIT16=1",)
        if not self._base.prefetch:
            options += ("-DCLG_NO_PREFETCH=1",)
        return options

    def program(self, name: str, options: Sequence[str] = ()) -> cl.Program:
        """The built program ``kernels_cl/<name>.cl`` with `options`, through the program cache.

        Thread-safe. Raises CompileError (with the build log) when the source does not build
        or does not exist.
        """
        options = tuple(options)
        for rec in getattr(self._recording, "stack", ()):
            if (name, options) not in rec:
                rec.append((name, options))
        self.preparation.wait_remote(name, options)  # a helper building it: load it from pocl's cache
        options = self.device_options(options)
        try:
            source = kernel_source(name)
        except (FileNotFoundError, InvalidArgument) as e:
            raise CompileError(name, self.describe(), options, str(e)) from e
        if not self._base.concurrent_builds:  # Target.concurrent_builds: Oclgrind
            with self._build_lock:
                return self.cache.get(name, source, options)
        return self.cache.get(name, source, options)

    @contextlib.contextmanager
    def recording(self) -> Iterator[List[Tuple[str, Tuple[str, ...]]]]:
        """Collect the (program, options) pairs this thread asks `program()` for inside the block,
        in first-asked order (a session records its plan's programs: frontend.graph_cache); an
        enclosing block records them too."""
        rec: List[Tuple[str, Tuple[str, ...]]] = []
        stack = self._recording.__dict__.setdefault("stack", [])
        stack.append(rec)
        try:
            yield rec
        finally:
            del stack[next(i for i, r in enumerate(stack) if r is rec)]  # by identity: lists compare equal

    # -- background preparation (runtime.preparation) ----------------------------------------
    def prefetch(self, programs: Sequence[Tuple[str, Sequence[str]]]) -> None:
        """Start building `programs` in the background now (Preparer.prefetch): a warm start
        asks for the programs its model used last time before the model is even loaded."""
        self.preparation.prefetch(programs)

    def prepare(self, program: str, options: Sequence[str], kernel: str, lsize: Optional[tuple],
                noop_args: Optional[list]) -> None:
        """Start building a program in the background and generating `kernel`'s code for
        `lsize` (Preparer.prepare). Best effort: failures are left for `program()` to report."""
        self.preparation.prepare(program, options, kernel, lsize, noop_args)

    def wait_prepared(self, timeout: Optional[float] = None) -> None:
        """Wait until every background preparation started so far has finished."""
        self.preparation.wait_prepared(timeout)

    def launch_noop(self, prg: cl.Program, kernel: str, lsize: Sequence[int], noop_args: Sequence) -> cl.Event:
        """Enqueue `kernel` once with arguments that make it return at once (Preparer.launch_noop)."""
        return self.preparation.launch_noop(prg, kernel, lsize, noop_args)

    def start_compile_helpers_if_cold(self) -> None:
        """Start the compile helpers now if this device never prepared a program here."""
        self.preparation.start_compile_helpers_if_cold()

    def describe(self) -> str:
        """One line: name, type, platform, OpenCL version, compute units, memory, selector."""
        d, info = self.cl_device, self._base
        sel = f" CLGLOW_DEVICE={self.selector}" if self.selector else ""
        return (f"{info.name} ({info.type.upper()}, {self.platform.name.strip()}, "
                f"{d.version.strip()}, {info.compute_units} CU, "
                f"{info.global_mem_size / 2**30:.1f} GiB){sel}")

    def __repr__(self) -> str:
        return f"<clglow Device {self.describe()}>"


# --- the shared Devices ----------------------------------------------------------------------
_registry_lock = threading.Lock()
_selected: Dict[int, Device] = {}  # cl.Device.int_ptr -> Device (lives for the process)
_wrapped: "weakref.WeakValueDictionary[Tuple[int, int], Device]" = weakref.WeakValueDictionary()
_default: Optional[Device] = None  # the default choice, probed once per process


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
        why = selection.probe_context(ctx, d)
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
    plats = selection.platforms()
    pi, di = selection.resolve(sel, plats)  # NoDevice with the choices (or the install hint)
    with _registry_lock:
        if sel and sel.lower() not in selection.TYPE_WORDS:
            return _make_device(plats[pi][1][di], pi, di)
        if not sel and _default is not None:
            return _default
        dev, failures = _first_working(selection.candidates(sel, plats))
        if dev is None:
            raise NoDevice(f"No OpenCL device{' for ' + repr(sel) if sel else ''} can build a kernel:\n"
                           + "\n".join(failures) + "\n"
                           + INSTALL_HINT.replace("No OpenCL platform found. ", ""))
        if not sel:
            _default = dev
        return dev


__all__ = ["Device", "DeviceDescription", "list_devices", "select_device", "probe", "kernel_source",
           "kernels_dir", "INSTALL_HINT"]
