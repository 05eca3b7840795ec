"""The GPU family's skinny GEMM (kernels_cl/gpu_gemv.cl, lower/gpu_gemv.py: M = 1 .. 4 rows, a
work-group per column block, K split over it and reduced in local memory) against numpy and
onnx.reference. It is reached through gpu_gemm.xgemm_launch, so like tests/kernels/test_xgemm.py
these tests force the GPU family with dedicated local memory (what a GPU and Oclgrind report).
Ragged N and K (not multiples of the work-group), both B layouts (row-major [K, N] and a
transposed [N, K] weight), batches with broadcast operands, the epilogue, and Gemm/MatMul nodes.
XGEMM_SMALL=1 (tests/oclgrind): the small shapes only.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower
    from .run_launches import execute
except ImportError:
    from harness import check, device_info, lower  # type: ignore
    from run_launches import execute  # type: ignore

from clglow.lower.base import Buf
from clglow.lower.gemm_kernel import Bias, Operand
from clglow.lower.gpu_gemm import SEARCH_SPACE, xgemm_launch
from clglow.lower.gpu_gemv import gemv_applicable, gemv_group

RNG = np.random.default_rng(17)
SMALL = os.environ.get("XGEMM_SMALL") == "1"
NS = (1, 7, 33) if SMALL else (1, 7, 33, 1000)
KS = (1, 5, 70) if SMALL else (1, 5, 300, 4097)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def gpu_local():
    """The test device under the GPU family with dedicated local memory (the xgemm path)."""
    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> None:
    atol = rtol * max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def run(a: np.ndarray, b: np.ndarray, tb: bool = False, cfg=SEARCH_SPACE[0], **epi) -> np.ndarray:
    """C = A @ B' through xgemm_launch (B' = B^T when tb), asserting it became the gemv kernel."""
    m, k = a.shape
    n = b.shape[0] if tb else b.shape[1]
    arrays = {"a": a, "b": b}
    bias = epi.pop("bias", None)
    if bias is not None:
        arrays["bias"], sm, sn = bias
        epi["bias"] = Bias(Buf("bias"), sm=sm, sn=sn, beta=epi.pop("beta", 1.0))
    if "res" in epi:
        arrays["z"] = epi.pop("res")
        epi["res"] = Operand(Buf("z"), ld=n)
    launch = xgemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=Operand(Buf("a"), ld=k),
                          b=Operand(Buf("b"), ld=1 if tb else n, ld2=k if tb else 1), c=Operand(Buf("c"), ld=n),
                          **epi)
    assert launch.kernel == "gemv"
    return execute([launch], arrays, {"c": np.empty((m, n), np.float32)})["c"]


@pytest.mark.parametrize("tb", [False, True], ids=["b_rows", "b_transposed"])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_gemv_shapes(m, n, k, tb):
    a, b = rand(m, k), rand(n, k) if tb else rand(k, n)
    close(run(a, b, tb), a.astype(np.float64) @ (b.T if tb else b))


@pytest.mark.parametrize("cfg", [SEARCH_SPACE[0], SEARCH_SPACE[2], SEARCH_SPACE[-1]], ids=lambda c: c.label())
def test_gemv_within_each_configuration(cfg):
    """The work-group stays inside the configuration's own local shape (the device runs it)."""
    a, b = rand(2, 123), rand(123, 45)
    close(run(a, b, cfg=cfg), a @ b)
    assert gemv_group(45, 123, False, (cfg.ndimc, cfg.mdimc)) <= (cfg.ndimc, cfg.mdimc)


@pytest.mark.parametrize("bias_kind", ["row", "col", "scalar"])
def test_gemv_epilogue(bias_kind):
    """alpha, beta * bias (per row, per column, scalar), a residual and an activation."""
    m, n, k = 3, 37, 29
    a, b, z = rand(m, k), rand(k, n), rand(m, n)
    arr, sm, sn = {"row": (rand(m), 1, 0), "col": (rand(n), 0, 1), "scalar": (rand(1), 0, 0)}[bias_kind]
    bias_full = {"row": arr[:, None], "col": arr[None, :], "scalar": arr[None, :]}[bias_kind]
    want = np.maximum(0.5 * (a @ b) + 2.0 * bias_full + z, 0)
    close(run(a, b, alpha=0.5, bias=(arr, sm, sn), beta=2.0, res=z, act="Relu"), want)


