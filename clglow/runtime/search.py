"""On-device search of the tunable kernel families (lower/tunable.py) for a model's own shapes.

Why: the fastest tiles depend on the device, its driver and the shape; the anchors that stay
fast across devices measure on the device and remember (CLBlast's tuner and database, Arm
Compute Library's CLTuner, MACE's per-SoC tuning). `search` takes the (family, shape key)s
lowering asked for (`tunable.requests_since`, counted), orders them where time pays (the
families' priority: the GEMMs first, then the most total FLOPs), and for each shape times the
family's default against points of its declared space, all in turns (round robin, best time of
each: a burst of other work on a shared machine lands on every candidate alike). A point must
beat the default by MARGIN to be chosen, and again head to head in twice as many turns; the
winner (or the default, when it holds) goes to the tuning database (runtime/tuning_db.py), so a
later session lowers with it and the shape is not measured again.

A family's programs depend on its parameters, not on the shape (shapes are run-time arguments),
so the candidate programs are built once per search and every shape reuses them: the time
budget mostly buys programs, and the shapes are cheap after that.

`Gate` lets a session's background search measure only while no run is in flight (each launch
waits for the session to be idle; the search stops when its budget or the session ends), on the
device's profiling queue, never the session's.

Example::

    results = search(device, target, {("gemm", (240, 768, 576, "inplace")): 3}, budget_s=60)
    results[0].params, results[0].ms, results[0].default_ms
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import random
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pyopencl as cl

from ..lower.base import Buf
from ..lower.tunable import FAMILIES, Params, ShapeKey, format_params, key_from_str, key_str, params_items
from ..target import Target
from .node_bench import MODELS, measure_node
from .tuning_db import TuningDB, entry_key, family_hash, split_key, table_from

log = logging.getLogger(__name__)

# The shapes `clglow tune` searches without a model: ResNet-50's conv GEMMs at batch 1 (M output
# channels, N pixels, K = Cin*kh*kw, B the pixels read in place or packed by im2col), both
# GEMM families (each searched where it applies).
STANDARD_SHAPES = {(fam, key): 1 for fam in ("gemm", "xgemm") for key in (
    (64, 3136, 576, "inplace"), (256, 3136, 64, "inplace"), (128, 784, 1152, "inplace"),
    (512, 784, 128, "inplace"), (256, 196, 2304, "inplace"), (1024, 196, 256, "inplace"),
    (512, 49, 4608, "packed"), (2048, 49, 512, "packed"))}
MARGIN = 0.03  # a point must beat the default by 3% to replace it
ROUNDS = 5
@dataclass
class SearchResult:
    """One shape's outcome: chosen parameters, best times (ms) of the choice and of the default,
    and where the choice came from ("measured", "db": stored before, "failed": nothing ran)."""

    family: str
    key: ShapeKey
    params: Params
    ms: float
    default: Params
    default_ms: float
    source: str
    count: int = 1
    timings_ms: Dict[str, float] = field(default_factory=dict)


_activity = threading.Lock()  # runs in flight across every session of the process
_runs_in_flight = 0
_last_run_end = 0.0


class Gate:
    """When a background search may launch: while no session of the process runs anything, and
    none has for `settle_s` (2 s: a benchmark alternating clglow with another runtime in one
    process, or a serving loop, is never interleaved with measurements; an idle session is);
    `stop` ends the search (session released, budget spent, a newer session started, exit)."""

    def __init__(self, settle_s: float = 2.0) -> None:
        self.idle = threading.Event()
        self.idle.set()
        self.stop = threading.Event()
        self.ran = threading.Event()  # at least one run finished: the search starts after it
        self.settle_s = settle_s
        self._busy = 0
        self._last = 0.0
        self._lock = threading.Lock()

    def enter(self) -> None:
        """A run starts: the search pauses before its next launch."""
        global _runs_in_flight
        with self._lock:
            self._busy += 1
            self.idle.clear()
        with _activity:
            _runs_in_flight += 1

    def leave(self) -> None:
        global _runs_in_flight, _last_run_end
        with self._lock:
            self._busy = max(0, self._busy - 1)
            self._last = time.monotonic()
            if self._busy == 0:
                self.idle.set()
        with _activity:
            _runs_in_flight = max(0, _runs_in_flight - 1)
            _last_run_end = time.monotonic()
        self.ran.set()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around a run: `with gate.running(): ...`."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def wait(self) -> bool:
        """Block until idle and settled; False when the search must stop."""
        while not self.stop.is_set():
            if self.idle.wait(0.05):
                now = time.monotonic()
                with self._lock, _activity:  # no run of any session in this process, lately
                    quiet = (self._busy == 0 and _runs_in_flight == 0
                             and now - max(self._last, _last_run_end) >= self.settle_s)
                if quiet:
                    return not self.stop.is_set()
                time.sleep(0.02)
        return False


_background_lock = threading.Lock()  # one background search per process at a time
_gates: "weakref.WeakSet[Gate]" = weakref.WeakSet()
BACKGROUND_BUDGET_S = 30.0
# The families a session measures on its own: single kernels, whose winner runs the same inside
# the model. The conv family's paths are measured as one-node models, and a path that wins alone
# can lose inside the model (two convs sharing a padded layout): only `clglow tune MODEL`, which
# checks the whole model afterwards, searches it.
# The GPU family's local-memory convolutions (xgemm_conv: implicit GEMM tiles, gpu_dwconv: depthwise
# halo tiles), its attention blocks (gpu_attention) and dwconv.cl's rows per work-item (dwconv) are
# single kernels too.
BACKGROUND_FAMILIES = ("gemm", "xgemm", "xgemm_conv", "gpu_dwconv", "gpu_attention", "dwconv")


_threads: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
EXIT_WAIT_S = 30.0  # longer than one program build (PyPI's pocl: ~4 s per gemm.cl candidate)


def _stop_all() -> None:
    for g in list(_gates):
        g.stop.set()


def _stop_at_exit() -> None:
    """Stop every search and wait for it: a daemon thread left inside a driver's program build
    when the interpreter exits can abort the process (pocl: "terminate called without an
    active exception" after `clglow demo` had printed PASS). Each search checks the gate
    before every build and launch, so this waits for one build at most."""
    _stop_all()
    deadline = time.monotonic() + EXIT_WAIT_S
    for t in list(_threads):
        t.join(max(0.0, deadline - time.monotonic()))


atexit.register(_stop_at_exit)


def start_background(device, target: Target, keys: Dict[Tuple[str, ShapeKey], int],
                     budget_s: float = BACKGROUND_BUDGET_S) -> Optional[Gate]:
    """Measure `keys` missing from the database in a daemon thread, only while the returned gate
    says the session is idle (after its first run), within `budget_s` seconds of search; None
    when every shape is stored already and the family's GEMM tiles were not owed (a session
    that started on default tiles has them measured first: TuningState.measure_owed). Writes the
    database; the running session keeps its plans (a later session uses the results). Stops any older session's background search. Another search already running in this process:
    this one waits for it, then skips what it stored."""
    _stop_all()  # only the newest session measures: an older one's search would disturb its runs
    have = {(fam, key) for fam, key, _items in target.tuned}
    missing = {k: n for k, n in keys.items() if (k[0], key_str(k[1])) not in have and k[0] in BACKGROUND_FAMILIES}
    tiles_owed = device.tuning.owed(target.family)  # the session started on default tiles (runtime.tuning)
    if not ordered(missing, target) and not tiles_owed:
        return None
    gate = Gate()
    _gates.add(gate)

    def work() -> None:
        while not gate.stop.is_set() and not gate.ran.wait(0.2):
            pass
        if gate.stop.is_set() or not gate.wait():
            return
        with _background_lock:
            try:
                if tiles_owed:
                    device.tuning.measure_owed(device, target.family, gate.wait)
                search(device, target, missing, budget_s=budget_s, gate=gate, by="background")
            except Exception as e:  # noqa: BLE001 - tuning is an optimisation; the session never sees it
                log.warning("background tuning on %s stopped: %s", target.name, e)

    thread = threading.Thread(target=work, name="clglow-tune-background", daemon=True)
    _threads.add(thread)
    thread.start()
    return gate


def ordered(keys: Dict[Tuple[str, ShapeKey], int], target: Target) -> List[Tuple[str, ShapeKey, int]]:
    """The shapes worth searching on `target`, best paying first: family priority, then total work."""
    rows = [(fam, key, n) for (fam, key), n in keys.items() if fam in FAMILIES and FAMILIES[fam].applies(target)]
    return sorted(rows, key=lambda r: (FAMILIES[r[0]].priority, -FAMILIES[r[0]].flops(r[1]) * r[2]))


def candidates(target: Target, family: str, keys: List[ShapeKey], limit: int, seed: int = 0) -> List[Params]:
    """The points to measure for these shapes: each shape's default, then a seeded sample of the
    declared space, `limit` in all (at least the defaults)."""
    fam = FAMILIES[family]
    out: List[Params] = []
    for key in keys:
        d = fam.default(target, key)
        if d not in out:
            out.append(d)
    rest = [p for p in fam.space(target, keys[0] if keys else ()) if p not in out]
    random.Random(seed).shuffle(rest)
    return out + rest[:max(0, limit - len(out))]


class _Kernel:
    """One candidate's kernel for one shape, its buffers shared per shape."""

    def __init__(self, device, launch, bufs: Dict[str, cl.Buffer]):
        prg = device.program(launch.program, launch.build_options())
        self.kernel = cl.Kernel(prg, launch.kernel)
        self.kernel.set_args(*[bufs[a.name] if isinstance(a, Buf) else a for a in launch.args])
        self.gsize, self.lsize = launch.gsize, launch.lsize

    def run(self, queue, evict: Optional[cl.Buffer] = None) -> float:
        """The launch's kernel time (ms); with `evict`, after a write of that buffer (not timed)."""
        if evict is not None:
            cl.enqueue_fill_buffer(queue, evict, np.float32(0.0), 0, evict.size)
        ev = cl.enqueue_nd_range_kernel(queue, self.kernel, self.gsize, self.lsize)
        ev.wait()
        return (ev.profile.end - ev.profile.start) * 1e-6


