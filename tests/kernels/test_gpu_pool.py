"""The GPU family's global pooling (lower/gpu_pool.py: a work-group per (n, c) plane) against
numpy, called through its lowering function (pool.py's selection of it is one hook line), on
the test device under the GPU family. Planes shorter than, equal to and longer than a group,
1-D to 3-D, one element. XGEMM_SMALL=1 (tests/oclgrind): the small shapes only."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import device_info
    from .run_launches import execute, lower_ctx
except ImportError:
    from harness import device_info  # type: ignore
    from run_launches import execute, lower_ctx  # type: ignore

from clglow.errors import InvalidModel
from clglow.lower.gpu_pool import lower_global_pool_wg

RNG = np.random.default_rng(13)
SMALL = os.environ.get("XGEMM_SMALL") == "1"
SHAPES = [(1, 1, 1, 1), (2, 3, 7, 7), (1, 5, 17), (2, 2, 3, 4, 5), (1, 3, 16, 16)]
if not SMALL:
    SHAPES += [(2, 64, 56, 56), (1, 7, 300, 301), (3, 1000, 1, 1)]


def _run(op: str, x: np.ndarray) -> np.ndarray:
    out = x.shape[:2] + (1,) * (x.ndim - 2)
    node = helper.make_node(op, ["x"], ["y"])
    _op, lctx = lower_ctx(node, {"x": x}, {}, {"y": (out, np.float32)}, opset=13,
                          device=dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local"))
    launches = lower_global_pool_wg(lctx)
    assert [ln.kernel for ln in launches] == ["wg_reduce"]
    return execute(launches, {"x": x}, {"y": np.empty(out, np.float32)})["y"]


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gpu_global_pool(op, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    axes = tuple(range(2, x.ndim))
    want = x.astype(np.float64).mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" \
        else x.max(axis=axes, keepdims=True)
    np.testing.assert_allclose(_run(op, x), want.astype(np.float32), rtol=1e-5, atol=1e-6)


def test_gpu_global_max_pool_nan():
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    x[0, 1, 8, 8] = np.nan
    got = _run("GlobalMaxPool", x).reshape(-1)
    assert np.isnan(got[1]) and not np.isnan(got[[0, 2]]).any()


def test_gpu_global_pool_empty_plane():
    with pytest.raises(InvalidModel, match="empty plane"):
        _run("GlobalAveragePool", np.zeros((1, 2, 0, 3), np.float32))


@pytest.mark.parametrize("family,local,kernel", [("gpu", "local", "wg_reduce"), ("gpu", "global", "global_pool"),
                                                 ("cpu", "global", "global_pool")])
def test_pool_lowering_selects_the_work_group_kernel(family, local, kernel):
    """pool.py's GlobalAveragePool takes gpu_pool's row only under the GPU family with dedicated
    local memory (pocl's emulated local memory keeps the per-plane kernel), and either is right."""
    from clglow.lower.pool import lower_global_pool

    if SMALL and kernel != "wg_reduce":  # tests/oclgrind runs this file with every checker on
        pytest.skip("Oclgrind 21.10's uninitialised-value checker segfaults in pool.cl's global_pool "
                    "(a simulator fault; the selection is tested on the other devices)")
    x = RNG.standard_normal((2, 5, 9, 9)).astype(np.float32)
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    target = dataclasses.replace(device_info().with_family(family), local_mem_type=local)
    _op, lctx = lower_ctx(node, {"x": x}, {}, {"y": ((2, 5, 1, 1), np.float32)}, opset=13, device=target)
    launches = lower_global_pool(lctx)
    assert [ln.kernel for ln in launches] == [kernel]
    got = execute(launches, {"x": x}, {"y": np.empty((2, 5, 1, 1), np.float32)})["y"]
    np.testing.assert_allclose(got, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