def test_gemv_batched_broadcast():
    """Two batch levels with A broadcast over the inner one (stride 0), as MatMul lowers them."""
    d1, d2, m, n, k = 2, 3, 2, 35, 18
    a, b = rand(d1, m, k), rand(d1, d2, k, n)
    launch = xgemm_launch(SEARCH_SPACE[0], m=m, n=n, k=k, batch=d1 * d2, d2=d2,
                          a=Operand(Buf("a"), s1=m * k, s2=0, ld=k, ld2=1),
                          b=Operand(Buf("b"), s1=d2 * k * n, s2=k * n, ld=n),
                          c=Operand(Buf("c"), s1=d2 * m * n, s2=m * n, ld=n))
    assert launch.kernel == "gemv"
    got = execute([launch], {"a": a, "b": b}, {"c": np.empty((d1, d2, m, n), np.float32)})["c"]
    close(got, a[:, None] @ b)


def test_applicability():
    assert gemv_applicable(4, Operand(Buf("b"), ld=9)) is None
    assert gemv_applicable(5, Operand(Buf("b"), ld=9)) is not None
    assert gemv_applicable(1, Operand(Buf("b"), packed=True)) is not None
    assert gemv_applicable(1, Operand(Buf("b"), ld=3, ld2=7)) is not None  # no contiguous dimension


@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("b_const", [False, True])
def test_gemm_node_batch_one(tb, b_const):
    """A batch-1 Linear layer (Gemm transB=1 with a bias): the gemv kernel, onnx.reference's result."""
    n, k = 37 if SMALL else 1000, 29 if SMALL else 2048
    b = rand(n, k) if tb else rand(k, n)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=tb, alpha=0.75, beta=1.5)
    feeds, consts = {"a": rand(1, k)}, {"c": rand(n)}
    (consts if b_const else feeds)["b"] = b
    launches = lower(node, feeds, consts, {"y": ((1, n), np.float32)}, device=gpu_local())
    assert [ln.kernel for ln in launches] == ["gemv"]
    check(node, feeds, consts, device=gpu_local())


@pytest.mark.parametrize("sa,sb", [((33,), (33, 7)), ((2, 1, 40), (2, 40, 9)), ((3, 40), (40, 50))], ids=str)
def test_matmul_node_skinny(sa, sb):
    feeds = {"a": rand(*sa), "b": rand(*sb)}
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    want = feeds["a"] @ feeds["b"]
    launches = lower(node, feeds, {}, {"y": (want.shape, np.float32)}, device=gpu_local())
    assert "gemv" in [ln.kernel for ln in launches]
    check(node, feeds, {}, device=gpu_local())


@pytest.mark.parametrize("group", [1, 4])
def test_pointwise_conv_few_channels(group):
    """A 1x1 conv of 1 to 4 output channels per group (X itself is B, groups as a batch level)."""
    cin, cout = 8, 4 if group == 1 else 8
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group)
    feeds, consts = {"x": rand(2, cin, 5, 7)}, {"w": rand(cout, cin // group, 1, 1), "b": rand(cout)}
    launches = lower(node, feeds, consts, {"y": ((2, cout, 5, 7), np.float32)}, device=gpu_local())
    assert "gemv" in [ln.kernel for ln in launches]
    check(node, feeds, consts, device=gpu_local())


def test_skinny_shapes_ask_no_tile_search():
    """A skinny GEMM records no xgemm request (the search would time tiles gpu_gemv.cl never uses)."""
    from clglow.lower import tunable
    from clglow.lower.gemm_kernel import gemm_key
    from clglow.lower.gpu_gemm import tuned_xgemm

    mark = tunable.request_mark()
    assert tuned_xgemm(gpu_local(), gemm_key(1, 1000, 2048, "inplace")) is not None
    assert tunable.requests_since(mark, gpu_local()) == {}
    tuned_xgemm(gpu_local(), gemm_key(64, 1000, 2048, "inplace"))
    assert list(tunable.requests_since(mark, gpu_local())) == [("xgemm", (64, 1000, 2048, "inplace"))]