def measure(device, target: Target, family: str, key: ShapeKey, points: List[Params],
            gate: Optional[Gate] = None, rounds: int = ROUNDS, deadline: float = float("inf")) -> Dict[int, float]:
    """Best kernel time (ms) of each point (by index) on shape `key`, points in turns; a point
    that fails to build or run is left out (logged). Past `deadline` (time.monotonic()) no
    further point is built: those built (the default and at least one other) are timed."""
    fam = FAMILIES[family]
    specs: Dict[int, Any] = {}
    for i, p in enumerate(points):
        try:
            spec = fam.bench(target, key, p)
        except (ValueError, KeyError, TypeError) as e:
            log.info("tuning %s %s: point %s not applicable: %s", family, key, format_params(p), e)
            continue
        if spec is not None:
            specs[i] = spec
    if not specs:
        return {}
    sizes: Dict[str, int] = {}
    for _launch, sz in specs.values():
        for name, n in sz.items():
            sizes[name] = max(sizes.get(name, 4), int(n))
    queue = device.profiling_queue
    bufs = {name: cl.Buffer(device.context, cl.mem_flags.READ_WRITE, n) for name, n in sizes.items()}
    evict = cl.Buffer(device.context, cl.mem_flags.READ_WRITE, fam.cold_bytes) if fam.cold_bytes else None
    kernels: Dict[int, _Kernel] = {}
    best: Dict[int, float] = {}
    try:
        for b in bufs.values():
            cl.enqueue_fill_buffer(queue, b, np.float32(0.01), 0, b.size)
        for i, (launch, _sz) in specs.items():
            if gate is not None and not gate.wait():
                return {}
            if len(kernels) >= 2 and time.monotonic() >= deadline:
                log.info("tuning %s %s: budget spent after %d of %d points", family, key, len(kernels), len(specs))
                break
            try:
                kernels[i] = _Kernel(device, launch, bufs)
                kernels[i].run(queue)  # the first launch may generate code: not timed
                best[i] = float("inf")
            except Exception as e:  # noqa: BLE001 - a point the device rejects is skipped
                log.info("tuning %s %s: point %s failed: %s", family, key, format_params(points[i]), e)
                kernels.pop(i, None)
        for _ in range(rounds):
            for i, k in list(kernels.items()):
                if gate is not None and not gate.wait():
                    return {}
                best[i] = min(best[i], k.run(queue, evict))
    finally:
        for b in bufs.values():
            b.release()
        if evict is not None:
            evict.release()
    return {i: t for i, t in best.items() if t < float("inf")}


