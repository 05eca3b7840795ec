"""Gemm and MatMul on the OpenCL GEMM kernel vs onnx.reference: transposes, every C broadcast,
constant (packed) and live operands, 1-D and batched-broadcast MatMul, ragged tile edges."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower
except ImportError:
    from harness import check, device_info, lower  # type: ignore

from clglow.lower.gemm_kernel import gemm_config, pack_a, pack_b

RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# M, K, N deliberately not multiples of any tile size.
M, K, N = 37, 29, 45


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("b_const", [False, True])
def test_gemm_transposes(trans_a, trans_b, b_const):
    a = rand(K, M) if trans_a else rand(M, K)
    b = rand(N, K) if trans_b else rand(K, N)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b,
                            alpha=0.75, beta=1.5)
    feeds, consts = {"a": a, "c": rand(N)}, {}
    (consts if b_const else feeds)["b"] = b
    check(node, feeds, consts)


@pytest.mark.parametrize("c_shape", [None, (), (1,), (N,), (1, N), (M, 1), (M, N), (1, 1)], ids=str)
def test_gemm_c_broadcast(c_shape):
    inputs = ["a", "b"] + ([] if c_shape is None else ["c"])
    feeds = {"a": rand(M, K)}
    if c_shape is not None:
        feeds["c"] = rand(*c_shape)
    check(helper.make_node("Gemm", inputs, ["y"], beta=0.5), feeds, {"b": rand(K, N)})


def test_gemm_const_a_beta_zero():
    """Weights as A (packed at plan time); beta=0 ignores C entirely."""
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=0.0, transA=1)
    check(node, {"b": rand(K, N), "c": rand(M, N)}, {"a": rand(K, M)})


def test_gemm_wide_live_b():
    """A live row-major B wide enough to be read in place (full and ragged column tiles)."""
    n = 8 * gemm_config(device_info()).nr + 5
    check(helper.make_node("Gemm", ["a", "b"], ["y"]), {"a": rand(M, K), "b": rand(K, n)})


def test_gemm_fc_layer():
    """A classifier head: batch 3, 512 -> 250, transposed constant weights."""
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    check(node, {"x": rand(3, 512)}, {"w": rand(250, 512), "b": rand(250)})


def test_gemm_empty():
    launches = lower(helper.make_node("Gemm", ["a", "b"], ["y"]), {"a": rand(0, K)}, {"b": rand(K, N)},
                     {"y": ((0, N), np.float32)})
    assert launches == []


MATMUL_SHAPES = [
    ((K,), (K, N)),                  # 1-D A
    ((M, K), (K,)),                  # 1-D B (N = 1: packed at run time)
    ((K,), (K,)),                    # dot product
    ((3, M, K), (K, N)),             # batch folded into M
    ((2, 1, M, K), (3, K, N)),       # broadcast both ways
    ((1, K), (4, K, N)),             # broadcast A
    ((2, 3, 4, 5, K), (2, 1, 4, K, 7)),  # three batch levels: an outer loop of launches
    ((5, 2, K), (5, K, 3)),          # many small matrices
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_live(shapes):
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": rand(*shapes[0]), "b": rand(*shapes[1])})


@pytest.mark.parametrize("shapes", [((3, M, K), (K, N)), ((2, M, K), (2, K, N)), ((M, K), (3, K, N))],
                         ids=str)
def test_matmul_const_b(shapes):
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": rand(*shapes[0])}, {"b": rand(*shapes[1])})


@pytest.mark.parametrize("shapes", [((M, K), (2, K, N)), ((2, M, K), (2, K, N))], ids=str)
def test_matmul_const_a(shapes):
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"b": rand(*shapes[1])}, {"a": rand(*shapes[0])})


def test_matmul_gpu_tiles():
    """The GPU configuration (small tiles, 8x8 work-groups, padded global size) is correct too."""
    dev = device_info().with_family("gpu")
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    check(node, {"a": rand(2, M, K), "b": rand(2, K, N)}, device=dev)
    check(helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1), {"a": rand(M, K), "c": rand(M, 1)},
          {"b": rand(N, K)}, device=dev)


def test_matmul_avx2_tiles():
    """The 8-wide CPU configuration (6 x 16 tiles)."""
    dev = dataclasses.replace(device_info().with_family("cpu"), gemm_tiles=None, preferred_vector_width_float=8)
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": rand(3, M, K), "b": rand(K, 200)}, device=dev)


def test_pack_layouts():
    a, b = rand(2, 5, 3), rand(3, 7)
    pa, pb = pack_a(a, 4), pack_b(b, 4)
    assert pa.shape == (2, 2, 3, 4) and pb.shape == (2, 3, 4)
    assert pa[1, 1, 2, 0] == a[1, 4, 2] and pa[1, 1, 2, 1] == 0.0
    assert pb[1, 2, 2] == b[2, 6] and pb[1, 2, 3] == 0.0


@pytest.mark.parametrize("family,tiles,packed", [("gpu", (4, 4, 1, (8, 8, 1)), True),
                                                 ("cpu", (12, 16, 2, (1, 1, 1)), False)],
                         ids=["gpu_tiles_pack", "cpu_tiles_in_place"])
def test_matmul_live_a(family, tiles, packed):
    """A live batched A: packed at run time by pack_rows under the GPU family (a ragged last
    panel, 50 = 12 x 4 + 2 rows, and a ragged k block, 37 = 2 x 16 + 5), read in place under the
    CPU family (measured faster on pocl)."""
    dev = dataclasses.replace(device_info().with_family(family), gemm_tiles=tiles)
    a, b = rand(2, 3, 50, 37), rand(2, 3, 37, 33)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    kernels = [l.kernel for l in lower(node, {"a": a, "b": b}, {}, {"y": ((2, 3, 50, 33), np.float32)}, device=dev)]
    assert ("pack_rows" in kernels) == packed, kernels
    check(node, {"a": a, "b": b}, device=dev)


def test_matmul_live_a_rows_4k_apart():
    """CPU tiles pack a live A whose rows are a multiple of 4 KiB apart (an MR-row tile's rows
    would share one L1 set), and read it in place otherwise: MatMul and Gemm, vs onnx.reference."""
    dev = dataclasses.replace(device_info().with_family("cpu"), gemm_tiles=(12, 16, 2, (1, 1, 1)))
    for k, packed in [(1024, True), (1000, False)]:
        a, b = rand(60, k), rand(k, 40)
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        kernels = [l.kernel for l in lower(node, {"a": a, "b": b}, {}, {"y": ((60, 40), np.float32)}, device=dev)]
        assert ("pack_rows" in kernels) == packed, (k, kernels)
        check(node, {"a": a, "b": b}, device=dev)
        gemm = helper.make_node("Gemm", ["a", "b"], ["y"])
        kernels = [l.kernel for l in lower(gemm, {"a": a, "b": b}, {}, {"y": ((60, 40), np.float32)}, device=dev)]
        assert ("pack_rows" in kernels) == packed, (k, kernels)
        check(gemm, {"a": a, "b": b}, device=dev)


def test_matmul_large():
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": rand(300, 700), "b": rand(700, 333)})


def test_fit_rows_picks_tiles_that_pad_less():
    from clglow.lower.gemm_kernel import GemmConfig, fit_rows
    from clglow.target import Target
    fam = Target(family="cpu")
    cpu = GemmConfig(12, 16, 2, (1, 1, 1))
    assert fit_rows(fam, cpu, 64).mr == 8      # 72 rows with 12-row tiles, 64 with 8
    assert fit_rows(fam, cpu, 256).mr == 12    # 264 vs 256: within 5%, keep the larger tile
    assert fit_rows(fam, cpu, 48).mr == 12     # exact either way
    # given N, the tiles that compute fewer padded outputs (8 x 48 against 12 x 32)
    assert fit_rows(fam, cpu, 128, 28 * 29).mr == 8    # 128 x 816 < 132 x 832 (ResNet's 28x28 3x3)
    assert fit_rows(fam, cpu, 256, 3136).nr == 48      # 256 x 3168 < 264 x 3136
    assert fit_rows(fam, cpu, 1024, 196).mr == 12      # 1032 x 224 < 1024 x 240 (14x14 outputs)
    assert fit_rows(fam, cpu, 48, 96) is cpu           # equal work: the config's tiles
    gpu = GemmConfig(4, 4, 1, (8, 8, 1))
    assert fit_rows(Target(family="gpu"), gpu, 64) is gpu  # the GPU family's tiles are left to the tuner


def test_live_b_rows_2k_apart_packed():
    """A live B whose rows are a multiple of 2 KiB apart is packed by pack_b (read in place, a
    column tile's rows would share a few cache sets); at other pitches it is read in place:
    MatMul and Gemm, vs onnx.reference."""
    dev = dataclasses.replace(device_info().with_family("cpu"), gemm_tiles=(12, 16, 2, (1, 1, 1)))
    for n, packed in [(512, True), (1536, True), (520, False)]:
        a, b = rand(30, 40), rand(40, n)
        for op in ("MatMul", "Gemm"):
            node = helper.make_node(op, ["a", "b"], ["y"])
            kernels = [l.kernel for l in lower(node, {"a": a, "b": b}, {}, {"y": ((30, n), np.float32)}, device=dev)]
            assert ("pack_b" in kernels) == packed, (op, n, kernels)
            check(node, {"a": a, "b": b}, device=dev)


def test_gemm_takes_the_tiles_that_pad_less():
    """Gemm lowers with fit_rows' tiles (the gemm family's default for its key): 64 rows as
    8-row tiles, not 72 as 12-row ones; constant and live A, vs onnx.reference."""
    dev = dataclasses.replace(device_info().with_family("cpu"), gemm_tiles=(12, 16, 2, (1, 1, 1)),
                              preferred_vector_width_float=16)
    a, b = rand(64, 40), rand(40, 200)
    node = helper.make_node("Gemm", ["a", "b"], ["y"])
    for feeds, consts in (({"b": b}, {"a": a}), ({"a": a, "b": b}, {})):
        launches = lower(node, feeds, consts, {"y": ((64, 200), np.float32)}, device=dev)
        gemm = [ln for ln in launches if ln.program == "gemm"][0]
        assert gemm.defines["MR"] == 8, gemm.defines
        check(node, feeds, consts, device=dev)
