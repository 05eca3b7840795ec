"""The OpenCL driver's own kernel cache (pocl's ``POCL_CACHE_DIR``): owned and checked by clglow.

Why this file exists: pocl trusts its cache. A truncated or damaged file in it (a process killed
while pocl wrote, a full disk, a crash before the data reached the disk) makes pocl abort the
process that reads it (``pocl_llvm_build.cc: Assertion program->data[device_i] failed``, or a
failed ``dlopen`` of a kernel's ``.so``), and every later process too: a damaged cache entry is
a crash on every start. clglow therefore checks the folder before the driver is loaded, once per
process (`prepare`, called by runtime.selection before the first ``clGetPlatformIDs``):

- Where pocl's cache goes: ``<clglow cache>/pocl`` unless the user set ``POCL_CACHE_DIR`` (then
  theirs); ``CLGLOW_CACHE=0`` leaves pocl to its default folder. The folder is set in the
  environment before pocl reads it, so compile helpers (runtime.compile_worker) inherit it.
- Every file is checked once for the damage a crash or a full disk leaves: LLVM bitcode
  (``program.bc``) must hold whole top-level blocks; an ELF file (a kernel's ``.so``) must hold its
  program and section headers and every segment and section they name. A file that passes is
  remembered in a manifest in the folder (``clglow-manifest.json``: path, size, modification
  time), so a warm start only lists the folder; a file that is new or changed is checked again.
- A program whose files fail is dropped (its ``XX/<hash>`` folder removed, logged as a warning):
  pocl builds it again, and clglow's "prepared" markers are cleared so the compile helpers
  rebuild it at the next cold start. A damaged cache costs a rebuild, never a crash.

Cost: listing the folder (a stat per file) at every start; at the first start after new
programs were built, reading those files once (about 1.5 MB for ResNet-50's 40 files).

Example::

    report = check(Path("~/.cache/clglow/pocl").expanduser())
    report.checked, report.dropped        # (40, [])
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .. import config
from .build_output import report_leftovers
from .cache import atomic_write, default_cache_dir, prepared_dir

log = logging.getLogger(__name__)

MANIFEST = "clglow-manifest.json"
_VERSION = 1
_BITCODE = b"BC\xc0\xde"
_BITCODE_WRAPPER = 0x0B17C0DE
_MODULE_BLOCK = 8  # LLVM's MODULE_BLOCK_ID: a file without one holds no program
_ELF = b"\x7fELF"
_CHECKED_SUFFIXES = (".bc", ".so", ".o")  # named like compiled code: checked even without a magic

_lock = threading.Lock()
_driver_dir: Optional[Path] = None
_done = False


@dataclass
class Report:
    """What one check of a driver cache folder found."""

    root: Path
    files: int = 0  # files listed
    checked: int = 0  # files read and checked (new or changed since the last check)
    dropped: List[str] = field(default_factory=list)  # program folders removed (relative paths)


# --- the file checks ---------------------------------------------------------------------------
def bitcode_complete(data: bytes) -> bool:
    """Whether `data` is LLVM bitcode whose top-level blocks all fit: a truncated file ends
    inside a block (each block header carries its length in 32-bit words)."""
    if len(data) >= 20 and struct.unpack_from("<I", data, 0)[0] == _BITCODE_WRAPPER:
        _, _, offset, size = struct.unpack_from("<IIII", data, 0)
        if offset + size > len(data):
            return False
        data = data[offset:offset + size]
    if not data.startswith(_BITCODE) or len(data) % 4:
        return False
    end = len(data) * 8
    pos = 32  # after the magic; the top level reads 2-bit abbreviation ids
    module = False
    while pos < end:
        if end - pos < 32 and not any(data[pos // 8:]):
            break  # zero padding to the word boundary
        abbrev, pos = _bits(data, pos, 2)
        if abbrev != 1:  # only ENTER_SUBBLOCK is valid at the top level
            return False
        block, pos = _vbr(data, pos, 8)
        _, pos = _vbr(data, pos, 4)  # the block's abbreviation width
        pos = (pos + 31) // 32 * 32
        if pos + 32 > end:
            return False
        words, pos = _bits(data, pos, 32)
        pos += words * 32
        if pos > end or not words:
            return False
        module = module or block == _MODULE_BLOCK
    return module


def _bits(data: bytes, pos: int, n: int) -> Tuple[int, int]:
    """`n` bits at bit `pos` (LLVM's bitstream: little-endian, low bits first) and the new pos."""
    first, last = pos // 8, (pos + n + 7) // 8
    chunk = int.from_bytes(data[first:last], "little")
    return (chunk >> (pos % 8)) & ((1 << n) - 1), pos + n


def _vbr(data: bytes, pos: int, n: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while shift < 64:
        piece, pos = _bits(data, pos, n)
        value |= (piece & ((1 << (n - 1)) - 1)) << shift
        if not piece >> (n - 1):
            return value, pos
        shift += n - 1
    return value, pos


def elf_complete(data: bytes) -> bool:
    """Whether `data` is an ELF file that holds its program and section headers and every
    segment and section they describe, with a string table where the header says (a file cut
    short or zeroed from some point on fails)."""
    if len(data) < 52 or not data.startswith(_ELF) or data[4] not in (1, 2) or data[5] not in (1, 2):
        return False
    wide, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide and len(data) < 64:
        return False
    if wide:
        phoff, shoff = struct.unpack_from(end + "QQ", data, 0x20)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(end + "HHHHH", data, 0x36)
    else:
        phoff, shoff = struct.unpack_from(end + "II", data, 0x1C)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(end + "HHHHH", data, 0x2A)
    size = len(data)
    if phnum and phoff + phnum * phentsize > size:
        return False
    for i in range(phnum):  # PT_LOAD segments must lie in the file
        at = phoff + i * phentsize
        if wide:
            ptype, = struct.unpack_from(end + "I", data, at)
            offset, filesz = struct.unpack_from(end + "Q", data, at + 8)[0], struct.unpack_from(end + "Q", data, at + 32)[0]
        else:
            ptype, offset = struct.unpack_from(end + "II", data, at)
            filesz, = struct.unpack_from(end + "I", data, at + 16)
        if ptype == 1 and offset + filesz > size:
            return False
    if not shnum:
        return phnum > 0
    if shoff + shnum * shentsize > size or shstrndx >= shnum:
        return False
    for i in range(shnum):
        at = shoff + i * shentsize
        if wide:
            stype, = struct.unpack_from(end + "I", data, at + 4)
            offset, length = struct.unpack_from(end + "QQ", data, at + 24)
        else:
            stype, = struct.unpack_from(end + "I", data, at + 4)
            offset, length = struct.unpack_from(end + "II", data, at + 16)
        if i == shstrndx and stype != 3:  # SHT_STRTAB: a zeroed section table fails here
            return False
        if stype != 8 and i and offset + length > size:  # SHT_NOBITS takes no file space
            return False
    return True


def file_intact(path: Path) -> bool:
    """Whether one file of the driver's cache looks whole: bitcode and ELF files are checked,
    other files (logs, time stamps) are taken as they are."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data.startswith(_ELF):
        return elf_complete(data)
    if data.startswith(_BITCODE) or data[:4] == struct.pack("<I", _BITCODE_WRAPPER):
        return bitcode_complete(data)
    return not path.name.endswith(_CHECKED_SUFFIXES)


# --- the folder --------------------------------------------------------------------------------
def _load_manifest(root: Path) -> Dict[str, List[int]]:
    try:
        data = json.loads((root / MANIFEST).read_text())
        if data.get("version") == _VERSION and isinstance(data.get("files"), dict):
            return {str(k): list(v) for k, v in data["files"].items()}
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # absent or damaged: every file is checked again
    return {}


def _listing(root: Path) -> Dict[str, Tuple[int, int]]:
    """relative path -> (size, mtime in ns) of every compiled file (``.bc``, ``.so``, ``.o``) under
    a program folder (XX/<hash>/...); the top level holds pocl's temporary files and our manifest,
    and pocl touches other files (``last_accessed``) at every use."""
    out: Dict[str, Tuple[int, int]] = {}
    stack = []
    with os.scandir(root) as top:
        stack.extend((e.path, e.name) for e in top if e.is_dir(follow_symlinks=False))
    while stack:
        path, rel = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            name = rel + os.sep + e.name
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, name))
                elif e.name.endswith(_CHECKED_SUFFIXES):
                    st = e.stat(follow_symlinks=False)
                    out[name] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue
    return out


def _program_of(rel: str) -> str:
    """The program folder (XX/<hash>) a cache file belongs to."""
    parts = Path(rel).parts
    return os.path.join(*parts[:2]) if len(parts) >= 2 else parts[0]


def check(root: Path) -> Report:
    """Check every file under `root` (pocl's cache layout) that is new or changed since the last
    check, drop the programs with a damaged file, and update the manifest. Never raises for a
    damaged or unreadable cache."""
    report = Report(root)
    if not root.is_dir():
        return report
    known = _load_manifest(root)
    listing = _listing(root)
    report.files = len(listing)
    good: Dict[str, List[int]] = {}
    damaged = set()
    for rel, stamp in listing.items():
        if known.get(rel) == list(stamp):
            good[rel] = list(stamp)
            continue
        report.checked += 1
        if file_intact(root / rel):
            good[rel] = list(stamp)
        else:
            damaged.add(_program_of(rel))
    for prog in sorted(damaged):
        log.debug("driver kernel cache: dropping %s (a damaged or truncated file)", root / prog)
        shutil.rmtree(root / prog, ignore_errors=True)
        report.dropped.append(prog)
    if damaged:
        log.warning("driver kernel cache %s: %d program(s) with a damaged or truncated file dropped; "
                    "they will be built again", root, len(damaged))
        good = {k: v for k, v in good.items() if _program_of(k) not in damaged}
    if good != known:
        try:
            atomic_write(root / MANIFEST, json.dumps({"version": _VERSION, "files": good}).encode())
        except OSError as e:
            log.debug("driver kernel cache: cannot write the manifest in %s (%s)", root, e)
    return report


def default_pocl_dir() -> Path:
    """The folder pocl uses when ``POCL_CACHE_DIR`` is unset (its own default)."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "pocl" / "kcache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "pocl" / "kcache"


def owned_dir() -> Path:
    """The folder clglow gives pocl for its kernel cache when the user chose none."""
    return default_cache_dir() / "pocl"


def clear_owned() -> Tuple[int, int]:
    """Empty the pocl cache folder clglow owns (`clglow cache clear`) and the "prepared" markers
    that point into it; a user's own POCL_CACHE_DIR is left alone. Returns (files, bytes) removed."""
    root = owned_dir()
    files = nbytes = 0
    if root.is_dir():
        for p in root.rglob("*"):
            if p.is_file():
                files += 1
                nbytes += p.stat().st_size
        shutil.rmtree(root, ignore_errors=True)
    _forget_prepared()
    return files, nbytes


def pocl_cache_dir() -> Optional[Path]:
    """The folder pocl's kernel cache is in for this process (None when pocl's cache is off)."""
    if os.environ.get("POCL_KERNEL_CACHE", "1").strip() in ("0", ""):
        return None
    chosen = os.environ.get("POCL_CACHE_DIR")
    return Path(chosen).expanduser() if chosen else default_pocl_dir()


def _driver_loaded() -> bool:
    """Whether an OpenCL driver library (pocl) is already loaded in this process: then setting
    POCL_CACHE_DIR now would part this process's cache from its compile helpers'."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return "libpocl" in f.read()
    except OSError:
        return False  # no /proc: the first clglow call is taken to come before the driver's


def prepare(check_cache: bool = True) -> Optional[Path]:
    """Once per process, before the OpenCL driver is loaded: give pocl clglow's cache folder
    (unless POCL_CACHE_DIR is set, CLGLOW_CACHE=0, or the driver is loaded already) and check
    the folder pocl will use (`check`). Returns that folder (None: pocl's cache off). Best
    effort: an unreadable folder is left to the driver."""
    global _done, _driver_dir
    with _lock:
        if _done:
            return _driver_dir
        _done = True
        if check_cache:
            report_leftovers()  # what a clglow process that crashed in a build left unsaid
        if not os.environ.get("POCL_CACHE_DIR") and config.cache_enabled() and not _driver_loaded():
            os.environ["POCL_CACHE_DIR"] = str(owned_dir())
        root = pocl_cache_dir()
        _driver_dir = root
    if root is not None and check_cache:
        try:
            report = check(root)
        except OSError as e:
            log.debug("driver kernel cache %s not checked: %s", root, e)
            return root
        if report.dropped:
            _forget_prepared()
        log.debug("driver kernel cache %s: %d files, %d checked, %d programs dropped", root,
                  report.files, report.checked, len(report.dropped))
    return root


def _forget_prepared() -> None:
    """Remove clglow's "prepared" markers (runtime.preparation): they say a program is in the
    driver's cache, which is no longer true for the programs dropped."""
    if config.cache_enabled():
        shutil.rmtree(prepared_dir(), ignore_errors=True)


__all__ = ["Report", "check", "prepare", "owned_dir", "clear_owned", "pocl_cache_dir", "default_pocl_dir", "file_intact",
           "bitcode_complete", "elf_complete", "MANIFEST"]
