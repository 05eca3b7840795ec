"""A disk cache of loaded models: the optimized graph, so a warm start skips parse and passes.

Why: for ResNet-50 a warm start spent about 0.5 s of its 0.9 s in onnx's parser, the import
(numpy_helper.to_array of every initializer) and the passes (BatchNorm folded into the convs'
weights in float64). That work is a pure function of the model, of a few session options and
of clglow's code, so InferenceSession keeps its result here and later processes read it.

Key: clglow's code fingerprint (runtime.blob_store.code_fingerprint), the versions of Python,
onnx and numpy, the options that change the result (graph_optimization_level > 0, the tensor
size cap) and the model's identity:

- a file: its real path and its ``stat`` (device, inode, size, modification and change times:
  the change time moves on any write or ``touch`` and cannot be set back), and the same for each
  external-data file it read;
- bytes: their sha256 (about 70 ms for ResNet-50's 100 MB: still far less than parsing);
- an onnx.ModelProto, a model with `weights` given, or a model smaller than MIN_MODEL_BYTES
  (where loading costs little): never cached.

An entry is a pickle (protocol 5) of what the session keeps from loading, its arrays as
out-of-band buffers in a checksummed file (runtime.blob_store: a damaged file is ignored and the
model loaded again), written in the background; the arrays come back writable and aligned. Each
large constant is labelled with the key and its name (`_label_constants`), which runtime.derived_cache
takes as its content digest: packed weights are found without hashing the weights. ``CLGLOW_CACHE=0`` turns it
off. At most MAX_BYTES on disk (least recently used go first).
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx

from ..runtime.blob_store import BlobStore, code_fingerprint, remember_digest

log = logging.getLogger(__name__)

MIN_MODEL_BYTES = 4 << 20
MAX_BYTES = 2 << 30
_DIGEST_MIN_BYTES = 64 << 10  # arrays whose digests are kept (runtime.derived_cache.MIN_BYTES)

_store = BlobStore("graphs", MAX_BYTES)
_counts: Dict[str, int] = {"hits": 0, "misses": 0}


@dataclass
class Loaded:
    """What a session keeps from loading a model."""

    graph: Any  # ir.Graph, optimized
    declared: dict  # input/output name -> ir.Value as imported (before the passes)
    inputs: List[str]
    outputs: List[str]
    meta: dict  # producer, graph name, opsets
    base_dir: Optional[str]


def stats() -> Dict[str, int]:
    """Process-wide counters: hits, misses (loaded and stored)."""
    return dict(_counts)


def store() -> BlobStore:
    """The store behind this cache (tests, `clglow cache`)."""
    return _store


def _stat_text(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def model_key(model: Any, weights: Any, options: tuple) -> Optional[str]:
    """The cache key of loading `model` with `options`, or None when it is not cached."""
    if weights is not None or _store.directory is None:
        return None
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            if len(model) < MIN_MODEL_BYTES:
                return None
            ident = "bytes:" + hashlib.sha256(model).hexdigest()
        elif isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not os.path.isfile(path) or os.path.getsize(path) < MIN_MODEL_BYTES:
                return None
            ident = "file:" + _stat_text(path)
        else:
            return None
    except (OSError, TypeError, ValueError):
        return None
    text = "\n".join([code_fingerprint(), sys.version, onnx.__version__, np.__version__, repr(options), ident])
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: Optional[str]) -> Optional[Loaded]:
    """The entry under `key` (None: absent, damaged, or an external-data file changed)."""
    if key is None:
        return None
    hit = _store.get(key)
    if hit is None:
        return None
    header, buffers = hit
    try:
        for path, stamp in header.get("deps", []):
            if _stat_text(path) != stamp:
                return None
        loaded = pickle.loads(buffers[0], buffers=buffers[1:])
    except Exception as e:  # noqa: BLE001 - an unreadable entry is a miss, never fatal
        log.warning("graph cache: entry %s unreadable (%s); loading the model", key[:12], e)
        return None
    if not isinstance(loaded, Loaded):
        return None
    _label_constants(key, header.get("deps", []), loaded)
    _counts["hits"] += 1
    log.debug("graph cache: %s loaded from the cache", loaded.meta.get("graph"))
    return loaded


def save(key: Optional[str], loaded: Loaded, external: List[str]) -> None:
    """Store `loaded` under `key` (best effort); `external`: the external-data files read."""
    if key is None:
        return
    _counts["misses"] += 1
    buffers: list = []
    try:
        deps = [[p, _stat_text(p)] for p in external]
        body = pickle.dumps(loaded, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
    except Exception as e:  # noqa: BLE001 - a graph that does not pickle is simply not cached
        log.debug("graph cache: %s not stored (%s)", loaded.meta.get("graph"), e)
        return
    _label_constants(key, deps, loaded)
    _store.put_async(key, {"deps": deps}, [body] + views)


def _label_constants(key: str, deps: list, loaded: Loaded) -> None:
    """Give each large constant of the graph a digest made of the graph's key and its name
    (runtime.derived_cache keys packed weights by it): the same key means the same model, code
    and options, hence the same constants, so neither a cold nor a warm start hashes 100 MB of
    weights (sha256: 70 ms for ResNet-50). The external-data files' stamps (`deps`) are part of it:
    the key names the model file only."""
    base = hashlib.sha256(f"{key}\0{deps!r}".encode()).hexdigest()
    for name, v in loaded.graph.values.items():
        if isinstance(v.const, np.ndarray) and v.const.nbytes >= _DIGEST_MIN_BYTES:
            remember_digest(v.const, "graph:" + hashlib.sha256(f"{base}\0{name}".encode()).hexdigest())


# --- the programs a model's plan asked for (warm starts build them while the model loads) -------
def programs_key(key: Optional[str], device_identity: str, options: tuple) -> Optional[str]:
    """The key of the program list of graph `key` on one device with `options` (plan options)."""
    if key is None:
        return None
    return hashlib.sha256("\n".join([key, device_identity, repr(options)]).encode()).hexdigest()


def load_programs(key: Optional[str]) -> List[Tuple[str, Tuple[str, ...]]]:
    """The (program, options) pairs stored under `key` (empty when none)."""
    hit = _store.get(key) if key is not None else None
    if hit is None:
        return []
    try:
        return [(str(n), tuple(str(o) for o in opts)) for n, opts in hit[0]["programs"]]
    except (KeyError, TypeError, ValueError):
        return []


def save_programs(key: Optional[str], programs: Sequence[Tuple[str, Sequence[str]]],
                  known: Sequence[Tuple[str, Sequence[str]]] = ()) -> None:
    """Store the program list under `key` unless it is the one already `known` there."""
    programs = [(n, tuple(o)) for n, o in programs]
    if key is None or not programs or programs == [(n, tuple(o)) for n, o in known]:
        return
    _store.put(key, {"programs": [[n, list(o)] for n, o in programs]}, [])


__all__ = ["Loaded", "model_key", "load", "save", "programs_key", "load_programs", "save_programs", "stats", "store", "MIN_MODEL_BYTES", "MAX_BYTES"]
