"""Which OpenCL device a selector names: enumeration, the selector grammar, and probing.

Why this file exists: pyopencl's ``create_some_context()`` may prompt on a terminal; clglow
never does. We parse the selector ourselves (CLGLOW_DEVICE, then PYOPENCL_CTX), accept
pyopencl's ``platform:device`` syntax, and say which devices exist when nothing matches. This
module only names devices; runtime.device turns the choice into a shared `Device`.

Enumeration goes through `platforms()`, the one place that first loads the OpenCL driver in
clglow: before it does, runtime.driver_cache gives pocl a checked kernel-cache folder.

Selectors (case-insensitive):
  ``0:1``               platform 0, device 1
  ``portable:pthread``  name substrings of platform and device
  ``nvidia`` / ``1``    a platform (its first device); a name that matches no
                        platform is tried against device names
  ``gpu`` / ``cpu`` / ``accelerator``   the first device of that type
  nothing               the first GPU, else the first device

Example::

    plats = platforms()
    resolve("cpu", plats)              # (0, 0)
    [d.describe() for d in list_devices()]
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import pyopencl as cl

from ..errors import NoDevice
from ..target import device_type, has_fp64
from . import driver_cache
from .build_output import quiet_build

log = logging.getLogger(__name__)

INSTALL_HINT = ('No OpenCL platform found. Install one, e.g. the CPU implementation pocl: '
                '`pip install "pyopencl[pocl]"` or `apt-get install pocl-opencl-icd`.')

TYPE_WORDS = {"gpu": "gpu", "cpu": "cpu", "accelerator": "accelerator", "acc": "accelerator"}

Platforms = List[Tuple[cl.Platform, List[cl.Device]]]

_PROBE_SOURCE = "__kernel void clglow_probe(__global int* a) { a[get_global_id(0)] = 1; }"


def platforms() -> Platforms:
    """Every platform with its devices; [] when no ICD is installed. Never prompts."""
    driver_cache.prepare()  # before the driver reads POCL_CACHE_DIR
    try:
        found = cl.get_platforms()
    except (cl.Error, RuntimeError) as e:  # PLATFORM_NOT_FOUND_KHR: LogicError or RuntimeError
        log.debug("no OpenCL platform: %s", e)
        return []
    out = []
    for p in found:
        try:
            devices = list(p.get_devices())
        except cl.Error as e:  # DEVICE_NOT_FOUND on an empty platform
            log.debug("platform %r has no usable devices: %s", p.name, e)
            devices = []
        out.append((p, devices))
    return out


def has_fp16(device: cl.Device) -> bool:
    """Whether the device reports half-precision arithmetic (cl_khr_fp16)."""
    return "cl_khr_fp16" in device.extensions.split()


@dataclass(frozen=True)
class DeviceDescription:
    """One OpenCL device as `clglow devices` shows it, with the selector that picks it."""

    platform_index: int
    device_index: int
    platform_name: str
    platform_version: str
    name: str
    type: str  # "cpu" | "gpu" | "accelerator"
    compute_units: int
    global_mem_size: int
    max_alloc_size: int
    has_fp16: bool
    has_fp64: bool
    driver_version: str
    opencl_version: str
    selector: str  # exact CLGLOW_DEVICE value, "P:D" by index
    name_selector: Optional[str] = None  # e.g. "portable:pthread", when it picks this device alone

    def describe(self) -> str:
        """One line: name, type, platform, memory, and how to select it."""
        alt = f" or {self.name_selector}" if self.name_selector else ""
        return (f"[{self.selector}] {self.name} ({self.type.upper()}, {self.platform_name}, "
                f"{self.opencl_version}, {self.compute_units} CU, "
                f"{self.global_mem_size / 2**30:.1f} GiB) CLGLOW_DEVICE={self.selector}{alt}")


def _first_word(name: str) -> str:
    words = re.split(r"[\s\-_()@,]+", name.strip().lower())
    return next((w for w in words if w), "")


def list_devices() -> List[DeviceDescription]:
    """Every device of every platform, in (platform, device) index order; [] without OpenCL.

    Example::

        for d in list_devices():
            print(d.describe())
    """
    plats = platforms()
    out = []
    for pi, (p, devices) in enumerate(plats):
        for di, d in enumerate(devices):
            cand = f"{_first_word(p.name)}:{_first_word(d.name)}"
            try:
                name_sel = cand if resolve(cand, plats) == (pi, di) else None
            except NoDevice:
                name_sel = None
            out.append(DeviceDescription(
                platform_index=pi, device_index=di, platform_name=p.name.strip(),
                platform_version=p.version.strip(), name=d.name.strip(), type=device_type(d),
                compute_units=int(d.max_compute_units), global_mem_size=int(d.global_mem_size),
                max_alloc_size=int(d.max_mem_alloc_size), has_fp16=has_fp16(d),
                has_fp64=has_fp64(d), driver_version=d.driver_version.strip(),
                opencl_version=d.version.strip(), selector=f"{pi}:{di}", name_selector=name_sel))
    return out


def available(plats: Platforms) -> str:
    """The devices and their selectors, for error messages."""
    lines = [f"  {pi}:{di}  {d.name.strip()} ({device_type(d)}, {p.name.strip()})"
             for pi, (p, devs) in enumerate(plats) for di, d in enumerate(devs)]
    return "Available devices (CLGLOW_DEVICE=...):\n" + ("\n".join(lines) if lines else "  (none)")


def _pick(part: str, names: Sequence[str], what: str) -> int:
    """Index of `part` among `names`: an integer index, else the first case-insensitive substring match."""
    part = part.strip()
    if re.fullmatch(r"\d+", part):
        idx = int(part)
        if idx >= len(names):
            raise LookupError(f"{what} index {idx} out of range (there are {len(names)})")
        return idx
    low = part.lower()
    for i, n in enumerate(names):
        if low in n.lower():
            return i
    raise LookupError(f"no {what} name contains {part!r}")


def resolve(selector: Optional[str], plats: Platforms) -> Tuple[int, int]:
    """(platform index, device index) for a selector; raises NoDevice listing the choices."""
    if not any(devs for _, devs in plats):
        raise NoDevice(INSTALL_HINT)
    flat = [(pi, di, d) for pi, (_, devs) in enumerate(plats) for di, d in enumerate(devs)]
    sel = (selector or "").strip()
    if not sel:
        gpus = [(pi, di) for pi, di, d in flat if device_type(d) == "gpu"]
        return gpus[0] if gpus else (flat[0][0], flat[0][1])
    word = sel.lower()
    if word in TYPE_WORDS:
        matches = [(pi, di) for pi, di, d in flat if device_type(d) == TYPE_WORDS[word]]
        if not matches:
            raise NoDevice(f"No {TYPE_WORDS[word].upper()} device found for selector {sel!r}.\n"
                           + available(plats))
        return matches[0]
    plat_part, sep, dev_part = sel.partition(":")
    try:
        pi = _pick(plat_part, [p.name for p, _ in plats], "platform") if plat_part.strip() else 0
        devs = plats[pi][1]
        if sep and dev_part.strip():
            return pi, _pick(dev_part, [d.name for d in devs], f"device of platform {pi}")
        if not devs:
            raise LookupError(f"platform {pi} ({plats[pi][0].name.strip()}) has no devices")
        return pi, 0
    except LookupError as e:
        if not sep and not re.fullmatch(r"\d+", plat_part.strip()):
            # A bare name that is no platform's: try it against device names (e.g. "rtx").
            for pi2, di2, d in flat:
                if plat_part.strip().lower() in d.name.lower():
                    return pi2, di2
        raise NoDevice(f"Device selector {sel!r} matches no OpenCL device: {e}.\n"
                       + available(plats)) from None


def candidates(selector: str, plats: Platforms) -> List[Tuple[int, int, cl.Device]]:
    """The devices a default or type-word selector may pick, in the order tried: every device of
    that type, or (no selector) GPUs first, then the others, each in index order."""
    flat = [(pi, di, d) for pi, (_, devs) in enumerate(plats) for di, d in enumerate(devs)]
    word = TYPE_WORDS.get(selector.strip().lower())
    if word is not None:
        return [t for t in flat if device_type(t[2]) == word]
    return sorted(flat, key=lambda t: device_type(t[2]) != "gpu")  # stable: GPUs first


def probe_context(ctx: cl.Context, device: cl.Device) -> Optional[str]:
    """None when `device` builds a trivial kernel in `ctx`, else why not.

    Why: a pocl whose LLVM does not know the host CPU lists a device that cannot compile
    anything ("unknown target CPU 'generic'"); the default choice must skip it.
    """
    try:
        with quiet_build():
            cl.Program(ctx, _PROBE_SOURCE).build(devices=[device], cache_dir=False)
        return None
    except cl.Error as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return next((ln for ln in lines if "error" in ln.lower() and "clBuildProgram" not in ln),
                    lines[-1] if lines else type(e).__name__)


def probe(selector: str) -> Optional[str]:
    """None when the device `selector` picks can build a kernel, else the reason (for `clglow devices`)."""
    plats = platforms()
    pi, di = resolve(selector, plats)
    cl_dev = plats[pi][1][di]
    try:
        ctx = cl.Context([cl_dev])
    except cl.Error as e:
        return f"cannot create a context: {e}"
    return probe_context(ctx, cl_dev)


def device_index(device: cl.Device) -> Optional[str]:
    """The "P:D" index selector of `device` (a compile helper opens the same one), or None."""
    for pi, (_, devs) in enumerate(platforms()):
        for di, d in enumerate(devs):
            if d == device:
                return f"{pi}:{di}"
    return None


def open_index(index: str) -> cl.Device:
    """The device a "P:D" index selector names (compile helpers); NoDevice when there is none."""
    plats = platforms()
    pi, di = resolve(index, plats)
    return plats[pi][1][di]


__all__ = ["INSTALL_HINT", "TYPE_WORDS", "DeviceDescription", "platforms", "list_devices", "available",
           "resolve", "candidates", "probe", "probe_context", "device_index", "open_index", "has_fp16"]
