"""Capabilities no OpenCL query reports, probed by building a tiny kernel on the device.

Why this file exists: the target profile (clglow/target.py) is built from device queries, but a
few things a kernel relies on only show when the driver compiles and creates one. The one probed
here: whether `__builtin_prefetch` (gemm.cl's software prefetches of B and of the next weight
panel) builds into a kernel the driver can create. pocl lowers it to the CPU's prefetch
instruction; Oclgrind's interpreter has no `llvm.prefetch` and refuses to create any kernel of a
program that calls it ("Undefined external function: llvm.prefetch.p1i8"). Where the probe fails,
runtime.device builds every program with -DCLG_NO_PREFETCH (the prefetches compile to nothing:
the same results, no hints). Never decided from a device's or vendor's name.

A probe builds and creates a kernel (0.1-0.3 s on pocl even from its own cache, seconds cold), so
each result is kept per (platform, device, driver version): in this process, and on disk in the
clglow cache folder (`capabilities.json`; CLGLOW_CACHE=0 keeps it in memory only).

Example::

    prefetch_builds(device.context, device.cl_device)   # True on pocl, False on Oclgrind
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Dict

from .. import config
from .cache import atomic_write, default_cache_dir

log = logging.getLogger(__name__)

_PREFETCH_SRC = ("__kernel void clg_probe_prefetch(__global const float* x, __global float* y) {\n"
                 "    __builtin_prefetch(x + 16);\n"
                 "    y[get_global_id(0)] = x[get_global_id(0)];\n"
                 "}\n")
_FILE = "capabilities.json"
_lock = threading.Lock()
_memo: Dict[str, bool] = {}


def _device_key(device) -> str:
    """What a probe's result depends on: the platform, the device and its driver."""
    return " | ".join(str(x).strip() for x in (device.platform.name, device.platform.version, device.name,
                                                device.driver_version))


def _probe_prefetch(context, device) -> bool:
    """Build the probe and create its kernel on `device` (any failure: no prefetch)."""
    import pyopencl as cl

    try:
        prg = cl.Program(context, _PREFETCH_SRC).build(devices=[device])
        cl.Kernel(prg, "clg_probe_prefetch")
        return True
    except Exception as e:  # a build or kernel-creation failure is the answer, not an error
        log.info("capability probe: __builtin_prefetch does not build on %s (%s): gemm.cl without prefetches",
                 str(device.name).strip(), str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return False


def _load() -> dict:
    if not config.cache_enabled():
        return {}
    try:
        data = json.loads((default_cache_dir() / _FILE).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(key: str, value: bool) -> None:
    if not config.cache_enabled():
        return
    data = _load()
    data[f"prefetch::{key}"] = value
    try:
        path = default_cache_dir() / _FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, indent=1, sort_keys=True).encode())
    except OSError:
        log.debug("capabilities: %s not written", _FILE, exc_info=True)


def prefetch_builds(context, device) -> bool:
    """Whether a kernel calling `__builtin_prefetch` builds and is created on `device` (a
    pyopencl Device of `context`): the stored answer, else the probe's."""
    key = _device_key(device)
    with _lock:
        if key in _memo:
            return _memo[key]
        stored = _load().get(f"prefetch::{key}")
        if isinstance(stored, bool):
            _memo[key] = stored
            return stored
        ok = _probe_prefetch(context, device)
        _memo[key] = ok
        _store(key, ok)
        return ok


__all__ = ["prefetch_builds"]
