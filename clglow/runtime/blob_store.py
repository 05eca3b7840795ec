"""A size-bounded on-disk store of host data (arrays, pickles) for warm starts.

Why this file exists: a warm start of a large model spent most of its time redoing host work
whose result depends only on inputs that do not change between processes: parsing the model and
running the passes (frontend.graph_cache) and packing the weights (runtime.derived_cache). Both
keep their results here, in the clglow cache folder (``CLGLOW_CACHE_DIR``; ``CLGLOW_CACHE=0``
turns the store off, as it does the program cache).

- Keys are sha256 digests the caller builds from everything the result depends on, always
  including `code_fingerprint()` (clglow's version and the size and time stamp of each of its
  source files), so a changed clglow never reads an old entry.
- Files are written atomically (temporary file + os.replace); each holds a header (JSON) and a
  payload of aligned buffers, each with a checksum, so a torn, truncated or damaged file is
  detected on read, removed and recomputed by the caller, never fatal.
- Each folder is bounded (`max_bytes`): after a write the least recently used files go (a hit
  touches its file).

File layout: ``MAGIC + u64 header length + u32 CRC-32 of the header + header JSON + padding +
buffers`` (each buffer at a multiple of `ALIGN` bytes from the start; the header lists their sizes
and checksums). Entries are read through a copy-on-write memory map: nothing is copied until used.

Example::

    store = BlobStore("derived", 1 << 30)
    store.put(key, {"dtype": "<f4", "shape": [3]}, [arr.data])
    header, buffers = store.get(key)        # or None
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import mmap
import os
import struct
import threading
import time
import weakref
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import config
from .._version import __version__
from .cache import atomic_write, default_cache_dir

log = logging.getLogger(__name__)

MAGIC = b"CLGLOWST"
ALIGN = 128
_SUFFIX = ".blob"
_HEAD = struct.Struct("<QI")  # header length, CRC-32 of the header
_BLOCK_WORDS = 1024
_STALE_TMP_S = 3600.0

_fp_lock = threading.Lock()
_fingerprint: Optional[str] = None


def code_fingerprint() -> str:
    """A digest of clglow's version and of every source file of the package (path, size,
    modification time): computed once per process; any edit of clglow invalidates every entry."""
    global _fingerprint
    with _fp_lock:
        if _fingerprint is None:
            root = Path(__file__).resolve().parent.parent
            items: List[str] = [__version__]
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for name in sorted(filenames):
                    if name.endswith((".py", ".cl", ".h")):
                        st = os.stat(os.path.join(dirpath, name))
                        items.append(f"{os.path.relpath(os.path.join(dirpath, name), root)}:{st.st_size}:"
                                     f"{st.st_mtime_ns}")
            kernels = root.parent / "kernels_cl"
            if kernels.is_dir():
                for p in sorted(kernels.iterdir()):
                    st = p.stat()
                    items.append(f"kernels_cl/{p.name}:{st.st_size}:{st.st_mtime_ns}")
            _fingerprint = hashlib.sha256("\n".join(items).encode()).hexdigest()
        return _fingerprint


# --- content digests of arrays -------------------------------------------------------------------
_digests: Dict[int, Tuple[weakref.ref, str]] = {}
_digest_lock = threading.RLock()  # re-entrant: a weakref callback may run inside it (GC)


def remember_digest(arr: np.ndarray, digest: str) -> None:
    """Record `arr`'s content digest (known from where it was read), so `array_digest` need not
    hash it again."""
    key = id(arr)
    try:
        ref = weakref.ref(arr, lambda r: _forget(key, r))
    except TypeError:
        return
    with _digest_lock:
        _digests[key] = (ref, digest)


def _forget(key: int, ref: weakref.ref) -> None:
    with _digest_lock:
        hit = _digests.get(key)
        if hit is not None and hit[0] is ref:
            del _digests[key]


def array_digest(arr: np.ndarray) -> str:
    """sha256 of an array's dtype, shape and bytes (recorded ones are reused)."""
    with _digest_lock:
        hit = _digests.get(id(arr))
    if hit is not None and hit[0]() is arr:
        return hit[1]
    data = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{data.dtype.str}{data.shape}".encode())
    h.update(memoryview(data).cast("B") if data.size else b"")
    digest = h.hexdigest()
    remember_digest(arr, digest)
    return digest


