"""Every CLGLOW_* environment variable, read in one place."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from .target import FAMILIES


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def device_selector() -> str | None:
    """CLGLOW_DEVICE: `platform:device` (indices or name substrings), `gpu`, `cpu`; else PYOPENCL_CTX."""
    return os.environ.get("CLGLOW_DEVICE") or os.environ.get("PYOPENCL_CTX") or None


def cache_enabled() -> bool:
    """CLGLOW_CACHE=0 disables the on-disk program cache (any other value leaves it on)."""
    return _flag("CLGLOW_CACHE", True)


def cache_forced() -> bool:
    """CLGLOW_CACHE=1 (or on/yes/true) stores binaries even where the driver caches its own
    (pocl); unset or `auto` leaves such drivers to their cache."""
    value = (os.environ.get("CLGLOW_CACHE") or "").strip().lower()
    return value in ("1", "on", "yes", "true", "always")


def cache_dir() -> str | None:
    """CLGLOW_CACHE_DIR overrides the platformdirs cache folder."""
    return os.environ.get("CLGLOW_CACHE_DIR") or None


def tuning_enabled() -> bool:
    """CLGLOW_TUNE=0 skips measuring GEMM tile sizes on a device's first use (defaults instead)."""
    return _flag("CLGLOW_TUNE", True)


def compile_workers() -> int | None:
    """CLGLOW_COMPILE_WORKERS: helper processes that build programs at a cold start on pocl
    (runtime.compile_worker); 0 turns them off. None (unset or not a number): the default."""
    value = (os.environ.get("CLGLOW_COMPILE_WORKERS") or "").strip()
    try:
        return max(0, int(value)) if value else None
    except ValueError:
        return None


def host_fallback() -> bool:
    """CLGLOW_HOST_FALLBACK=0 refuses to place any node on the host."""
    return _flag("CLGLOW_HOST_FALLBACK", True)


def max_tensor_bytes() -> int:
    """CLGLOW_MAX_TENSOR_BYTES caps any single declared tensor (default 16 GiB)."""
    try:
        return int(os.environ.get("CLGLOW_MAX_TENSOR_BYTES", str(16 << 30)))
    except ValueError:
        return 16 << 30


def sub_batch_bytes() -> int | None:
    """CLGLOW_SUB_BATCH_BYTES: the activation bytes per sub-batch piece (runtime.sub_batch); 0
    turns sub-batches off. None (unset or not a number): chosen from the device's cache."""
    value = (os.environ.get("CLGLOW_SUB_BATCH_BYTES") or "").strip()
    try:
        return max(0, int(value)) if value else None
    except ValueError:
        return None


def zero_copy() -> bool:
    """CLGLOW_ZERO_COPY=0 copies every graph input into device memory and every output out of it,
    even on a device whose kernels could read the caller's arrays and write the returned ones in
    place (runtime.executor._zero_copy_binds)."""
    return _flag("CLGLOW_ZERO_COPY", True)


def winograd() -> bool:
    """CLGLOW_WINOGRAD=0 runs stride-1 3x3 convolutions as (implicit) GEMMs instead of Winograd
    F(4x4, 3x3) / F(2x2, 3x3) (lower.winograd), e.g. to compare the two or to rule the
    transforms' rounding out."""
    return _flag("CLGLOW_WINOGRAD", True)


def precision() -> str | None:
    """CLGLOW_PRECISION: `fp32`, `fp16` or `auto` storage of float tensors (passes/precision.py).
    None (unset): fp32."""
    value = (os.environ.get("CLGLOW_PRECISION") or "").strip().lower()
    return value or None


PRECISIONS = ("fp32", "fp16", "auto")


def target_family() -> str | None:
    """CLGLOW_TARGET: force a target family (`cpu`, `gpu`) on any device, e.g. the GPU kernel
    families and policies on pocl (clglow.target.Target.with_family). None: the device's own."""
    value = (os.environ.get("CLGLOW_TARGET") or "").strip().lower()
    return value or None


@dataclass(frozen=True)
class PlanOptions:
    """The behaviour switches that change a plan, fixed per session: part of every plan's cache
    key, read by lowering (LowerCtx.options) and the executor. The environment only gives the
    defaults (`from_env`); `SessionOptions` fields of the same names override them.

    Example::

        PlanOptions.from_env(winograd=False)   # CLGLOW_* defaults, Winograd off
    """

    winograd: bool = True  # CLGLOW_WINOGRAD
    zero_copy: bool = True  # CLGLOW_ZERO_COPY (where the target allows it)
    sub_batch_bytes: Optional[int] = None  # CLGLOW_SUB_BATCH_BYTES (None: from the target's cache)
    target: Optional[str] = None  # CLGLOW_TARGET (None: the device's own family)
    host_fallback: bool = True  # CLGLOW_HOST_FALLBACK
    precision: str = "fp32"  # CLGLOW_PRECISION: as requested ("auto" resolves per device)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r} (CLGLOW_PRECISION or SessionOptions.precision); "
                             f"choose one of {', '.join(PRECISIONS)}")
        if self.target is not None and self.target not in FAMILIES:
            raise ValueError(f"unknown target family {self.target!r} (CLGLOW_TARGET or SessionOptions.target); "
                             f"choose one of {', '.join(FAMILIES)}")

    @classmethod
    def from_env(cls, **overrides) -> "PlanOptions":
        """The CLGLOW_* defaults, with `overrides` (None values ignored) on top."""
        base = dict(winograd=winograd(), zero_copy=zero_copy(), sub_batch_bytes=sub_batch_bytes(),
                    target=target_family(), host_fallback=host_fallback(), precision=precision() or "fp32")
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)
