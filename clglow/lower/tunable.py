"""Tunable kernel families: declared parameter spaces, per-shape choices, and what lowering asked.

Why this file exists: a kernel's performance parameters (gemm.cl's register tile MR x VW x NV
and work-group, xgemm.cl's CLBlast-style tiles, a convolution's choice of path) must be found
on the device for the shapes a model has, not fitted by hand to one machine. A `Family`
declares, for one kernel family: its parameter space on a Target (`space`, constraints from the
Target's limits only: work-group size, local memory, vector width; never a CPU model, vendor or
ISA name), its default for a Target and shape (`default`), the benchmark Launch of one point
for one problem shape (`bench`), the shape's work (`flops`, to spend search time where it pays)
and the tolerance within which its points agree numerically.

Lowering asks `choose(target, family, key)` for THIS shape: the Target carries the device's
tuning database entries (`Target.tuned`, read by runtime.device from runtime.tuning_db), so a
hit returns the stored parameters and a miss the family's default. Every request is recorded
(`requests_since`): the runtime's search measures the shapes a model really lowered, and
`decisions()` tells the profiler which parameters each node ran with and where they came from.

This module imports no other lowering module (families register themselves from
gemm_kernel.py, gpu_gemm.py and conv.py) and nothing from runtime/.

Example::

    params, source = choose(target, "gemm", (240, 768, 576, "gemm"), label="Conv_3")
    params, source   # ({'mr': 12, 'vw': 16, 'nv': 2, 'lsize': (1, 1, 1)}, 'default')
"""
from __future__ import annotations

import functools
import itertools
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..target import Target

ShapeKey = Tuple[Any, ...]  # ints, strs, bools: e.g. GEMM (M, N, K, kind)
Params = Dict[str, Any]
# (launch, buffer name -> bytes) of one benchmark, or None when the point cannot run the shape
BenchSpec = Optional[Tuple[Any, Dict[str, int]]]


@dataclass(frozen=True)
class Family:
    """One tunable kernel family (see the module docstring).

    space(target, key): every valid point (the default first); default(target, key): the
    profile's choice when the database has none; bench(target, key, params): the Launch and
    buffer sizes that time one point on the shape (None: not measurable alone, e.g. whole-node
    families measured by runtime.tuning through a one-node model); flops(key): the work of one
    call; kernel: the kernels_cl program whose source hash keys the database entries (a changed
    kernel invalidates them); priority: lower searched first (the GEMMs); tolerance: relative
    error within which two points' results agree.
    cold_bytes: each timed launch of a point starts from caches that a write of this many bytes
    evicted first (0: warm, the launch before it left its operands cached). A family whose
    operands stream from memory in a model (the GEMV's weights, each used once a run) is timed
    cold: warm, its 1 MB products ran 5x faster than in the model, and the search chose for
    cache speed."""

    name: str
    kernel: str
    space: Callable[[Target, ShapeKey], List[Params]]
    default: Callable[[Target, ShapeKey], Params]
    bench: Callable[[Target, ShapeKey, Params], BenchSpec]
    flops: Callable[[ShapeKey], float]
    applies: Callable[[Target], bool] = lambda target: True
    priority: int = 10
    tolerance: float = 1e-4
    cold_bytes: int = 0


FAMILIES: Dict[str, Family] = {}
_lock = threading.Lock()
_requests: List[Tuple[Tuple[str, str, str], str, ShapeKey]] = []  # (target id, family, key), in order
# (node label, family) -> (shape key, params, source) of the latest lowering
_decisions: Dict[Tuple[str, str], Tuple[ShapeKey, Params, str]] = {}
_MAX_REQUESTS = 100_000


def register(family: Family) -> Family:
    """Declare a tunable family (at import of the module that owns its kernel)."""
    FAMILIES[family.name] = family
    return family


def key_str(key: ShapeKey) -> str:
    """The database spelling of a shape key (JSON: stable, readable)."""
    return json.dumps(list(key), separators=(",", ":"))