def checksum(buf: memoryview | bytes) -> str:
    """A digest of a buffer that costs one numpy pass over it (CRC-32 or sha256 would cost 5-7
    times more: 60-70 ms for ResNet-50's weights): sha256 of the 64-bit sums of its 8 KiB blocks
    and of its tail. Detects flipped bits, zeroed or garbled ranges and moved blocks; not an
    adversary (the cache folder is the user's own)."""
    v = memoryview(buf).cast("B")
    words = len(v) // 8
    whole = words // _BLOCK_WORDS * _BLOCK_WORDS
    h = hashlib.sha256(struct.pack("<Q", len(v)))
    if whole:
        sums = np.frombuffer(v, np.uint64, count=whole).reshape(-1, _BLOCK_WORDS).sum(axis=1, dtype=np.uint64)
        h.update(sums.tobytes())
    if words > whole:
        h.update(np.frombuffer(v, np.uint64, count=words - whole, offset=whole * 8).sum(dtype=np.uint64).tobytes())
    h.update(bytes(v[words * 8:]))
    return h.hexdigest()[:32]


def _map(path: Path) -> Optional[mmap.mmap]:
    """The file mapped copy-on-write (arrays made from it are writable; the file never changes:
    entries are replaced whole, never written in place). None for an empty file."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)


_pending_lock = threading.Lock()
_pending: Dict[str, "concurrent.futures.Future"] = {}
_writer: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _wait_pending(path: Path) -> None:
    with _pending_lock:
        fut = _pending.get(str(path))
    if fut is not None:
        concurrent.futures.wait([fut])


def _done_pending(path: str, fut: "concurrent.futures.Future") -> None:
    with _pending_lock:
        if _pending.get(path) is fut:
            del _pending[path]


def flush() -> None:
    """Wait for every background write (`BlobStore.put_async`) started so far."""
    with _pending_lock:
        futures = list(_pending.values())
    concurrent.futures.wait(futures)


def _touch(path: Path) -> None:
    """Mark an entry used now, to the nanosecond (the least recently used go first; a file
    system's own time stamps may be a clock tick coarse)."""
    now = time.time_ns()
    try:
        os.utime(path, ns=(now, now))
    except OSError:
        pass


def _pad(n: int) -> int:
    return (-n) % ALIGN


class BlobStore:
    """One folder of the cache: entries of a header and buffers, keyed by a hex digest."""

    def __init__(self, name: str, max_bytes: int, root: Optional[Path] = None):
        self.name = name
        self.max_bytes = int(max_bytes)
        self._root = root

    @property
    def directory(self) -> Optional[Path]:
        """The folder, or None when the clglow cache is off (CLGLOW_CACHE=0)."""
        if not config.cache_enabled():
            return None
        return (self._root if self._root is not None else default_cache_dir()) / self.name

    def get(self, key: str) -> Optional[Tuple[dict, List[memoryview]]]:
        """(header, buffers) of entry `key`, or None when absent or damaged (then removed)."""
        d = self.directory
        if d is None:
            return None
        path = d / (key + _SUFFIX)
        _wait_pending(path)  # this process writing it in the background: read what it wrote
        try:
            mapped = _map(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("%s cache: cannot read %s (%s); recomputing", self.name, path, e)
            return None
        parsed = None if mapped is None else self._parse(memoryview(mapped))
        if parsed is None:
            log.warning("%s cache: ignoring %s (damaged or truncated); recomputing", self.name, path.name)
            try:
                path.unlink()
            except OSError:
                pass
            return None
        _touch(path)
        return parsed

    @staticmethod
    def _parse(data: memoryview) -> Optional[Tuple[dict, List[memoryview]]]:
        size = len(data)
        head = len(MAGIC) + _HEAD.size
        if size < head or bytes(data[:len(MAGIC)]) != MAGIC:
            return None
        hlen, hcrc = _HEAD.unpack_from(data, len(MAGIC))
        if head + hlen > size or zlib.crc32(data[head:head + hlen]) != hcrc:
            return None
        try:
            header = json.loads(bytes(data[head:head + hlen]))
            sizes = [int(s) for s in header["sizes"]]
            sums = [str(c) for c in header["sums"]]
        except (ValueError, KeyError, TypeError):
            return None
        at = head + hlen + _pad(head + hlen)
        if len(sums) != len(sizes) or any(s < 0 for s in sizes) or at + sum(s + _pad(s) for s in sizes) != size:
            return None
        buffers = []
        for s, c in zip(sizes, sums):
            buf = data[at:at + s]
            if checksum(buf) != c:
                return None
            buffers.append(buf)
            at += s + _pad(s)
        return header, buffers

    def put(self, key: str, header: dict, buffers: Sequence[memoryview | bytes]) -> bool:
        """Store an entry (atomically; best effort: False when it could not be written)."""
        d = self.directory
        return False if d is None else self._put(d, key, header, buffers)

    def _put(self, d: Path, key: str, header: dict, buffers: Sequence[memoryview | bytes]) -> bool:
        views = [memoryview(b).cast("B") for b in buffers]
        hdr = json.dumps(dict(header, sizes=[len(v) for v in views], sums=[checksum(v) for v in views])).encode()
        pre = MAGIC + _HEAD.pack(len(hdr), zlib.crc32(hdr)) + hdr
        parts: List[memoryview | bytes] = [pre, bytes(_pad(len(pre)))]
        for v in views:
            parts += [v, bytes(_pad(len(v)))]
        try:
            atomic_write(d / (key + _SUFFIX), parts)
            _touch(d / (key + _SUFFIX))
        except OSError as e:
            log.warning("%s cache: cannot write in %s (%s); continuing without it", self.name, d, e)
            return False
        self._evict(d)
        return True

    def put_async(self, key: str, header: dict, buffers: Sequence[memoryview | bytes]) -> None:
        """`put` on a background thread (checksums and the file write off the caller's path: a
        cold start of ResNet-50 writes 200 MB). The buffers must not change until written;
        `get` of the same key in this process waits for the write; so does the process's exit."""
        d = self.directory
        if d is None:
            return
        path = d / (key + _SUFFIX)
        with _pending_lock:
            global _writer
            if _writer is None:
                _writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clglow-cache-write")
            fut = _writer.submit(self._put, d, key, header, list(buffers))  # the folder as of now
            _pending[str(path)] = fut
        fut.add_done_callback(lambda f, p=str(path): _done_pending(p, f))

    def _evict(self, d: Path) -> None:
        """Remove the least recently used entries while the folder holds more than max_bytes."""
        stale = time.time() - _STALE_TMP_S
        try:
            entries = []
            for e in os.scandir(d):
                st = e.stat()
                if e.name.endswith(_SUFFIX):
                    entries.append((st.st_mtime_ns, st.st_size, e.path))
                elif e.name.startswith(".tmp-") and st.st_mtime < stale:  # a process killed mid-write
                    os.unlink(e.path)
        except OSError:
            return
        total = sum(s for _, s, _ in entries)
        for _, s, p in sorted(entries):
            if total <= self.max_bytes:
                break
            try:
                os.unlink(p)
                total -= s
                log.debug("%s cache: evicted %s", self.name, p)
            except OSError:
                pass

    def usage(self) -> Tuple[int, int]:
        """(entries, bytes) in the folder."""
        d = self.directory
        count = size = 0
        if d is not None and d.is_dir():
            for p in d.glob("*" + _SUFFIX):
                try:
                    size += p.stat().st_size
                    count += 1
                except OSError:
                    pass
        return count, size

    def clear(self) -> int:
        """Remove every entry; returns how many."""
        d = self.directory
        removed = 0
        if d is not None and d.is_dir():
            for p in d.iterdir():
                if p.suffix == _SUFFIX or p.name.startswith(".tmp-"):
                    try:
                        p.unlink()
                        removed += p.suffix == _SUFFIX
                    except OSError:
                        pass
        return removed


__all__ = ["BlobStore", "flush", "code_fingerprint", "array_digest", "remember_digest", "MAGIC", "ALIGN"]
