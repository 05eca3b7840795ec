"""Target profiles: what the rest of clglow may know about a device, queried once.

Why this file exists: lowering, placement and the runtime must choose kernels and policies
from the device's capabilities, never from ``device.type == "cpu"`` or from a tile shape
standing in for "this is a CPU". `query(cl_device)` turns the OpenCL device queries into a
`Target`; everything below reads the Target. Its `family` names the kernel families and
policies that apply (``"cpu"``: register-blocked tiles with one work-item per work-group,
sub-batching, zero-copy on host memory; ``"gpu"``: work-group tiles, copies at the edges).
`CLGLOW_TARGET` (or `SessionOptions.target`) forces a family on any device, so the GPU path
runs and is tested on pocl too (`Target.with_family`).

A Target is a frozen dataclass: plans and the tuner key on it, and a device's tuned GEMM tiles
come back as a new Target (`dataclasses.replace`), never as a mutation.

Example::

    t = query(cl_device)                  # on pocl: Target(family='cpu', ...)
    g = t.with_family("gpu")              # the GPU kernel families on the same device
    g.zero_copy, g.sub_batching           # (False, False)
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional, Tuple

FAMILIES = ("cpu", "gpu")

# LLVM CPU names with AVX-512 (x86): a pocl compiling for another x86 CPU gets float8 math at most.
# This is a fact about pocl's compiler targets (which builtins its vectoriser can lower), used
# for one driver workaround (kernels_cl/vmath.h), never to choose kernels or tiles.
_AVX512_CPUS = ("knl", "knm", "cannonlake", "icelake", "cascadelake", "cooperlake", "tigerlake", "rocketlake",
                "sapphirerapids", "graniterapids", "emeraldrapids", "diamondrapids", "znver4", "znver5",
                "x86-64-v4")


@dataclass(frozen=True)
class Target:
    """One device's capabilities and the family of kernels and policies that apply to it.

    Every field is a device query (or derived from one) except `family`, which defaults to the
    device type's and may be forced, and `gemm_tiles` / `xgemm_tiles`, the tuner's measured choices."""

    name: str = "unknown"
    type: str = "cpu"  # the device's own type: "cpu" | "gpu" | "accelerator"
    family: str = ""  # kernel families and policies: "cpu" | "gpu" ("" = from `type`)
    vendor: str = ""
    platform: str = ""
    driver_version: str = ""
    compute_units: int = 1
    max_work_group_size: int = 256
    max_work_item_sizes: Tuple[int, ...] = (256, 256, 256)
    local_mem_size: int = 32768
    local_mem_type: str = "local"  # "local" (dedicated), "global" (emulated in global memory), "none"
    global_mem_size: int = 1 << 30
    max_alloc_size: int = 1 << 28
    subgroup_sizes: Tuple[int, ...] = ()  # cl_intel_required_subgroup_size sizes where reported
    subgroups: str = ""  # "khr", "intel" or "" (no subgroup extension)
    has_fp16: bool = False
    has_fp64: bool = False
    image_support: bool = False
    preferred_vector_width_float: int = 4
    preferred_vector_width_half: int = 0
    host_unified_memory: bool = False
    float16_math_split: bool = False  # builtin math on float16 as float8 halves (kernels_cl/vmath.h)
    base_align: int = 256  # bytes; sub-buffer offsets must be multiples (CL_DEVICE_MEM_BASE_ADDR_ALIGN)
    cache_bytes: int = 0  # CL_DEVICE_GLOBAL_MEM_CACHE_SIZE (pocl: the CPU's last-level cache); 0 unknown
    gemm_tiles: Optional[tuple] = None  # (MR, VW, NV, local size) measured by runtime.tuning
    # the GPU family's xgemm.cl configuration measured by runtime.tuning, as the ints of
    # lower.gpu_gemm.XgemmConfig.as_tuple() (None: the first of its search space)
    xgemm_tiles: Optional[tuple] = None
    # the device's tuning database entries for this family (runtime.tuning_db, read by
    # runtime.device): ((kernel family, shape key, parameter items), ...); lower.tunable.choose
    # returns them for their shapes, the family's default elsewhere. Part of every plan key.
    tuned: tuple = ()
    # CL_MEM_USE_HOST_PTR buffers are the caller's memory itself (pocl's CPU device uses the
    # pointer as the buffer's storage, unaligned too): kernels may read inputs where they lie
    host_memory: bool = False
    # the driver generates a kernel's machine code per work-group size at its first launch, not
    # when the program is built (pocl): a one-group launch that returns at once while the model
    # loads gets that done early (runtime.preparation, Launch.noop_args)
    codegen_at_first_launch: bool = False
    # the driver builds programs from several threads at once (clBuildProgram is thread-safe, as
    # the OpenCL spec requires); Oclgrind's compiler crashes on concurrent builds (a segfault in
    # clang's code generation), so its builds go one at a time (runtime.device.Device.program)
    concurrent_builds: bool = True
    # `__builtin_prefetch` builds into a kernel the driver can create (probed by building one:
    # runtime/capabilities.py; Oclgrind's interpreter has no llvm.prefetch): where not, programs
    # build with -DCLG_NO_PREFETCH and gemm.cl's prefetches compile to nothing
    prefetch: bool = True

    def __post_init__(self) -> None:
        if not self.family:
            object.__setattr__(self, "family", "cpu" if self.type == "cpu" else "gpu")
        if self.family not in FAMILIES:
            raise ValueError(f"unknown target family {self.family!r}; choose one of {', '.join(FAMILIES)}")

    # -- policies: data, read in one place ------------------------------------------------------
    @property
    def is_cpu_family(self) -> bool:
        """The CPU kernel families apply: register-blocked GEMM tiles, one work-item per
        work-group (a CPU driver runs each group on one thread, its items one after another)."""
        return self.family == "cpu"

    @property
    def has_local_memory(self) -> bool:
        """Dedicated local memory worth staging tiles through (a GPU's shared memory)."""
        return self.local_mem_type == "local" and self.local_mem_size > 0

    @property
    def zero_copy(self) -> bool:
        """Kernels may read graph inputs and write outputs in the caller's arrays: host memory
        used in place, under the CPU family (GPUs that share memory with the host still copy or
        need page-aligned pointers)."""
        return self.host_memory and self.family == "cpu"

    @property
    def sub_batching(self) -> bool:
        """A batch's per-image stretches run a few images at a time so that each layer's output
        is still in the cache for the next (runtime.sub_batch): a CPU-family policy that needs
        the cache size."""
        return self.family == "cpu" and self.cache_bytes > 0

    @property
    def warm_up_launches(self) -> bool:
        """Launch each new kernel once, returning at once, while the model loads (see
        `codegen_at_first_launch`); elsewhere the build has generated the code already."""
        return self.codegen_at_first_launch

    @property
    def group_items(self) -> int:
        """Work-items per work-group for simple one-dimensional kernels (elementwise, movement):
        one per group on the CPU family (the driver pays per group, not per item), else the
        largest power of two up to 256 that the device allows."""
        if self.family == "cpu":
            return 1
        n = 1
        while n * 2 <= min(256, self.max_work_group_size):
            n *= 2
        return n

    def fit_group(self, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """A kernel's preferred work-group shape fitted to this device: each dimension within
        max_work_item_sizes, the product within max_work_group_size (the largest dimension
        halved until it fits). Local sizes are performance choices in clglow's kernels (none
        depends on them), so a shape measured under one family stays correct on any device."""
        dims = [max(1, min(int(d), int(self.max_work_item_sizes[i]) if i < len(self.max_work_item_sizes) else 1))
                for i, d in enumerate(shape)]
        limit = max(1, int(self.max_work_group_size))
        while True:
            total = 1
            for d in dims:
                total *= d
            if total <= limit:
                return tuple(dims)
            i = dims.index(max(dims))
            dims[i] = max(1, dims[i] // 2)

    def with_family(self, family: Optional[str]) -> "Target":
        """This device under another family's kernels and policies (None: unchanged)."""
        if not family or family == self.family:
            return self
        if family not in FAMILIES:
            raise ValueError(f"unknown target family {family!r}; choose one of {', '.join(FAMILIES)}")
        return dataclasses.replace(self, family=family, gemm_tiles=None, xgemm_tiles=None, tuned=())

    def describe(self) -> str:
        """One line for logs and `clglow devices`."""
        sg = f", subgroups {self.subgroups}" + (f" {list(self.subgroup_sizes)}" if self.subgroup_sizes else "") \
            if self.subgroups else ""
        return (f"{self.family} family on {self.name} ({self.type}, {self.compute_units} CU, "
                f"local memory {self.local_mem_size // 1024} KiB {self.local_mem_type}, "
                f"max work-group {self.max_work_group_size}, float vector {self.preferred_vector_width_float}"
                f"{', fp16' if self.has_fp16 else ''}{', fp64' if self.has_fp64 else ''}{sg})")


# --- the queries -------------------------------------------------------------------------------
def device_type(device) -> str:
    """"gpu", "cpu" or "accelerator" for a pyopencl Device."""
    import pyopencl as cl

    t = int(device.type)
    if t & cl.device_type.GPU:
        return "gpu"
    if t & cl.device_type.CPU:
        return "cpu"
    return "accelerator"


def _extensions(device) -> set:
    try:
        return set(str(device.extensions).split())
    except Exception:  # noqa: BLE001 - a driver that fails the query has none worth using
        return set()


def has_fp64(device) -> bool:
    import pyopencl as cl

    if "cl_khr_fp64" in _extensions(device):
        return True
    try:
        return int(device.double_fp_config) != 0
    except cl.Error:
        return False


def _get(device, attr: str, default):
    """One device query, `default` when the driver does not answer it (older OpenCL, bugs)."""
    try:
        return getattr(device, attr)
    except Exception:  # noqa: BLE001 - pyopencl raises LogicError/RuntimeError/AttributeError
        return default


def pocl_target_cpu(device) -> Optional[str]:
    """The LLVM CPU a pocl CPU device compiles for (its version's HSTR, e.g. "...-gnu-znver3"),
    or None for other drivers and targets."""
    m = re.search(r"HSTR:\s*(\S+)", str(_get(device, "version", "")))
    if m is None or "x86_64" not in m.group(1):
        return None
    hstr = m.group(1)
    return hstr.split("-gnu-", 1)[1] if "-gnu-" in hstr else hstr.rsplit("-", 1)[-1]


def _float16_math_split(device) -> bool:
    """Whether builtin math on float16 must run as two float8 halves (kernels_cl/vmath.h): a
    pocl whose compiler targets an x86 CPU without AVX-512 (PyPI's pocl on a Zen 4 compiles for
    znver3 yet reports 16-float vectors)."""
    cpu = pocl_target_cpu(device)
    return cpu is not None and "avx512" not in cpu and not any(cpu.startswith(c) for c in _AVX512_CPUS)


def _local_mem_type(device) -> str:
    import pyopencl as cl

    t = _get(device, "local_mem_type", None)
    if t == cl.device_local_mem_type.LOCAL:
        return "local"
    if t == cl.device_local_mem_type.GLOBAL:
        return "global"
    return "none"


def _subgroups(device, ext: set) -> Tuple[str, Tuple[int, ...]]:
    sizes = tuple(int(s) for s in _get(device, "sub_group_sizes_intel", ()) or ())
    if "cl_intel_subgroups" in ext:
        return "intel", sizes
    if "cl_khr_subgroups" in ext:
        return "khr", sizes
    return "", sizes


def _cache_bytes(device) -> int:
    import pyopencl as cl

    if _get(device, "global_mem_cache_type", cl.device_mem_cache_type.NONE) == cl.device_mem_cache_type.NONE:
        return 0
    return int(_get(device, "global_mem_cache_size", 0))


def _simulator_policies(device) -> dict:
    """Driver workarounds only the driver's identity tells (no query reports them): Oclgrind, the
    OpenCL simulator that checks races and bounds work-item by work-item, builds one program at
    a time (see `concurrent_builds`)."""
    if "oclgrind" not in str(_get(device.platform, "name", "")).lower():
        return {}
    return {"concurrent_builds": False}


def query(device, family: Optional[str] = None) -> Target:
    """The Target of a pyopencl Device (`family`: force one, else the device type's)."""
    dtype = device_type(device)
    ext = _extensions(device)
    split = _float16_math_split(device)
    width = max(1, int(_get(device, "preferred_vector_width_float", 4)))
    subgroups, sizes = _subgroups(device, ext)
    unified = bool(_get(device, "host_unified_memory", False))
    return Target(
        name=str(device.name).strip(), type=dtype, family=family or "", vendor=str(_get(device, "vendor", "")).strip(),
        platform=str(device.platform.name).strip(), driver_version=str(_get(device, "driver_version", "")).strip(),
        compute_units=int(device.max_compute_units), max_work_group_size=int(device.max_work_group_size),
        max_work_item_sizes=tuple(int(s) for s in _get(device, "max_work_item_sizes", (256, 256, 256))),
        local_mem_size=int(device.local_mem_size), local_mem_type=_local_mem_type(device),
        global_mem_size=int(device.global_mem_size), max_alloc_size=int(device.max_mem_alloc_size),
        subgroup_sizes=sizes, subgroups=subgroups, has_fp16="cl_khr_fp16" in ext, has_fp64=has_fp64(device),
        image_support=bool(_get(device, "image_support", False)),
        # the GEMM tiles follow the width the compiler really has (a float16-reporting pocl
        # that compiles 8-float code)
        preferred_vector_width_float=min(width, 8) if split else width,
        preferred_vector_width_half=int(_get(device, "preferred_vector_width_half", 0)),
        host_unified_memory=unified, float16_math_split=split,
        base_align=max(256, int(device.mem_base_addr_align) // 8), cache_bytes=_cache_bytes(device),
        host_memory=unified and dtype == "cpu",
        codegen_at_first_launch="portable computing language" in str(device.platform.name).lower(),
        **_simulator_policies(device))


__all__ = ["Target", "FAMILIES", "query", "device_type", "has_fp64", "pocl_target_cpu"]
