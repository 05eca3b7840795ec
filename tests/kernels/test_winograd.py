"""Winograd F(2x2, 3x3) convolutions (lower/winograd.py, kernels_cl/winograd.cl) vs onnx.reference:
pads (none, asymmetric, wide), odd output sizes, tile rows that are not whole vectors of tiles,
narrow and wide images, batches in pieces of images and of tile rows, fused bias / residual /
activations; which convs take the path; the transform algebra against a direct correlation."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower
    from .run_launches import reference
except ImportError:
    from harness import check, device_info, lower  # type: ignore
    from run_launches import reference  # type: ignore

from clglow.lower import winograd as wino
from clglow.lower.gemm import GemmConfig

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _tiles():
    """The test device with the AVX-512 CPU tile defaults (12 x 32 tiles of float16), for which
    the path choice is asserted; they run on any CPU device."""
    info = dataclasses.replace(device_info(), gemm_tiles=None, preferred_vector_width_float=16)
    if info.type != "cpu":
        pytest.skip("Winograd is taken with CPU tiles only")
    return info


def _kernels(node, x, consts, out_shape, dev):
    return [ln.kernel for ln in lower(node, {"x": x}, consts, {"y": (out_shape, np.float32)}, device=dev)]


CASES = [  # (x shape, w shape, attrs): every one runs as Winograd
    ((1, 16, 24, 56), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1])),       # 12 x 28 tiles: a row's last 4 tiles
    ((1, 24, 31, 33), (16, 24, 3, 3), {}),                           # no padding, 29 x 31 output: odd edges
    ((2, 16, 20, 40), (32, 16, 3, 3), dict(pads=[1, 0, 2, 1])),       # asymmetric pads
    ((1, 16, 26, 30), (16, 16, 3, 3), dict(pads=[2, 2, 2, 2])),       # pads wider than one pixel
    ((1, 16, 64, 14), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1])),       # rows narrower than a vector
    ((1, 17, 12, 200), (18, 17, 3, 3), dict(pads=[1, 1, 1, 1])),      # wide rows, 100 tiles each
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_winograd_conv(x_shape, w_shape, attrs):
    dev = _tiles()
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    y = reference(node, {"x": x}, {"w": w, "b": b}, 17)[0]
    assert _kernels(node, x, {"w": w, "b": b}, y.shape, dev).count("wino_in") >= 1
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


@pytest.mark.parametrize("act,alpha,beta", [("Relu", 0.0, 0.0), ("Clip", 0.0, 6.0), ("LeakyRelu", 0.1, 0.0),
                                            ("Tanh", 0.0, 0.0), ("", 0.0, 0.0)])
def test_winograd_fused_epilogue(act, alpha, beta):
    """FusedConv's bias, residual and activation in wino_out (a non-piecewise activation is its own
    program), with and without bias."""
    dev = _tiles()
    for bias in (True, False):
        x, w, b = rand(2, 16, 22, 46), rand(24, 16, 3, 3), rand(24)
        consts = {"w": w, **({"b": b} if bias else {})}
        conv = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], pads=[1, 1, 1, 1])
        z = rand(2, 24, 22, 46)
        y = reference(conv, {"x": x}, consts, 17)[0] + z
        if act == "Relu":
            y = np.maximum(y, 0)
        elif act == "Clip":
            y = np.clip(y, alpha, beta)
        elif act == "LeakyRelu":
            y = np.where(y < 0, alpha * y, y)
        elif act == "Tanh":
            y = np.tanh(y)
        node = helper.make_node("FusedConv", ["x", "w", "b" if bias else "", "z"], ["y"], domain="clglow",
                                activation=act, alpha=alpha, beta=beta, pads=[1, 1, 1, 1])
        assert "wino_out" in [ln.kernel for ln in lower(node, {"x": x, "z": z}, consts,
                                                       {"y": (y.shape, np.float32)}, device=dev)]
        check(node, {"x": x, "z": z}, consts, expected=[y.astype(np.float32)], device=dev)


@pytest.mark.parametrize("cap,pieces", [(1, 3 * 2), (64 * (16 + 24) * 10 * 32 // 3 + 1, 3), (1 << 30, 1)])
def test_winograd_pieces(monkeypatch, cap, pieces):
    """Images or runs of tile rows per launch within the scratch cap: with the smallest cap each
    image in balanced runs of at least the rows that keep 4 column tiles of tiles (32 rows of 10
    tiles, 12 x 32 GEMM tiles: at least 13 rows, so two runs of 16), one image per piece, or all
    three at once."""
    monkeypatch.setattr(wino, "_PIECE_CAP", cap)
    dev = _tiles()
    x, w, b = rand(3, 16, 64, 20), rand(24, 16, 3, 3), rand(24)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    names = _kernels(node, x, {"w": w, "b": b}, (3, 24, 64, 20), dev)
    assert names.count("wino_in") == names.count("gemm") == names.count("wino_out") == pieces, names
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


def test_winograd_choice(monkeypatch):
    """ResNet-50's 56x56 and 28x28 stride-1 3x3s take it; its 14x14 and 7x7 ones (few tiles), a
    strided, dilated, grouped, 5x5 or few-channel conv, and CLGLOW_WINOGRAD=0 do not."""
    cfg = GemmConfig(12, 16, 2, (1, 1, 1))
    ok = wino.winograd_ok
    assert ok(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64)
    assert ok(cfg, (28, 28, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1), 1, 128, 128)
    assert not ok(cfg, (14, 14, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1), 1, 256, 256)
    assert not ok(cfg, (56, 56, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1), 1, 128, 128)
    assert not ok(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 2, 2, 2, 2), 1, 64, 64)
    assert not ok(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 2, 32, 32)
    assert not ok(cfg, (56, 56, 56, 56, 5, 5, 1, 1, 2, 2, 1, 1), 1, 64, 64)
    assert not ok(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 8, 64)
    assert not ok(cfg, (600, 600, 600, 600, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64)  # beyond wino_in's row buffer
    assert not ok(GemmConfig(4, 4, 1, (8, 8, 1)), (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64)
    monkeypatch.setenv("CLGLOW_WINOGRAD", "0")
    assert not ok(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64)


def test_winograd_filter_algebra():
    """A^T [(G g G^T) (.) (B^T d B)] A is the 2x2 correlation of the 4x4 patch d with g, for
    winograd_filter's U and the B^T / A^T that winograd.cl applies (float64, random data)."""
    rng = np.random.default_rng(0)
    g = rng.standard_normal((3, 5, 3, 3))
    u = wino.winograd_filter(g).astype(np.float64).reshape(4, 4, 3, 5)
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
    d = rng.standard_normal((5, 4, 4))
    v = np.einsum("ak,ckl,bl->abc", bt, d, bt)               # [4, 4, Cin]
    m = np.einsum("aboc,abc->abo", u, v)                       # summed over Cin: [4, 4, Cout]
    y = np.einsum("ia,abo,jb->oij", at, m, at)                 # [Cout, 2, 2]
    direct = np.array([[[np.sum(g[o] * d[:, i:i + 3, j:j + 3]) for j in range(2)] for i in range(2)]
                       for o in range(3)])
    np.testing.assert_allclose(y, direct, rtol=1e-6, atol=1e-5)  # U is rounded to float32
