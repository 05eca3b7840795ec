"""Target profiles (clglow/target.py): the queries, the family and the policies read from them."""
from __future__ import annotations

import dataclasses

import pytest

from clglow.target import FAMILIES, Target, query


def test_family_defaults_to_the_device_type():
    assert Target(type="cpu").family == "cpu"
    assert Target(type="gpu").family == "gpu"
    assert Target(type="accelerator").family == "gpu"  # work-group tiles: correct on anything
    with pytest.raises(ValueError, match="cpu, gpu"):
        Target(type="cpu", family="tpu")
    assert FAMILIES == ("cpu", "gpu")


def test_policies_follow_the_family_and_the_capabilities():
    pocl_like = Target(type="cpu", host_unified_memory=True, host_memory=True, cache_bytes=32 << 20,
                       gemm_tiles=(12, 16, 2, (1, 1, 1)), max_work_group_size=4096)
    assert pocl_like.zero_copy and pocl_like.sub_batching and pocl_like.group_items == 1
    gpu = pocl_like.with_family("gpu")
    assert gpu.family == "gpu" and gpu.type == "cpu"  # the device is the same; the kernels are not
    assert not gpu.zero_copy and not gpu.sub_batching and gpu.group_items == 256
    assert gpu.gemm_tiles is None  # one family's measured tiles never carry over to another
    assert gpu.with_family("cpu").zero_copy and pocl_like.with_family(None) is pocl_like
    assert not Target(type="cpu", cache_bytes=0).sub_batching
    assert not Target(type="cpu", host_memory=False).zero_copy
    assert Target(type="gpu", max_work_group_size=64).group_items == 64
    with pytest.raises(ValueError):
        pocl_like.with_family("npu")


def test_local_memory_is_judged_by_its_type():
    assert Target(local_mem_type="local", local_mem_size=49152).has_local_memory
    assert not Target(local_mem_type="global", local_mem_size=1 << 21).has_local_memory  # pocl's: emulated
    assert not Target(local_mem_type="none", local_mem_size=0).has_local_memory


def test_targets_are_values():
    """Plans and tuning key on Targets: equal queries give equal, hashable Targets."""
    a = Target(name="d", type="gpu", subgroup_sizes=(16, 32))
    assert a == dataclasses.replace(a) and hash(a) == hash(dataclasses.replace(a))
    assert a != dataclasses.replace(a, gemm_tiles=(4, 4, 1, (8, 8, 1)))


def test_query_reads_the_device(device):
    d = device.cl_device
    t = query(d)
    assert t.name == d.name.strip() and t.max_work_group_size == d.max_work_group_size
    assert t.local_mem_size == d.local_mem_size and t.max_alloc_size == d.max_mem_alloc_size
    assert t.compute_units == d.max_compute_units and t.global_mem_size == d.global_mem_size
    assert t.has_fp16 == ("cl_khr_fp16" in d.extensions.split())
    assert t.image_support == bool(d.image_support)
    assert tuple(t.max_work_item_sizes) == tuple(d.max_work_item_sizes)
    assert t.family in FAMILIES and t.type in ("cpu", "gpu", "accelerator")
    assert query(d, "gpu").family == "gpu"
    # pocl generates machine code at a kernel's first launch: warm-up launches are its policy
    pocl = "portable computing language" in d.platform.name.lower()
    assert t.warm_up_launches == pocl
    assert t.describe().startswith(f"{t.family} family on {t.name}")


def test_device_target_carries_each_familys_tiles(device):
    own = device.target()
    assert own.family == device.info.family
    other = "gpu" if own.family == "cpu" else "cpu"
    t = device.target(other)
    assert t.family == other and t.name == own.name
    assert device.target(other) == t  # stable while nothing is tuned
