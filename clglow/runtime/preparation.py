"""Background preparation of a device's programs: build early, generate code early, in parallel.

Why this file exists: on pocl a build only parses; machine code is generated per work-group
size at a kernel's first launch. A cold start is dominated by both. `Preparer.prepare` starts a
program's build on a thread pool and then launches its kernel once with arguments that make it
return at once (`launch_noop`), while the rest of the model loads (weights packed, other nodes
lowered). Where pocl keeps its kernel cache, a preparation this device has not done before may
go to a compile helper process instead (runtime.compile_worker: pocl does a process's LLVM work
one piece at a time, so a second process is a second core); the session's own build then finds
the result in pocl's cache. A marker file per preparation (under ``<clglow cache>/prepared``)
says it was done on this device before, so a warm start starts no helper.

Best effort throughout: a failure here is left for the real `Device.program()` call to report.

One `Preparer` per Device; the Device passes itself in (for `program()`, its context and its
device options) and forwards `prepare`, `wait_prepared`, `launch_noop` and
`start_compile_helpers_if_cold` to it.

Example::

    dev.prepare("pool", ["-DT=float", "-DPOOL_MAX"], "global_pool", (64,), noop_args)
    dev.wait_prepared()              # tests, benchmarks; a new plan waits for its own
"""
from __future__ import annotations

import atexit
import concurrent.futures
import heapq
import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Set, Tuple

import pyopencl as cl

from .. import config
from ..errors import InvalidArgument
from .cache import atomic_write, disk_key, driver_caches_programs, prepared_dir
from .compile_worker import CompileWorkers, default_count, encode_noop, enqueue_noop, warm_compiler
from .selection import device_index
from .sources import kernel_source

log = logging.getLogger(__name__)

# Compile helpers: the estimated LLVM time of a preparation, in about seconds on pocl (a GEMM
# variant 0.5-0.9 s, another program and kernel 0.1-0.3 s); `wait_remote` waits at most
# REMOTE_WAIT_S for a helper before the session builds itself.
GEMM_COST = 1.0
OTHER_COST = 0.3
LOCAL_HANDICAP = 1.0  # this process also loads the model (Python) while it builds
REMOTE_WAIT_S = 120.0

ProgramKey = Tuple[str, Tuple[str, ...]]


