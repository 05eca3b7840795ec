"""Kernel sources: the ``kernels_cl/*.cl`` files, with their headers spliced in.

Why this file exists: every build (a session's, a compile helper's, the tuner's) must see the
same program text, so that the program cache's key (a hash of the text) and the driver's own
cache key agree between processes. Headers are inlined here rather than found by the driver
through ``-I``: no path in the build options (an install path with spaces would not survive the
driver's option parsing), and editing a header changes the text, hence the keys.

Example::

    src = kernel_source("gemm")        # gemm.cl with vmath.h etc. inlined
    kernels_dir()                      # the folder they come from
"""
from __future__ import annotations

import re
import threading
from importlib import resources
from pathlib import Path
from typing import Dict

from ..errors import InvalidArgument

_KERNEL_NAME = re.compile(r"[A-Za-z0-9_]+")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([A-Za-z0-9_.]+\.(?:h|clh))"[ \t]*$', re.M)
_source_cache: Dict[str, str] = {}
_lock = threading.Lock()


def _kernels_root():
    """The kernels_cl folder as a Traversable: the installed package data, else the checkout's."""
    try:
        return resources.files("clglow.kernels_cl")
    except (ModuleNotFoundError, TypeError):
        # Source checkout on PYTHONPATH: kernels_cl/ sits beside the clglow package.
        return Path(__file__).resolve().parents[2] / "kernels_cl"


def kernels_dir():
    """Where the ``.cl`` files are (a Traversable; a Path in a wheel or a checkout)."""
    return _kernels_root()


def kernel_source(name: str) -> str:
    """The text of ``kernels_cl/<name>.cl`` with its ``#include "x.h"`` headers (from the same
    folder) spliced in; FileNotFoundError when absent, InvalidArgument for a name that is not
    a plain identifier (no paths)."""
    if not _KERNEL_NAME.fullmatch(name):
        raise InvalidArgument(f"invalid kernel program name {name!r}")
    with _lock:
        src = _source_cache.get(name)
    if src is None:
        root = _kernels_root()
        f = root / f"{name}.cl"
        if not f.is_file():
            raise FileNotFoundError(f"kernel source {name}.cl not found in {root}")
        src = _splice_headers(f.read_text(encoding="utf-8"), f"{name}.cl", set())
        with _lock:
            _source_cache[name] = src
    return src


def clear_cache() -> None:
    """Forget the texts read so far (tests that edit kernels; a reloaded checkout)."""
    with _lock:
        _source_cache.clear()


def _splice_headers(text: str, where: str, seen: set) -> str:
    """Replace each ``#include "x.h"`` line by the header's text (each header once per program)."""
    root = _kernels_root()

    def one(m: "re.Match[str]") -> str:
        hname = m.group(1)
        if hname in seen:
            return f"/* {hname} already included */"
        h = root / hname
        if not h.is_file():
            raise FileNotFoundError(f"{where} includes {hname}, not found in {root}")
        seen.add(hname)
        body = _splice_headers(h.read_text(encoding="utf-8"), hname, seen)
        return f"/* begin {hname} */\n{body}\n/* end {hname} */"
    return _INCLUDE.sub(one, text)


__all__ = ["kernel_source", "kernels_dir", "clear_cache"]