def _choose(points: List[Params], default: Params, times: Dict[int, float]) -> Tuple[Params, float, float]:
    """(chosen point, its ms, the default's ms): the fastest unless the default is within MARGIN."""
    di = points.index(default)
    bi = min(times, key=lambda i: times[i] if times[i] == times[i] else float("inf"))
    dms = times.get(di, float("nan"))
    if di in times and not times[bi] < dms / (1 + MARGIN):
        return default, dms, dms
    return points[bi], times[bi], dms


def search(device, target: Target, keys: Dict[Tuple[str, ShapeKey], int], budget_s: float = 120.0,
           force: bool = False, db: Optional[TuningDB] = None, gate: Optional[Gate] = None,
           families: Optional[List[str]] = None, by: str = "tune", max_points: int = 16) -> List[SearchResult]:
    """Search each requested shape on `device` under `target` (see the module docstring) within
    `budget_s` seconds, storing each shape's outcome in `db` as it is found. Shapes stored before
    are reported from the database unless `force`. Never raises for a failing point."""
    db = db if db is not None else TuningDB.for_device(device.cl_device)
    t_end = time.monotonic() + max(0.0, budget_s)
    stored = db.entries()
    rows = [r for r in ordered(keys, target) if families is None or r[0] in families]
    results: List[SearchResult] = []
    by_family: Dict[str, List[Params]] = {}
    for fam_name, key, count in rows:
        fam = FAMILIES[fam_name]
        ekey = entry_key(target.family, fam_name, family_hash(fam_name), key_str(key))
        old = stored.get(ekey)
        if old is not None and not force:
            results.append(SearchResult(fam_name, key, dict(old["params"]), float(old.get("ms", 0.0)),
                                        dict(old.get("default", old["params"])), float(old.get("default_ms", 0.0)),
                                        "db", count))
            continue
        if time.monotonic() >= t_end or (gate is not None and gate.stop.is_set()):
            break
        default = fam.default(target, key)
        if fam_name in MODELS:  # whole-node points, their own per shape (node_bench.py)
            points = fam.space(target, key)[:max_points]
        else:  # one program per point, whatever the shape: the same points for every shape
            if fam_name not in by_family:
                fam_keys = [k for f, k, _n in rows if f == fam_name]
                by_family[fam_name] = candidates(target, fam_name, fam_keys, max_points)
            points = list(by_family[fam_name])
        if default in points:
            points.remove(default)
        points.insert(0, default)
        if len(points) < 2:  # nothing to choose between: the default, stored so that it is not asked again
            times = {0: float("nan")}
        elif fam_name in MODELS:
            times = measure_node(device, target, fam_name, key, points, gate, deadline=t_end)
        else:
            times = measure(device, target, fam_name, key, points, gate, deadline=t_end)
        if not times:
            results.append(SearchResult(fam_name, key, default, float("nan"), default, float("nan"), "failed", count))
            continue
        params, ms, dms = _choose(points, default, times)
        if params != default:  # confirmed head to head, more turns: a burst of other work may have hit the default
            measure_fn = measure_node if fam_name in MODELS else measure
            again = measure_fn(device, target, fam_name, key, [default, params], gate, rounds=2 * ROUNDS)
            if len(again) == 2:
                params, ms, dms = _choose([default, params], default, again)
        res = SearchResult(fam_name, key, params, ms, default, dms, "measured", count,
                           {format_params(points[i]): t for i, t in times.items()})
        results.append(res)
        db.put(ekey, {"params": params, "ms": ms, "default": default, "default_ms": dms, "by": by})
        log.info("tuned %s %s: %s %.3f ms (default %s %.3f ms)", fam_name, key, format_params(params), ms,
                 format_params(default), dms)
    return results


