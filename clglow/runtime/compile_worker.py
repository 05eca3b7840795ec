"""Programs built in helper processes, so that a cold start uses more than one core.

Why: pocl does all of a process's LLVM work (each program build, and each kernel's code
generation at its first launch) one piece at a time, so threads in one process do not build in
parallel. Measured on a 2-core Zen 4 (pocl 3.1): four GEMM variants built and generated in 3.06 s
on four threads against 3.56 s one after another, but in 2.82 s in two processes (their start
included) against 4.57 s in one. A helper process builds a program and generates its kernels'
code into pocl's on-disk kernel cache (``POCL_CACHE_DIR``, shared by the user's processes); the
session's own build of the same program then finds it there and takes milliseconds.

runtime.preparation (a Device's background preparation) is the only user of the helpers and
decides what goes to one: on pocl with its kernel cache on, a preparation
this device has not done before (a marker per preparation under the clglow cache folder, so a
warm start starts no helper). ``CLGLOW_COMPILE_WORKERS`` sets the number of helpers (default: one
per core beyond the first, at most 4; 0 turns them off). A helper that sits idle for a while
exits; it exits too when its parent does (its stdin closes). Best effort throughout: a helper
that cannot start, crashes or fails a build leaves the work to the session, which then builds
as it would without helpers and reports real build errors itself.

Binaries for warm starts: the session asks a helper for the binary of each program it prepared
for the first time (a ``"binary": true`` job, answered at once); the helper stores them in the
clglow cache (ProgramCache.store_binary) only after the parent closed its stdin (idle, or
exited), at the lowest CPU priority, within BINARY_BUDGET_S, and then exits: asking pocl for a
binary generates code (~1 s of CPU per GEMM variant), which no start may wait for, while a later
process loads a stored binary in ~4 ms instead of ~25 ms. The parent never waits for it.

A helper depends on no session code: it opens the device by its ``P:D`` index
(runtime.selection), reads the kernel text (runtime.sources) and builds through a ProgramCache
(runtime.cache) exactly as the session would, with the options the session sends (its device
options included), so that both processes hit the same entry of pocl's cache.

Protocol: one JSON object per line. The parent writes jobs
``{"id": 3, "program": "gemm", "options": ["-DMR=12"], "kernel": "gemm", "lsize": [1, 1, 1],
"noop": [null, ["<i4", 0], ...]}`` (``noop``: the kernel's arguments for a launch that returns at
once, null for a buffer) and the helper answers ``{"id": 3, "ok": true}`` or
``{"id": 3, "ok": false, "error": "..."}``.

Run by hand (it reads jobs from stdin)::

    python -m clglow.runtime.compile_worker --device 0:0
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import pyopencl as cl

from .. import config
from . import driver_cache
from .build_output import quiet_build
from .cache import ProgramCache
from .selection import open_index
from .sources import kernel_source

log = logging.getLogger(__name__)

IDLE_EXIT_S = 30.0  # a helper with nothing to do for this long is closed (restarted on demand)
BINARY_BUDGET_S = 60.0  # at most this long storing binaries after the parent closed the pipe
# What a new helper costs before its first job, in the unit of `submit`'s costs (about a second
# of the helper's time: Python, pyopencl and pocl start, LLVM's first initialisation).
STARTUP_COST = 1.0


def encode_noop(args: Optional[Sequence[Any]]) -> Optional[list]:
    """A launch's no-op arguments as JSON: numpy scalars as [dtype, value], anything else None."""
    if args is None:
        return None
    return [[a.dtype.str, a.item()] if isinstance(a, np.generic) else None for a in args]


def decode_noop(spec: Optional[list]) -> Optional[list]:
    """encode_noop's inverse; None entries stay None (the caller puts a dummy buffer there)."""
    if spec is None:
        return None
    return [None if a is None else np.dtype(a[0]).type(a[1]) for a in spec]


