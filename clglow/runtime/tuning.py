"""GEMM tile sizes chosen per device and target family by measurement, once, and remembered.

The GEMM kernel (kernels_cl/gemm.cl) is specialised by `-D` tile sizes: rows per work-item
(MR), vector width (VW), vectors per row (NV) and the work-group size. Which combination runs
fastest depends on the device (registers, vector units, how the driver maps work-groups), so on
first use a device measures a few candidates on one representative GEMM (ResNet-like
240x576x768, weights packed and B read in place as the 1x1 and implicit convolutions do: the
programs measured are then mostly ones a model builds anyway) and keeps the fastest. M and N are
whole tiles for every candidate (240 rows: 20 tiles of 12, 30 of 8; 768 columns), so the
measurement compares the tiles, not their padding, and the candidates run in turns (round
robin, best time of each) so that a burst of other work on a shared machine does not land on
one candidate only. The choice
is stored as JSON under the cache folder (``<cache>/tuning/<key>.json``, the key covering the
platform, device, driver and clglow versions, the target family and the candidate list), so
later processes only read it. ``CLGLOW_TUNE=0`` skips measuring and uses the built-in default
for the family.

A session never measures on its start: `TuningState.load` reads the stored choice (a file), and
on a miss the session plans with the family's default tiles and owes the measurement, which its
background search (runtime/search.py, after the first run, only while no run is in flight) does
first (`TuningState.measure_owed`) and stores for later processes; the running process keeps
the default, so its plans stay valid. (Measured on this 2-vCPU Zen 5 under load: the
measurement's two candidate programs, which the model does not use, were 2 of 11 programs of
ResNet-50's cold start.) `tune_gemm` and `Device.ensure_tuned` (``clglow tune``, tests) still
measure at once.

Tuning state, per target family: a device under the CPU family (register-blocked tiles, one
work-item per group) and under the GPU family (work-group tiles; ``CLGLOW_TARGET=gpu`` on pocl)
needs different tiles, so `TuningState` keeps one choice per family and tunes each family once
per process (`Device.ensure_tuned(family)`); `Device.target(family)` hands the family's choice
to lowering inside the Target (``gemm_tiles``).

The GPU family's local-memory GEMM (kernels_cl/xgemm.cl, lower/gpu_gemm.py): where it applies
(`xgemm_candidates`: dedicated local memory, a configuration that fits), the tuner also measures
the configurations of `gpu_gemm.search_space(target)` on XGEMM_SHAPE the same way (round robin,
best time each, the default kept within the margin, a failing one skipped and logged) and stores
the winner in the same file under ``"xgemm"``; `Device.target(family)` carries it as
``xgemm_tiles``, which `gpu_gemm.xgemm_config` returns. A file without that entry (or with a
configuration outside the space) is read for gemm.cl's tiles and only xgemm is measured again;
the CPU family's files hold gemm.cl's choice only, as before.

The candidates are few on purpose: each one is a program the driver compiles (about half a
second on pocl), and the first session on a device pays for them.

Per-shape tuning builds on this: the tiles chosen here are the gemm family's default for a shape
the tuning database has no entry for. The families and their spaces are lower/tunable.py (and
the modules that own each kernel), the database runtime/tuning_db.py, the search (`clglow
tune`, a session's background search) runtime/search.py; `TuningState.table` hands a family's
database entries to `Device.target` (``Target.tuned``).

Example::

    result = tune_gemm(device)          # a TuneResult; device.info now carries the choice
    result.choice, result.timings_ms    # ((12, 16, 2, (1, 1, 1)), {...})
    tune_gemm(device, family="gpu")     # the GPU family's tiles: device.target("gpu").gemm_tiles
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np
import pyopencl as cl

from .. import config
from ..lower.base import Buf, Launch
from ..target import Target
from ..lower.gemm_kernel import GemmConfig, Operand, default_gemm_config, gemm_launch
from ..lower.gpu_gemm import XgemmConfig, search_space, xgemm_applicable, xgemm_launch
from .cache import atomic_write, default_cache_dir, disk_key

log = logging.getLogger(__name__)

Tiles = Tuple[int, int, int, Tuple[int, int, int]]  # (MR, VW, NV, local size)
# M, K, N: a ResNet-50-like layer (64x3x3 at 28x28) with M and N whole tiles for every candidate.
# Was 256 x 576 x 784, where 12-row tiles compute 3% more rows than 8-row ones and 784 columns
# are 24.5 tiles: on a Zen 4 (pocl, AVX-512) the 8 x 32 tiles won there by 10% while ResNet-50
# ran 2% faster with the default 12 x 32 (and its 8 x 48 fit).
SHAPE = (240, 576, 768)
# M, K, N of the xgemm.cl measurement (GPU family with local memory): whole 128 x 128 tiles (and
# whole k-slices of 8 and 16) for every configuration, and 48 to 3072 work-groups so that a GPU's
# compute units all have work (a 256-channel 3x3 convolution's GEMM over 3072 pixels).
XGEMM_SHAPE = (256, 1152, 3072)
_VERSION = "gemm-tune-8"  # 7: the key names the target family; 8: files may carry "xgemm"
_MARGIN = 0.05  # another candidate must beat the default by 5% to be chosen


@dataclass
class TuneResult:
    choice: Tiles
    timings_ms: Dict[str, float] = field(default_factory=dict)  # "MRxVWxNV@lsize" -> best ms
    source: str = "measured"  # "measured", "disk" or "default"
    # the xgemm.cl configuration (XgemmConfig.as_tuple()) where xgemm applies, None where it does
    # not or was not measured; its timings keyed by XgemmConfig.label()
    xgemm: Optional[tuple] = None
    xgemm_timings_ms: Dict[str, float] = field(default_factory=dict)


def _label(t: Tiles) -> str:
    mr, vw, nv, ls = t
    return f"{mr}x{vw}x{nv}@{'x'.join(map(str, ls))}"


def candidates(info: Target) -> List[Tiles]:
    """A short list of tile configurations worth measuring on this target; the default first.

    CPU family (pocl): one work-item per work-group and MR x NV accumulators around what the
    vector registers hold (AVX-512: 32 registers, the accumulators plus B and a broadcast).
    GPU family: square work-groups within the device's limit, small register tiles.
    """
    d = default_gemm_config(dataclasses.replace(info, gemm_tiles=None))
    first: Tiles = (d.mr, d.vw, d.nv, tuple(d.lsize))
    if info.family == "cpu":
        if d.vw >= 16:
            # The candidates keep NR = 32: the column-tile width decides packing and paths
            # (an 8 x 48 choice, 6% faster on the tuning GEMM, made BERT's 64-wide head
            # MatMuls pack B: +0.7 ms). 14-row tiles were a candidate until they had never won
            # on this AVX-512 machine (pocl); each candidate is a program to generate at a cold
            # start.
            rest = [(8, 16, 2, (1, 1, 1))]
        else:
            rest = [(4, 8, 2, (1, 1, 1)), (6, 4, 2, (1, 1, 1))]
    else:
        rest = [(4, 4, 2, (8, 8, 1)), (8, 4, 1, (8, 8, 1)), (4, 4, 1, (16, 16, 1))]
    out = [first]
    for t in rest:
        if t not in out and t[3][0] * t[3][1] * t[3][2] <= info.max_work_group_size:
            out.append(t)
    return out


def xgemm_candidates(target: Target) -> List[tuple]:
    """The xgemm.cl configurations to measure on `target` (XgemmConfig.as_tuple(), the default
    first): its whole search space where xgemm applies (GPU family, dedicated local memory),
    none elsewhere (the CPU family tunes gemm.cl's tiles only)."""
    if xgemm_applicable(target) is not None:
        return []
    return [c.as_tuple() for c in search_space(target)]


def _xlabel(t: tuple) -> str:
    return XgemmConfig.from_tuple(t).label()


def _cache_path(device, family: str, cands: List[Tiles], xcands: List[tuple]) -> Optional[Path]:
    if not config.cache_enabled():
        return None
    extra = f"{_VERSION} {SHAPE} family={family}"
    if xcands:  # the xgemm search space is part of the key, as the gemm candidates are
        extra += f" xgemm={XGEMM_SHAPE} {json.dumps([_xlabel(c) for c in xcands])}"
    key = disk_key(json.dumps([_label(c) for c in cands]), (), device.cl_device, extra=extra)
    return default_cache_dir() / "tuning" / f"{key}.json"


def _load(path: Optional[Path], cands: List[Tiles], xcands: List[tuple]) -> Optional[TuneResult]:
    """The stored result, None when there is none usable (missing, corrupt, a stale choice).
    A missing or stale "xgemm" entry leaves `xgemm` None: not measured yet."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
        choice = data["choice"]
        t: Tiles = (int(choice[0]), int(choice[1]), int(choice[2]), tuple(int(x) for x in choice[3]))
        timings = {str(k): float(v) for k, v in dict(data.get("timings_ms", {})).items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    if t not in cands:  # stale or edited by hand: measure again
        return None
    result = TuneResult(t, timings, "disk")
    if xcands:
        try:
            x = data["xgemm"]
            xt = XgemmConfig.from_tuple(x["choice"]).as_tuple()
            xtimings = {str(k): float(v) for k, v in dict(x.get("timings_ms", {})).items()}
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return result
        if xt in xcands:
            result.xgemm, result.xgemm_timings_ms = xt, xtimings
    return result


def _store(path: Optional[Path], result: TuneResult) -> None:
    if path is None:
        return
    data: Dict[str, Any] = {"choice": [*result.choice[:3], list(result.choice[3])], "timings_ms": result.timings_ms,
                            "shape": SHAPE}
    if result.xgemm is not None:
        data["xgemm"] = {"choice": list(result.xgemm), "timings_ms": result.xgemm_timings_ms,
                         "shape": XGEMM_SHAPE}
    try:
        atomic_write(path, json.dumps(data).encode())
    except OSError as e:
        log.warning("GEMM tuning: cannot store %s (%s)", path, e)


def _launch(t: Tiles) -> Launch:
    """The representative GEMM with tiles `t` (buffers named A, B, C)."""
    mr, vw, nv, ls = t
    m, k, n = SHAPE
    return gemm_launch(GemmConfig(mr, vw, nv, ls), m=m, n=n, k=k, batch=1, d2=1,
                       a=Operand(Buf("A"), packed=True), b=Operand(Buf("B"), ld=n), c=Operand(Buf("C"), ld=n),
                       act="Relu")


def _gemm_spec(t: Tiles) -> Tuple[Launch, Dict[str, int]]:
    """gemm.cl's representative launch with tiles `t` and its buffers' byte sizes (A packed to
    whole MR-row tiles)."""
    m, k, n = SHAPE
    mp = -(-m // t[0]) * t[0]
    return _launch(t), {"A": mp * k * 4, "B": n * k * 4, "C": m * n * 4}


def _xgemm_launch(t: tuple) -> Launch:
    """The representative xgemm.cl GEMM with configuration `t` (row-major weights A, B read in
    place as a 1x1 convolution's pixels, ReLU epilogue; buffers named A, B, C)."""
    m, k, n = XGEMM_SHAPE
    return xgemm_launch(XgemmConfig.from_tuple(t), m=m, n=n, k=k, batch=1, d2=1, a=Operand(Buf("A"), ld=k),
                        b=Operand(Buf("B"), ld=n), c=Operand(Buf("C"), ld=n), act="Relu")


def _xgemm_spec(t: tuple) -> Tuple[Launch, Dict[str, int]]:
    m, k, n = XGEMM_SHAPE
    return _xgemm_launch(t), {"A": m * k * 4, "B": k * n * 4, "C": m * n * 4}


class _Bench:
    """One candidate's program and buffers for a representative GEMM, launched on demand."""

    def __init__(self, device, launch: Launch, sizes: Dict[str, int]):
        ctx = device.context
        self.queue = device.profiling_queue
        mf = cl.mem_flags
        self.bufs = {name: cl.Buffer(ctx, mf.READ_WRITE, size) for name, size in sizes.items()}
        for b in self.bufs.values():
            cl.enqueue_fill_buffer(self.queue, b, np.float32(0.01), 0, b.size)
        prg = device.program(launch.program, launch.build_options())
        self.kernel = cl.Kernel(prg, launch.kernel)
        self.kernel.set_args(*[self.bufs[a.name] if isinstance(a, Buf) else a for a in launch.args])
        self.gsize, self.lsize = launch.gsize, launch.lsize
        self.run()  # the first run includes the driver's code generation: not timed

    def run(self) -> float:
        """One launch, waited for: its kernel time in ms."""
        ev = cl.enqueue_nd_range_kernel(self.queue, self.kernel, self.gsize, self.lsize)
        ev.wait()
        return (ev.profile.end - ev.profile.start) * 1e-6

    def release(self) -> None:
        for b in self.bufs.values():
            b.release()


def _measure_all(device, specs: Dict[str, Tuple[Launch, Dict[str, int]]], rounds: int = 7,
                 wait: Optional[Callable[[], bool]] = None) -> Dict[str, float]:
    """Best kernel time (ms) of each candidate (label -> its launch and buffer sizes) over
    `rounds` turns, the candidates alternating. A candidate that fails to build or run is left
    out (logged). `wait` (a background measurement) is asked before every build and launch;
    False stops: nothing measured ({})."""
    go = wait if wait is not None else (lambda: True)
    benches: Dict[str, _Bench] = {}
    for label, (launch, sizes) in specs.items():
        if not go():
            break
        try:
            benches[label] = _Bench(device, launch, sizes)
        except Exception as e:  # noqa: BLE001 - a candidate the device rejects is skipped
            log.info("GEMM tuning: candidate %s failed on %s: %s", label, device.info.name, e)
    best = {label: float("inf") for label in benches}
    try:
        for _ in range(rounds):
            for label, bench in list(benches.items()):
                if not go():
                    return {}
                try:
                    best[label] = min(best[label], bench.run())
                except Exception as e:  # noqa: BLE001
                    log.info("GEMM tuning: candidate %s failed on %s: %s", label, device.info.name, e)
                    del benches[label], best[label]
    finally:
        for bench in benches.values():
            bench.release()
    return best


def tune_gemm(device, force: bool = False, family: Optional[str] = None,
              enabled: Optional[bool] = None) -> TuneResult:
    """The GEMM tiles for `device` under `family` (None: the device's own): from disk when
    measured before, else measured now (and stored); the default when measuring is off
    (`enabled`, default CLGLOW_TUNE) and `force` is not set. Stores the choice on the device
    (``device.target(family).gemm_tiles``). Where xgemm.cl applies (`xgemm_candidates`), its
    configurations are measured too (a stored file without them measures only them) and the
    choice is ``device.target(family).xgemm_tiles``. A candidate that fails to build or run is
    skipped (logged); if all fail the default stands."""
    target = device.target(family)
    measure = config.tuning_enabled() if enabled is None else bool(enabled)
    result = _tune(device, target, force) if measure or force else None
    if result is None:
        result = TuneResult(candidates(target)[0], {}, "default")
    _apply(device, target.family, result)
    return result


def _apply(device, family: str, result: TuneResult) -> None:
    device.set_gemm_tiles(result.choice, family)
    device.tuning.set_xgemm(family, result.xgemm)


def _tune(device, target: Target, force: bool = False, wait: Optional[Callable[[], bool]] = None
          ) -> Optional[TuneResult]:
    """The stored result unless `force`, else (or for what it lacks) measured and stored; None
    when nothing ran (or `wait` said stop)."""
    cands, xcands = candidates(target), xgemm_candidates(target)
    path = _cache_path(device, target.family, cands, xcands)
    result = None if force else _load(path, cands, xcands)
    stale = result is None or (bool(xcands) and result.xgemm is None)
    if result is None:
        result = _measure(device, target, cands, wait)
    if result is not None and xcands and result.xgemm is None:
        _measure_xgemm(device, target, xcands, result, wait)
    if result is not None and stale and (wait is None or wait()):
        _store(path, result)
    return result


def stored(device, family: Optional[str] = None) -> Tuple[Optional[TuneResult], bool]:
    """`family`'s tiles as a file stored them (no measuring, a file read) and whether that is
    all there is to measure (False: no file, or one without the xgemm entry it needs)."""
    target = device.target(family)
    cands, xcands = candidates(target), xgemm_candidates(target)
    result = _load(_cache_path(device, target.family, cands, xcands), cands, xcands)
    return result, result is not None and not (xcands and result.xgemm is None)


def _fastest(cands: List[Any], timings: Dict[str, float], label) -> Any:
    """The fastest measured candidate, the default (first) unless another beats it by the margin."""
    best = min((c for c in cands if label(c) in timings), key=lambda c: timings[label(c)])
    base = timings.get(label(cands[0]))
    if base is not None and timings[label(best)] > base / (1 + _MARGIN):
        return cands[0]  # within the noise of a shared machine: keep the default
    return best


def _measure(device, target: Target, cands: List[Tiles], wait: Optional[Callable[[], bool]] = None
             ) -> Optional[TuneResult]:
    """Build the candidates side by side (compile helpers too; one by one in the background,
    `wait`), time them, keep the fastest unless the default is within the margin. None when none
    ran."""
    t0 = time.perf_counter()
    for t in cands if wait is None else ():
        launch = _launch(t)
        device.prepare(launch.program, launch.build_options(), launch.kernel, launch.lsize, launch.noop_args)
    timings = _measure_all(device, {_label(t): _gemm_spec(t) for t in cands}, wait=wait)
    if not timings:
        return None
    best = _fastest(cands, timings, _label)
    log.info("GEMM tiles for %s (%s family): %s (%s) in %.2f s", target.name, target.family, _label(best),
             ", ".join(f"{k} {v:.3f} ms" for k, v in timings.items()), time.perf_counter() - t0)
    return TuneResult(best, timings, "measured")


def _measure_xgemm(device, target: Target, xcands: List[tuple], result: TuneResult,
                   wait: Optional[Callable[[], bool]] = None) -> None:
    """Time xgemm.cl's configurations on XGEMM_SHAPE (round robin, best of each) and record the
    fastest in `result` (left None when none ran: the first of the search space applies). A
    configuration that fails to build or run is skipped (logged)."""
    t0 = time.perf_counter()
    specs: Dict[str, Tuple[Launch, Dict[str, int]]] = {}
    for t in xcands:
        try:
            launch, sizes = _xgemm_spec(t)
            if wait is None:
                device.prepare(launch.program, launch.build_options(), launch.kernel, launch.lsize, launch.noop_args)
            specs[_xlabel(t)] = (launch, sizes)
        except Exception as e:  # noqa: BLE001 - a configuration the device rejects is skipped
            log.info("xgemm tuning: configuration %s failed on %s: %s", _xlabel(t), target.name, e)
    timings = _measure_all(device, specs, wait=wait)
    if not timings:
        log.warning("xgemm tuning: no configuration ran on %s; using the first of the search space", target.name)
        return
    best = _fastest(xcands, timings, _xlabel)
    result.xgemm, result.xgemm_timings_ms = best, timings
    if result.source == "disk":
        result.source = "disk+measured"
    log.info("xgemm configuration for %s (%s family): %s (%s) in %.2f s", target.name, target.family,
             _xlabel(best), ", ".join(f"{k} {v:.3f} ms" for k, v in timings.items()), time.perf_counter() - t0)


class TuningState:
    """One device's GEMM tiles per target family, and which families were tuned in this process.

    Thread-safe: sessions tune on a thread of their own while the model loads; a family is
    tuned once (`ensure`), later sessions read its choice (`tiles`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tiles: Dict[str, tuple] = {}
        self._xgemm: Dict[str, tuple] = {}
        self._tuned: Set[str] = set()
        self._family_locks: Dict[str, threading.Lock] = {}
        self._tables: Dict[str, tuple] = {}  # target family -> Target.tuned (the database's entries)
        self._db: Any = None
        self._owed: Set[str] = set()  # families a session started with default tiles: measure_owed

    def database(self, device: Any) -> Any:
        """The device's tuning database (runtime.tuning_db), opened once."""
        from .tuning_db import TuningDB

        with self._lock:
            if self._db is None:
                self._db = TuningDB.for_device(device.cl_device)
            return self._db

    def table(self, device: Any, family: str) -> tuple:
        """The family's database entries as Target.tuned, read on first use (a later process, or
        `reload`, sees what searches stored since). A database that cannot be read gives ()."""
        with self._lock:
            t = self._tables.get(family)
        if t is not None:
            return t
        try:
            from .tuning_db import table_from

            t = table_from(self.database(device), family)
        except Exception as e:  # noqa: BLE001 - tuning is an optimisation; defaults always work
            log.warning("tuning database of %s unusable (%s): family defaults apply", getattr(device, "name", device), e)
            t = ()
        with self._lock:
            return self._tables.setdefault(family, t)

    def reload(self, device: Any, family: str) -> tuple:
        """Read the family's database entries again (new sessions on this device use them)."""
        with self._lock:
            self._tables.pop(family, None)
        return self.table(device, family)

    def set_table(self, family: str, table: tuple) -> None:
        """Use these entries for `family` (tests, benchmarks of one candidate)."""
        with self._lock:
            self._tables[family] = tuple(table)

    def tiles(self, family: str) -> Optional[tuple]:
        """The family's chosen (MR, VW, NV, local size), None before any choice."""
        with self._lock:
            return self._tiles.get(family)

    def set(self, family: str, tiles: Optional[tuple]) -> None:
        """Record a choice for `family` (None forgets it: the family's default applies)."""
        with self._lock:
            if tiles is None:
                self._tiles.pop(family, None)
            else:
                mr, vw, nv, ls = tiles
                self._tiles[family] = (int(mr), int(vw), int(nv), tuple(int(x) for x in ls))

    def xgemm(self, family: str) -> Optional[tuple]:
        """The family's chosen xgemm.cl configuration (XgemmConfig.as_tuple()), None before any."""
        with self._lock:
            return self._xgemm.get(family)

    def set_xgemm(self, family: str, tiles: Optional[tuple]) -> None:
        """Record an xgemm.cl choice for `family` (None forgets it: the first of the search space)."""
        with self._lock:
            if tiles is None:
                self._xgemm.pop(family, None)
            else:
                self._xgemm[family] = tuple(int(x) for x in tiles)

    def ensure(self, device: Any, family: str, enabled: Optional[bool] = None) -> None:
        """Tune `family` on `device` once per process (from disk, or by measuring). With
        measuring off (`enabled` False, default CLGLOW_TUNE) nothing is chosen: the family's
        default tiles apply, and a later call that may measure still does. Never raises: tuning
        is an optimisation, defaults work."""
        if not (config.tuning_enabled() if enabled is None else bool(enabled)):
            return
        with self._lock:
            if family in self._tuned:
                return
            lock = self._family_locks.setdefault(family, threading.Lock())
        with lock:
            with self._lock:
                if family in self._tuned:
                    return
            try:
                tune_gemm(device, family=family, enabled=enabled)
            except Exception as e:  # noqa: BLE001 - tuning is an optimisation; defaults always work
                log.warning("GEMM tuning failed on %s (%s family: %s); using default tiles",
                            getattr(device, "name", device), family, e)
            with self._lock:
                self._tuned.add(family)


    def load(self, device: Any, family: str, enabled: Optional[bool] = None) -> None:
        """A session's start: `family`'s stored tiles (a file read), never a measurement. A miss
        keeps the family's default tiles and owes the measurement (`owed`, `measure_owed`: a
        session runs it in the background after its first runs). Measuring off (`enabled`
        False, default CLGLOW_TUNE): nothing is read or owed. Never raises."""
        if not (config.tuning_enabled() if enabled is None else bool(enabled)):
            return
        with self._lock:
            if family in self._tuned or family in self._owed:
                return
        try:
            result, complete = stored(device, family)
        except Exception as e:  # noqa: BLE001 - tuning is an optimisation; defaults always work
            log.warning("GEMM tiles of %s unreadable (%s family: %s); using default tiles",
                        getattr(device, "name", device), family, e)
            return
        if result is not None:
            _apply(device, family, result)
        with self._lock:
            (self._tuned if complete else self._owed).add(family)

    def owed(self, family: str) -> bool:
        """Whether `load` found no stored tiles for `family` and nothing measured them since."""
        with self._lock:
            return family in self._owed

    def measure_owed(self, device: Any, family: str, wait: Callable[[], bool]) -> Optional[TuneResult]:
        """Measure the tiles `load` owed and store them for later processes, asking `wait` before
        every build and launch (False stops: owed again). This process keeps its tiles, so the
        plans of running sessions stay valid. None when not owed or stopped."""
        with self._lock:
            if family not in self._owed:
                return None
            self._owed.discard(family)
        result = None
        try:
            result = _tune(device, device.target(family), wait=wait)
        except Exception as e:  # noqa: BLE001 - a background optimisation; the session never sees it
            log.warning("background GEMM tile measurement on %s stopped: %s", getattr(device, "name", device), e)
        if result is None or not stored(device, family)[1]:
            with self._lock:
                self._owed.add(family)
            return None
        return result


__all__ = ["TuneResult", "Tiles", "TuningState", "candidates", "xgemm_candidates", "tune_gemm", "stored", "SHAPE",
           "XGEMM_SHAPE"]