def key_from_str(text: str) -> ShapeKey:
    """The inverse of key_str."""
    return tuple(json.loads(text))


def params_items(params: Params) -> Tuple[Tuple[str, Any], ...]:
    """Hashable, ordered form of a parameter dict (lists become tuples)."""
    return tuple(sorted((k, _freeze(v)) for k, v in params.items()))


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def target_id(target: Target) -> Tuple[str, str, str]:
    """Which device and family a request came from (the search measures on that one)."""
    return (target.name, target.platform, target.family)


@functools.lru_cache(maxsize=64)
def _table(tuned: tuple) -> Dict[Tuple[str, str], Params]:
    return {(fam, k): dict(items) for fam, k, items in tuned}


def stored(target: Target, family: str, key: ShapeKey) -> Optional[Params]:
    """The database's parameters for (family, key) on this Target, None on a miss."""
    if not target.tuned:
        return None
    hit = _table(target.tuned).get((family, key_str(key)))
    return dict(hit) if hit is not None else None


def choose(target: Target, family: str, key: ShapeKey, label: str = "",
           valid: Optional[Callable[[Params], bool]] = None) -> Tuple[Params, str]:
    """The parameters of `family` for this shape: (params, "db") on a database hit that is
    still a valid point (`valid`), else (the family's default, "default"). Records the request
    and, with a `label`, the node's decision (profiler)."""
    fam = FAMILIES[family]
    note_request(target, family, key)
    params = stored(target, family, key)
    source = "db"
    if params is None or (valid is not None and not valid(params)):
        params, source = fam.default(target, key), "default"
    if label:
        record_decision(label, family, key, params, source)
    return params, source


def note_request(target: Target, family: str, key: ShapeKey) -> None:
    """Record that lowering asked for (family, key) on `target` (what a search measures)."""
    with _lock:
        if len(_requests) < _MAX_REQUESTS:
            _requests.append((target_id(target), family, tuple(key)))


def record_decision(label: str, family: str, key: ShapeKey, params: Params, source: str) -> None:
    """Note which parameters node `label` lowered with and where they came from (profiler)."""
    with _lock:
        _decisions[(label, family)] = (tuple(key), dict(params), source)


def request_mark() -> int:
    """A position in the request log; `requests_since(mark)` returns what came after it."""
    with _lock:
        return len(_requests)


def requests_since(mark: int, target: Optional[Target] = None) -> Dict[Tuple[str, ShapeKey], int]:
    """(family, key) -> how many times lowering asked for it after `mark` (for `target`'s device
    and family only, when given)."""
    with _lock:
        items = list(_requests[mark:])
    tid = target_id(target) if target is not None else None
    out: Dict[Tuple[str, ShapeKey], int] = {}
    for t, fam, key in items:
        if tid is None or t == tid:
            out[(fam, key)] = out.get((fam, key), 0) + 1
    return out


def forget(label: str) -> None:
    """Drop node `label`'s recorded decisions: its lowering starts again (another Target or plan)."""
    with _lock:
        for k in [k for k in _decisions if k[0] == label]:
            del _decisions[k]


def decisions() -> Dict[Tuple[str, str], Tuple[ShapeKey, Params, str]]:
    """(node label, family) -> (shape key, parameters, "db" | "default") of the latest lowering."""
    with _lock:
        return dict(_decisions)


def format_params(params: Params) -> str:
    """One short spelling of a parameter dict for tables."""
    return " ".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                    for k, v in sorted(params.items()))


def product(space: Dict[str, Sequence[Any]]) -> Iterable[Params]:
    """Every combination of a {name: allowed values} declaration."""
    names = list(space)
    for values in itertools.product(*(space[n] for n in names)):
        yield dict(zip(names, values))


__all__ = ["Family", "FAMILIES", "ShapeKey", "Params", "register", "choose", "stored", "key_str", "key_from_str",
           "params_items", "note_request", "record_decision", "request_mark", "requests_since", "decisions", "forget", "format_params", "product", "target_id"]
