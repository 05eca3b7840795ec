"""A disk cache of derived constants (packed weights): computed once, read by later processes.

Why: lowering packs constant weights on the host (LowerCtx.derived: pack_a/pack_b of conv and
GEMM weights, Winograd filters); for ResNet-50 that was about 0.2 s of every warm start. The
result depends only on the source array's content and on the function that packs it, so the key
is: the source's content digest (blob_store.array_digest; known without hashing when the graph
came from runtime.graph_cache), the caller's tag, a fingerprint of the function (its code and
the values it closes over: tile sizes, shapes, flags) and clglow's code fingerprint.

A function whose closure holds anything this module cannot fingerprint (an arbitrary object) is
never cached: it is computed, as without the cache. Small sources (under MIN_BYTES) are computed
too: their packing costs less than a file. Entries live in ``<clglow cache>/derived``, at most
MAX_BYTES (least recently used go first); a damaged file is ignored and recomputed.

Example::

    arr = derived_cache.compute(src, "packB16t0", fn)   # fn(src), from disk when known
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import logging
import sys
import types
from typing import Any, Callable, Dict, Optional

import numpy as np

from .blob_store import BlobStore, array_digest, code_fingerprint

log = logging.getLogger(__name__)

MIN_BYTES = 64 << 10
MAX_BYTES = 2 << 30
_MAX_DEPTH = 4

_store = BlobStore("derived", MAX_BYTES)
_counts: Dict[str, int] = {"hits": 0, "misses": 0, "uncacheable": 0}


def stats() -> Dict[str, int]:
    """Process-wide counters: hits (read from disk), misses (computed and stored), uncacheable."""
    return dict(_counts)


def store() -> BlobStore:
    """The store behind this cache (tests, `clglow cache`)."""
    return _store


def _value_fp(v: Any, depth: int) -> Optional[str]:
    """A stable text for a closed-over value, or None when it cannot be fingerprinted."""
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, np.ndarray):
        return f"array:{array_digest(v)}"
    if isinstance(v, (np.generic, np.dtype)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, enum.Enum):
        return f"enum:{type(v).__qualname__}.{v.name}"
    if isinstance(v, (tuple, list)):
        parts = [_value_fp(x, depth + 1) for x in v] if depth < _MAX_DEPTH else [None]
        return None if None in parts else f"{type(v).__name__}({','.join(parts)})"  # type: ignore[arg-type]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        parts = [_value_fp(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)]
        return None if None in parts else f"{type(v).__module__}.{type(v).__qualname__}({','.join(parts)})"  # type: ignore[arg-type]
    if isinstance(v, types.FunctionType):
        return function_fingerprint(v, depth + 1)
    if isinstance(v, types.ModuleType):
        return f"module:{v.__name__}"
    if isinstance(v, type):
        return f"type:{v.__module__}.{v.__qualname__}"
    return None


def _code_fp(code: types.CodeType, depth: int) -> Optional[str]:
    consts = []
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if depth >= _MAX_DEPTH:
                return None
            inner = _code_fp(c, depth + 1)
            if inner is None:
                return None
            consts.append(inner)
        else:
            consts.append(repr(c))
    h = hashlib.sha256(code.co_code)
    h.update(repr((code.co_filename, code.co_firstlineno, getattr(code, "co_qualname", code.co_name), code.co_names, consts)).encode())
    return h.hexdigest()


def function_fingerprint(fn: Callable, depth: int = 0) -> Optional[str]:
    """A digest of a Python function's code and of the values it closes over (None when any of
    them cannot be fingerprinted, or `fn` is not a plain Python function)."""
    if not isinstance(fn, types.FunctionType) or depth > _MAX_DEPTH:
        return None
    code = _code_fp(fn.__code__, depth)
    if code is None:
        return None
    parts = [code]
    for cell in fn.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell (a name bound after the function was made)
            return None
        fp = _value_fp(content, depth + 1)
        if fp is None:
            return None
        parts.append(fp)
    for d in (fn.__defaults__ or ()):
        fp = _value_fp(d, depth + 1)
        if fp is None:
            return None
        parts.append(fp)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _key(src: np.ndarray, tag: str, fn: Callable) -> Optional[str]:
    fp = function_fingerprint(fn)
    if fp is None:
        return None
    text = "\n".join([code_fingerprint(), sys.version, np.__version__, array_digest(src), tag, fp])
    return hashlib.sha256(text.encode()).hexdigest()


def compute(src: np.ndarray, tag: str, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``np.ascontiguousarray(fn(src))``, read from the disk cache when a previous process stored
    it (the same content, tag, function and clglow), else computed and stored."""
    key = None
    if isinstance(src, np.ndarray) and src.nbytes >= MIN_BYTES and _store.directory is not None:
        key = _key(src, tag, fn)
        if key is None:
            _counts["uncacheable"] += 1
    if key is None:
        return np.ascontiguousarray(fn(src))
    hit = _store.get(key)
    if hit is not None:
        arr = _array(*hit)
        if arr is not None:
            _counts["hits"] += 1
            return arr
    arr = np.ascontiguousarray(fn(src))
    _counts["misses"] += 1
    if not arr.dtype.hasobject and arr.size:
        _store.put_async(key, {"dtype": arr.dtype.str, "shape": list(arr.shape)}, [memoryview(arr).cast("B")])
    return arr


def _array(header: dict, buffers: list) -> Optional[np.ndarray]:
    try:
        dtype, shape = np.dtype(header["dtype"]), tuple(int(d) for d in header["shape"])
        if len(buffers) != 1 or dtype.hasobject:
            return None
        return np.frombuffer(buffers[0], dtype=dtype).reshape(shape)
    except (KeyError, TypeError, ValueError):
        return None


__all__ = ["compute", "function_fingerprint", "stats", "store", "MIN_BYTES", "MAX_BYTES"]