class Preparer:
    """A device's background builds, warm-up launches and compile helpers."""

    def __init__(self, device: Any):
        self.device = device  # runtime.device.Device: program(), context, cl_device, device_options()
        self._lock = threading.Lock()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._prepared: Set[tuple] = set()
        self._futures: list = []
        self._warm_queue: Optional[cl.CommandQueue] = None
        self._dummy: Optional[cl.Buffer] = None
        self.workers: Optional[CompileWorkers] = None  # made on first need
        self._workers_checked = False
        self.remote: Dict[ProgramKey, concurrent.futures.Future] = {}  # programs a helper builds
        self._local_programs: Set[ProgramKey] = set()
        self._local_load = LOCAL_HANDICAP  # estimated cost of the preparations given to this process
        self._compiler_warmed = False  # start_compile_helpers_if_cold warmed this process's compiler
        self._queue: list = []  # (-cost, seq, fn, args, future): preparations for the pool (_ranked)
        self._seq = 0

    def wait_remote(self, name: str, options: Tuple[str, ...]) -> None:
        """If a helper is building this program into pocl's cache, wait for it (then the build
        here loads it from there)."""
        with self._lock:
            remote = self.remote.get((name, options))
        if remote is not None and not remote.done():
            concurrent.futures.wait([remote], timeout=REMOTE_WAIT_S)

    def prepare(self, program: str, options: Sequence[str], kernel: str, lsize: Optional[tuple],
                noop_args: Optional[list]) -> None:
        """Start building a program in the background, and then get the driver to generate the
        kernel's machine code for `lsize` by enqueueing it once with `noop_args` (arguments that
        make it return at once; buffer arguments may be anything, a dummy buffer stands in)."""
        options = tuple(options)
        key = (program, options, kernel, None if lsize is None else tuple(lsize), noop_args is not None)
        with self._lock:
            if key in self._prepared:
                return
            self._prepared.add(key)
        marker = self.marker(program, options, kernel, lsize)
        workers = None if marker is None or marker.exists() else self.compile_workers()
        cost = GEMM_COST if program == "gemm" else OTHER_COST
        if workers is not None and self._goes_remote(program, options, cost, workers):
            fut = self._prepare_remote(workers, cost, program, options, kernel, lsize, noop_args, marker)
        else:
            fut = self._ranked(cost, self._prepare_one, program, options, kernel, lsize, noop_args, marker)
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + [fut]

    def prefetch(self, programs: Sequence[Tuple[str, Sequence[str]]]) -> None:
        """Build `programs` ((name, options) pairs) on the background pool, in order: where the
        driver builds one program at a time (pocl, 0.03-0.1 s each even from its cache), a warm
        start then builds while it loads the model instead of after lowering it."""
        pool = self._get_pool()
        futures = [pool.submit(self._fetch_one, str(name), tuple(str(o) for o in options)) for name, options in programs]
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + futures

    def _fetch_one(self, name: str, options: Tuple[str, ...]) -> None:
        try:
            self.device.program(name, options)
        except Exception as e:  # noqa: BLE001 - best effort; the plan's own request reports failures
            log.debug("prefetching %s %s failed: %s", name, " ".join(options), e)

    def _ranked(self, cost: float, fn: Callable[..., None], *args: Any) -> concurrent.futures.Future:
        """Run `fn(*args)` on the pool, the costliest queued preparation first: each call queues
        one pool task that runs whichever queued preparation costs most when it starts (the
        driver builds one program at a time per process, so order decides what waits)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._seq += 1
            item = (-cost, self._seq, fn, args, fut)
            heapq.heappush(self._queue, item)
        try:
            self._get_pool().submit(self._run_costliest)
        except RuntimeError:  # the pool is shut down (exiting): the task never runs
            with self._lock:
                self._queue.remove(item)
                heapq.heapify(self._queue)
            raise
        return fut

    def _run_costliest(self) -> None:
        with self._lock:
            _, _, fn, args, fut = heapq.heappop(self._queue)
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
            fut.set_exception(e)

    def _get_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="clglow-prepare")
            return self._pool

    def _prepare_remote(self, workers: CompileWorkers, cost: float, program: str, options: Tuple[str, ...], kernel: str,
                        lsize: Optional[tuple], noop_args: Optional[list],
                        marker: Optional[Path]) -> concurrent.futures.Future:
        """Build and generate in a helper process first, then here from pocl's cache."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        job = {"program": program, "options": list(self.device.device_options(options)), "kernel": kernel,
               "lsize": None if lsize is None else list(lsize), "noop": encode_noop(noop_args)}
        remote = workers.submit(job, cost)
        log.debug("preparing %s %s %s in a compile helper", program, " ".join(options), kernel)
        with self._lock:
            self.remote.setdefault((program, options), remote)

        def follow(r: concurrent.futures.Future) -> None:
            if r.exception() is not None:
                log.debug("compile helper could not prepare %s %s: %s", program, " ".join(options), r.exception())
            else:
                log.debug("compile helper prepared %s %s %s", program, " ".join(options), kernel)
            try:
                local = self._ranked(cost, self._prepare_one, program, options, kernel, lsize, noop_args, marker)
            except RuntimeError:  # the process is exiting (pool shut down): nothing left to warm
                fut.set_result(None)
                return
            local.add_done_callback(lambda _l: fut.set_result(None))
        remote.add_done_callback(follow)
        return fut

    def _goes_remote(self, program: str, options: tuple, cost: float, workers: CompileWorkers) -> bool:
        """Whether a preparation goes to a helper: where its program went before, else to the
        side given less work so far (a helper's start counts as work; so does this process's
        loading of the model)."""
        with self._lock:
            if (program, options) in self.remote:
                return True
            if (program, options) in self._local_programs:
                return False
            if workers.load() <= self._local_load:
                return True
            self._local_programs.add((program, options))
            self._local_load += cost
            return False

    def compile_workers(self) -> Optional[CompileWorkers]:
        """This device's helper processes when they can help (pocl with its kernel cache on, more
        than one core, not turned off by CLGLOW_COMPILE_WORKERS=0), else None."""
        with self._lock:
            if not self._workers_checked:
                self._workers_checked = True
                count = default_count()
                cl_dev = self.device.cl_device
                index = device_index(cl_dev) if count > 0 else None
                if index is not None and driver_caches_programs(cl_dev):
                    self.workers = CompileWorkers(index, count)
                    atexit.register(self.workers.close)
            return self.workers

    def start_compile_helpers_if_cold(self) -> None:
        """Start the compile helpers now if this device has never prepared a program here (first
        use on this machine, or a new driver or clglow): they then get ready while the model
        loads rather than when its first program is asked for; and warm this process's
        compiler up on the background pool (compile_worker.warm_compiler), for the same reason."""
        marker = self.marker("", (), "", None)
        if marker is not None and not marker.exists():
            workers = self.compile_workers()
            if workers is not None:
                workers.start()
            with self._lock:
                warm, self._compiler_warmed = not self._compiler_warmed, True
            if warm and self.device.info.concurrent_builds:  # else builds go one at a time (Device.program)
                fut = self._get_pool().submit(warm_compiler, self.device.context, *self._warm_launch_queue())
                with self._lock:
                    self._futures.append(fut)

    def _warm_launch_queue(self) -> Tuple[cl.CommandQueue, cl.Buffer]:
        """The queue of warm-up launches (one of its own) and the dummy buffer they pass."""
        with self._lock:
            if self._warm_queue is None:
                self._warm_queue = self.device.make_queue()
                self._dummy = cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, 64)
            return self._warm_queue, self._dummy

    def marker(self, program: str, options: tuple, kernel: str, lsize: Optional[tuple]) -> Optional[Path]:
        """The file saying this preparation was done on this device before (its program and code
        are then in pocl's cache: no helper needed); None without a clglow cache folder."""
        if not config.cache_enabled():
            return None
        try:
            key = disk_key(kernel_source(program) if program else "", options, self.device.cl_device,
                           extra=f"prepared {kernel} {None if lsize is None else tuple(lsize)}")
        except (OSError, InvalidArgument):
            return None
        return prepared_dir() / key

    def wait_prepared(self, timeout: Optional[float] = None) -> None:
        """Wait until every background preparation started so far has finished (tests, benchmarks)."""
        with self._lock:
            futures = list(self._futures)
        concurrent.futures.wait(futures, timeout=timeout)
        with self._lock:
            queue = self._warm_queue
        if queue is not None:
            queue.finish()

    def launch_noop(self, prg: cl.Program, kernel: str, lsize: Sequence[int], noop_args: Sequence) -> cl.Event:
        """Enqueue `kernel` once as a single work-group of `lsize` with arguments that make it
        return at once, on a queue of its own, and flush: the driver generates its machine code
        for `lsize` without a model's run waiting for it."""
        queue, dummy = self._warm_launch_queue()
        return enqueue_noop(queue, dummy, prg, kernel, lsize, noop_args)

    def _ask_binary(self, program: str, options: tuple) -> None:
        """A program first prepared here: have a compile helper store its binary once this
        process no longer needs the helper (compile_worker._store_binaries), so that later
        processes load it instead of asking the driver's cache (warm start)."""
        workers = self.workers
        if workers is not None:
            workers.submit({"binary": True, "program": program,
                            "options": list(self.device.device_options(options))}, 0.0)

    def _prepare_one(self, program: str, options: tuple, kernel: str, lsize: Optional[tuple],
                     noop_args: Optional[list], marker: Optional[Path] = None) -> None:
        try:
            prg = self.device.program(program, options)
            if noop_args is not None and lsize is not None and self.device.info.warm_up_launches:
                self.launch_noop(prg, kernel, lsize, noop_args)
            if marker is not None and not marker.exists():
                try:
                    atomic_write(marker, b"")
                    device_marker = self.marker("", (), "", None)
                    if device_marker is not None and not device_marker.exists():
                        atomic_write(device_marker, b"")
                except OSError:
                    pass
                self._ask_binary(program, options)
        except Exception as e:  # noqa: BLE001 - best effort; program() reports real failures
            log.debug("preparing %s %s in the background failed: %s", program, " ".join(options), e)


__all__ = ["Preparer", "GEMM_COST", "OTHER_COST", "REMOTE_WAIT_S"]
