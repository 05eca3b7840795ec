"""The tuning database: the measured parameters of each tunable kernel family, per device and shape.

Why JSON and one file per device: the entries are few (a model has tens of GEMM shapes), a
person may read them (``clglow tune --show`` prints them; ``cat`` works too), and a file per
(platform, device, driver, clglow version) means a driver or clglow upgrade starts a fresh
file instead of trusting numbers measured under other code. sqlite would add locking we get
from one lock file anyway, and an opaque format.

Layout: ``<cache>/tuning/db-<hash>.json`` (the cache folder of runtime/cache.py: platformdirs,
``CLGLOW_CACHE_DIR`` overrides, ``CLGLOW_CACHE=0`` keeps the database in memory only), holding
``{"format": 1, "device": {...}, "entries": {KEY: ENTRY}}``. KEY is
``<target family>/<kernel family>/<kernel source hash>/<shape key>``: a changed ``.cl`` file
(its text with headers) changes its hash, so its old entries are never read again. ENTRY is
``{"params": {...}, "ms": best time, "default": {...}, "default_ms": ..., "at": unix time,
"by": "tune" | "background"}``.

Writes are merge-on-write under an exclusive lock file (``fcntl.flock``; two processes that
store different entries both keep theirs) and atomic (temp file + os.replace: a reader sees the
old file or the new one). A truncated or corrupt file is ignored with a logged warning (its
entries are measured again and the next write replaces it); a malformed entry is skipped the
same way.

Example::

    db = TuningDB.for_device(device)
    db.put(entry_key("cpu", "gemm", src_hash, key), {"params": {...}, "ms": 0.41, ...})
    db.entries()          # {KEY: ENTRY}
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from .. import config
from .._version import __version__
from ..lower.tunable import FAMILIES, params_items
from .cache import atomic_write, default_cache_dir
from .sources import kernel_source

log = logging.getLogger(__name__)

FORMAT = 1
Entry = Dict[str, Any]


def source_hash(text: str) -> str:
    """The short hash of a kernel's source text (with its headers) that keys its entries."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_key(target_family: str, family: str, src_hash: str, shape: str) -> str:
    """One entry's key (see the module docstring)."""
    return f"{target_family}/{family}/{src_hash}/{shape}"


def split_key(key: str) -> Optional[tuple]:
    """(target family, kernel family, source hash, shape key) of an entry key, None if malformed."""
    parts = key.split("/", 3)
    return tuple(parts) if len(parts) == 4 else None


def device_fields(cl_device: Any) -> Dict[str, str]:
    """What keys a device's database file: platform, device, their versions, clglow's version."""
    plat = cl_device.platform
    return {"platform": str(plat.name), "platform_version": str(plat.version), "device": str(cl_device.name),
            "device_version": str(cl_device.version), "driver_version": str(cl_device.driver_version),
            "clglow": __version__}


def _valid_entry(value: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("params"), dict):
        return False
    try:
        float(value.get("ms", 0.0))
    except (TypeError, ValueError):
        return False
    return True


_hashes: Dict[str, str] = {}


def family_hash(family: str) -> str:
    """The source hash of a family's kernel (cached per process)."""
    h = _hashes.get(family)
    if h is None:
        h = _hashes[family] = source_hash(kernel_source(FAMILIES[family].kernel))
    return h


def table_from(db: "TuningDB", target_family: str) -> tuple:
    """The database's entries for `target_family` whose kernels are unchanged, as Target.tuned
    (sorted: equal databases give equal Targets and plan keys)."""
    rows = []
    for k, v in db.entries().items():
        parts = split_key(k)
        if parts is None or parts[0] != target_family or parts[1] not in FAMILIES:
            continue
        if parts[2] != family_hash(parts[1]):
            continue  # measured on another version of the kernel
        rows.append((parts[1], parts[3], params_items(v["params"])))
    return tuple(sorted(rows))


class TuningDB:
    """One device's database file (or an in-memory one when `path` is None)."""

    def __init__(self, path: Optional[Path], fields: Optional[Dict[str, str]] = None):
        self.path = path
        self.fields = dict(fields or {})
        self._memory: Dict[str, Entry] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_device(cls, cl_device: Any) -> "TuningDB":
        """The database of a pyopencl device under the cache folder (in memory with CLGLOW_CACHE=0)."""
        fields = device_fields(cl_device)
        if not config.cache_enabled():
            return cls(None, fields)
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]
        return cls(default_cache_dir() / "tuning" / f"db-{digest}.json", fields)

    # -- reading ---------------------------------------------------------------------------------
    def _read(self) -> Dict[str, Entry]:
        """The file's valid entries; {} (with a warning) when it is missing, truncated or corrupt."""
        if self.path is None:
            return dict(self._memory)
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            log.warning("tuning database %s unreadable (%s): measuring again", self.path, e)
            return {}
        try:
            data = json.loads(raw.decode())
            entries = data["entries"]
            if not isinstance(entries, dict) or data.get("format") != FORMAT:
                raise ValueError("not a clglow tuning database")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            log.warning("tuning database %s is corrupt (%s): ignored, its shapes are measured again",
                        self.path, e)
            return {}
        out: Dict[str, Entry] = {}
        for k, v in entries.items():
            if isinstance(k, str) and split_key(k) is not None and _valid_entry(v):
                out[k] = v
            else:
                log.warning("tuning database %s: malformed entry %r ignored", self.path, k)
        return out

    def entries(self) -> Dict[str, Entry]:
        """Every valid entry, KEY -> ENTRY."""
        with self._lock:
            return self._read()

    def get(self, key: str) -> Optional[Entry]:
        return self.entries().get(key)

    # -- writing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """An exclusive lock across processes (a lock file beside the database)."""
        if self.path is None:
            raise RuntimeError("an in-memory tuning database has no lock file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path) + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX)
            except ImportError:  # pragma: no cover - not POSIX: atomic replace only
                pass
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def put_many(self, new: Dict[str, Entry]) -> None:
        """Store entries, merged into what the file holds now (another process's entries kept).
        A failure to write is logged, never raised: tuning is an optimisation."""
        stamped = {k: dict(v, at=v.get("at", time.time())) for k, v in new.items()}
        with self._lock:
            if self.path is None:
                self._memory.update(stamped)
                return
            try:
                with self._file_lock():
                    merged = self._read()
                    merged.update(stamped)
                    data = {"format": FORMAT, "device": self.fields, "entries": merged}
                    atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
            except OSError as e:
                log.warning("tuning database %s: cannot store %d entr%s (%s)", self.path, len(new),
                            "y" if len(new) == 1 else "ies", e)

    def put(self, key: str, entry: Entry) -> None:
        self.put_many({key: entry})


__all__ = ["TuningDB", "table_from", "family_hash", "Entry", "FORMAT", "entry_key", "split_key", "source_hash", "device_fields"]