def revert(db: TuningDB, target_family: str, keys: List[Tuple[str, ShapeKey]], why: str) -> int:
    """Store the default as the choice of these (family, key)s (their measured times kept): a
    whole-model check found the per-shape winners slower together. Returns how many changed."""
    entries = db.entries()
    new = {}
    for fam, key in keys:
        ekey = entry_key(target_family, fam, family_hash(fam), key_str(key))
        old = entries.get(ekey)
        if old is not None and "default" in old and old["params"] != old["default"]:
            new[ekey] = dict(old, params=old["default"], ms=old.get("default_ms", old.get("ms")), by=why)
    if new:
        db.put_many(new)
    return len(new)


def stored_results(db: TuningDB, target_family: str) -> List[SearchResult]:
    """The database's entries for `target_family` as results (``clglow tune --show``), current
    kernels only, the most work first."""
    out: List[SearchResult] = []
    for k, v in db.entries().items():
        parts = split_key(k)
        if parts is None or parts[0] != target_family or parts[1] not in FAMILIES or parts[2] != family_hash(parts[1]):
            continue
        try:
            key = key_from_str(parts[3])
        except ValueError:
            continue
        out.append(SearchResult(parts[1], key, dict(v["params"]), float(v.get("ms", 0.0)),
                                dict(v.get("default", v["params"])), float(v.get("default_ms", 0.0)),
                                str(v.get("by", "db"))))
    return sorted(out, key=lambda r: (FAMILIES[r.family].priority, -FAMILIES[r.family].flops(r.key)))


__all__ = ["STANDARD_SHAPES", "BACKGROUND_BUDGET_S", "BACKGROUND_FAMILIES", "start_background", "search", "revert", "measure", "candidates", "ordered", "stored_results", "Gate",
           "SearchResult", "MARGIN"]