class _Worker:
    """One helper process and the jobs it is running."""

    def __init__(self, device_index: str, on_exit):
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        pocl_dir = driver_cache.pocl_cache_dir()
        if pocl_dir is not None:  # the folder this process's driver uses, even if it chose it
            env["POCL_CACHE_DIR"] = str(pocl_dir)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clglow.runtime.compile_worker", "--device", device_index],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            text=True, bufsize=1)
        self.pending: Dict[int, concurrent.futures.Future] = {}
        self.load = STARTUP_COST  # summed cost of every job sent, and of the start
        self.reserved = False  # CompileWorkers chose it for a job it is about to send
        self.dead = False  # its process exited or its pipe broke: it takes no more jobs
        self._lock = threading.Lock()
        self._on_exit = on_exit
        self._reader = threading.Thread(target=self._read, name="clglow-compile-reader", daemon=True)
        self._reader.start()

    def send(self, job_id: int, job: dict, cost: float) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self.pending[job_id] = fut
            self.load += cost
            self.reserved = False
        try:
            if self.proc.stdin is None:
                raise OSError("no pipe to the helper")
            self.proc.stdin.write(json.dumps({"id": job_id, **job}) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as e:
            self._fail_all(RuntimeError(f"compile helper is gone: {e}"))
        return fut

    def _read(self) -> None:
        for line in self.proc.stdout or ():
            try:
                msg = json.loads(line)
                job_id = int(msg["id"])
            except (ValueError, KeyError, TypeError):
                continue
            with self._lock:
                fut = self.pending.pop(job_id, None)
            if fut is None:
                continue
            if msg.get("ok"):
                fut.set_result(True)
            else:
                fut.set_exception(RuntimeError(str(msg.get("error", "compile helper failed"))))
        self._fail_all(RuntimeError(f"compile helper exited (code {self.proc.poll()})"))
        self._on_exit(self)

    def _fail_all(self, err: Exception) -> None:
        self.dead = True
        with self._lock:
            futs = list(self.pending.values())
            self.pending.clear()
        for f in futs:
            if not f.done():
                f.set_exception(err)

    @property
    def idle(self) -> bool:
        """No job in flight or about to be sent, and alive."""
        with self._lock:
            return not self.pending and not self.reserved and not self.dead

    def close(self, timeout: Optional[float] = 5.0) -> None:
        """Close stdin (the helper finishes its current job, stores the binaries asked for and
        exits); kill it if it lingers past `timeout`. None: do not wait (it ends on its own,
        within BINARY_BUDGET_S of its last job)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        if timeout is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class CompileWorkers:
    """Up to `count` helper processes for one device, started on first use.

    `submit` queues a job and returns a Future that resolves when a helper has built the
    program (and generated the kernel's code) or fails; the caller then builds in-process, from
    pocl's cache. Each helper runs one job at a time and takes the costliest job queued when it
    is free (jobs arrive in the order lowering meets them, and a cold start ends when the
    largest build does: a GEMM variant lowered last must not wait behind cheap ones), and every
    job of a program goes to the helper that took its first (the program is built there).
    """

    def __init__(self, device_index: str, count: int, idle_exit_s: float = IDLE_EXIT_S):
        self.device_index = device_index
        self.count = max(0, int(count))
        self.idle_exit_s = idle_exit_s
        self._workers: List[_Worker] = []
        self._lock = threading.Lock()
        self._next_id = 0
        self._timer: Optional[threading.Timer] = None
        self._closed = False
        self._queue: List[_Queued] = []  # jobs no helper has taken yet
        self._queued_cost = 0.0
        self._home: Dict[tuple, _Worker] = {}  # (program, options) -> the helper that builds it
        self.started = 0  # helper processes started so far (tests, logs)

    def load(self) -> float:
        """The cost each helper has been given so far, on average, queued jobs included (a helper
        yet to start counts its start)."""
        with self._lock:
            given = sum(w.load for w in self._workers) + STARTUP_COST * (self.count - len(self._workers))
            return (given + self._queued_cost) / max(1, self.count)

    def start(self) -> None:
        """Start every helper now (they take about a second to be ready: Python, pyopencl, LLVM)."""
        with self._lock:
            while not self._closed and len(self._workers) < self.count:
                if self._spawn() is None:
                    break

    def _spawn(self) -> Optional[_Worker]:
        """A new helper (caller holds the lock), or None when it cannot start (helpers then off)."""
        try:
            worker = _Worker(self.device_index, self._forget)
        except OSError as e:
            log.info("cannot start a compile helper (%s); building in-process", e)
            self.count = len(self._workers)
            return None
        self._workers.append(worker)
        self.started += 1
        log.debug("started compile helper %d for device %s", worker.proc.pid, self.device_index)
        return worker

    def submit(self, job: dict, cost: float = 1.0) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed or self.count == 0:
                fut.set_exception(RuntimeError("compile helpers are off"))
                return fut
            self._next_id += 1
            key = (str(job.get("program")), tuple(job.get("options") or ()))
            self._queue.append(_Queued((-float(cost), self._next_id), float(cost), job, fut, key))
            self._queued_cost += cost
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._dispatch()
        return fut

    def _dispatch(self) -> None:
        """Give each free helper the costliest queued job it may take; start helpers up to
        `count` while jobs wait; fail the queue when none can run."""
        sends, failed = [], []
        with self._lock:
            while self._queue and not self._closed and len(self._workers) < self.count:
                if self._spawn() is None:
                    break
            if not self._workers:
                failed, self._queue, self._queued_cost = self._queue, [], 0.0
            for w in [w for w in self._workers if w.idle]:
                mine = [q for q in self._queue if self._home.get(q.key) in (None, w)
                        or self._home[q.key] not in self._workers]
                if not mine:
                    continue
                q = min(mine)
                self._queue.remove(q)
                self._queued_cost -= q.cost
                self._home[q.key] = w
                w.reserved = True
                sends.append((w, q))
        for q in failed:
            q.future.set_exception(RuntimeError("no compile helper"))
        for w, q in sends:
            self._send(w, q)

    def _send(self, worker: _Worker, q: "_Queued") -> None:
        inner = worker.send(q.rank[1], q.job, q.cost)

        def done(f: concurrent.futures.Future) -> None:
            if f.exception() is not None:
                q.future.set_exception(f.exception())
            else:
                q.future.set_result(f.result())
            self._dispatch()
            self._arm_idle_timer()
        inner.add_done_callback(done)

    def _forget(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
        self._dispatch()  # a queued job goes to a new helper, or fails

    def _arm_idle_timer(self) -> None:
        with self._lock:
            if self._closed or self._queue or any(not w.idle for w in self._workers):
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.idle_exit_s, self._close_if_idle)
            self._timer.daemon = True
            self._timer.start()

    def _close_if_idle(self) -> None:
        with self._lock:
            if self._queue or any(not w.idle for w in self._workers):
                return
            workers, self._workers = self._workers, []
            self._timer = None
        for w in workers:
            w.close(None)  # it may still store binaries: never waited for

    def close(self) -> None:
        """Stop every helper (their pending and queued jobs fail; callers then build in-process)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            queued, self._queue, self._queued_cost = self._queue, [], 0.0
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        for q in queued:
            q.future.set_exception(RuntimeError("compile helpers closed"))
        for w in workers:
            w.close(None)  # it may still store binaries: never waited for


@dataclasses.dataclass(order=True)
class _Queued:
    """A job waiting for a helper; orders costliest first, then first come."""

    rank: tuple  # (-cost, job id)
    cost: float = dataclasses.field(compare=False)
    job: dict = dataclasses.field(compare=False)
    future: concurrent.futures.Future = dataclasses.field(compare=False)
    key: tuple = dataclasses.field(compare=False)


def _interpreter() -> bool:
    """Whether sys.executable is a Python interpreter. Embedded (the ONNXIFI library runs clglow
    inside a C/C++ host) it may be the host program or empty: no helpers then."""
    name = os.path.basename(sys.executable or "").lower()
    return bool(re.fullmatch(r"(python|pypy)[0-9.]*[a-z]?(\.exe)?", name))


def default_count() -> int:
    """CLGLOW_COMPILE_WORKERS, else one helper per usable core beyond the first (at most 4);
    0 when clglow does not run in a Python interpreter of its own."""
    if not _interpreter():
        return 0
    n = config.compile_workers()
    if n is not None:
        return n
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(0, min(4, cores - 1))


# --- the helper process -------------------------------------------------------------------------
def enqueue_noop(queue: cl.CommandQueue, dummy: cl.Buffer, prg: cl.Program, kernel: str,
                 lsize: Sequence[int], noop_args: Sequence[Any]) -> cl.Event:
    """Enqueue `kernel` once as a single work-group of `lsize` with arguments that make it return
    at once (numpy scalars as given, anything else `dummy`), and flush: the driver generates its
    machine code for `lsize` (pocl does at a kernel's first launch). Shared by the session's
    background preparation (runtime.preparation) and the helpers."""
    knl = cl.Kernel(prg, kernel)
    knl.set_args(*[a if isinstance(a, np.generic) else dummy for a in noop_args])
    ev = cl.enqueue_nd_range_kernel(queue, knl, tuple(lsize), tuple(lsize))
    queue.flush()
    return ev


# A kernel whose build and one launch make the driver initialise its compiler (pocl: LLVM's
# front end and code generator, about 0.5 s of CPU on a process's first build, measured on a
# 2-vCPU Zen 5), so that the first real build does not pay for it.
_WARM_SOURCE = "__kernel void clglow_warm(__global int* a, int n) { if ((int)get_global_id(0) < n) a[0] = n; }"


def warm_compiler(ctx: cl.Context, queue: cl.CommandQueue, dummy: cl.Buffer) -> None:
    """Build and launch a trivial kernel once (see _WARM_SOURCE): a cold start does it while it
    would otherwise wait (a helper before its first job, a session while Python loads the
    model). Best effort: a failure is logged and left to the real builds."""
    try:
        with quiet_build():
            prg = cl.Program(ctx, _WARM_SOURCE).build(cache_dir=False)
        enqueue_noop(queue, dummy, prg, "clglow_warm", (1,), [None, np.int32(0)]).wait()
    except cl.Error as e:
        log.debug("compiler warm-up failed: %s", e)


def _serve(device_index: str, lines, out) -> None:
    """Answer jobs until stdin closes: build each program as a session does (the same source and
    options, through a ProgramCache), launch its kernel once, report. The compiler is warmed
    up first (the parent sends the first job only once it has lowered a node). A binary job
    (``"binary": true``) is answered at once and done after stdin closes (`_store_binaries`)."""
    cl_dev = open_index(device_index)
    ctx = cl.Context([cl_dev])
    queue = cl.CommandQueue(ctx, cl_dev)
    dummy = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
    programs = ProgramCache(ctx, cl_dev)
    warm_compiler(ctx, queue, dummy)
    binaries: List[tuple] = []
    for line in lines:
        try:
            job = json.loads(line)
            job_id = int(job["id"])
        except (ValueError, KeyError, TypeError):
            continue
        try:
            name, options = str(job["program"]), [str(o) for o in job.get("options", [])]
            if job.get("binary"):
                binaries.append((name, options))
            else:
                prg = programs.get(name, kernel_source(name), options)
                noop, lsize, kernel = decode_noop(job.get("noop")), job.get("lsize"), job.get("kernel")
                if noop is not None and lsize and kernel:
                    enqueue_noop(queue, dummy, prg, str(kernel), lsize, noop).wait()  # in pocl's cache now
            reply = {"id": job_id, "ok": True}
        except Exception as e:  # noqa: BLE001 - reported to the parent, which builds itself
            reply = {"id": job_id, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    _store_binaries(programs, binaries)


def _store_binaries(programs: ProgramCache, todo: Sequence[tuple]) -> None:
    """Write the binaries asked for into the clglow cache (ProgramCache.store_binary), once the
    parent needs nothing else from this helper (it closed stdin: it is idle or has exited), at
    the lowest CPU priority and within BINARY_BUDGET_S: generating them costs seconds, which a
    start must not wait for, and a later process then loads each program in milliseconds."""
    if not todo:
        return
    try:
        os.nice(19)
    except (AttributeError, OSError):
        pass
    deadline = time.monotonic() + BINARY_BUDGET_S
    for name, options in dict.fromkeys((n, tuple(o)) for n, o in todo):
        if time.monotonic() > deadline:
            break
        try:
            programs.store_binary(name, kernel_source(name), options)
        except Exception as e:  # noqa: BLE001 - best effort: a later process builds from source
            log.debug("no binary for %s %s: %s", name, " ".join(options), e)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clglow.runtime.compile_worker",
                                     description="Build clglow programs into the driver's cache (jobs on stdin).")
    parser.add_argument("--device", required=True, help="the device as P:D (platform and device index)")
    args = parser.parse_args(argv)
    driver_cache.prepare(check_cache=False)  # the parent checked the folder it handed down
    try:
        _serve(args.device, sys.stdin, sys.stdout)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
