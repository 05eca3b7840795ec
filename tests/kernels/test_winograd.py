"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (lower/winograd.py, kernels_cl/winograd.cl) vs onnx.reference:
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
    from .harness import check, device_info, lower, run
    from .run_launches import reference
except ImportError:
    from harness import check, device_info, lower, run  # type: ignore
    from run_launches import reference  # type: ignore

from clglow.config import PlanOptions
from clglow.lower import winograd as wino
from clglow.lower.common import ConvGeometry
from clglow.lower.gemm_kernel import GemmConfig
from clglow.target import Target

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _tiles():
    """The test device with the AVX-512 CPU tile defaults (12 x 32 tiles of float16), for which
    the path choice is asserted; they run on any CPU device."""
    info = dataclasses.replace(device_info(), gemm_tiles=None, preferred_vector_width_float=16)
    if not info.is_cpu_family:
        pytest.skip("Winograd is taken under the CPU family only")
    return info


def _kernels(node, x, consts, out_shape, dev):
    return [ln.kernel for ln in lower(node, {"x": x}, consts, {"y": (out_shape, np.float32)}, device=dev)]


CASES = [  # (x shape, w shape, attrs, variant): every one runs as Winograd F(2x2) or F(4x4)
    ((1, 16, 24, 56), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1]), 2),       # 12 x 28 tiles: a row's last 4
    ((1, 24, 31, 33), (16, 24, 3, 3), {}, 2),                            # no padding, 29 x 31: odd edges
    ((2, 16, 20, 40), (32, 16, 3, 3), dict(pads=[1, 0, 2, 1]), 2),       # asymmetric pads
    ((1, 16, 26, 30), (16, 16, 3, 3), dict(pads=[2, 2, 2, 2]), 2),       # pads wider than one pixel
    ((1, 16, 64, 14), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]), 2),       # rows narrower than a vector
    ((1, 16, 48, 48), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1]), 4),       # 12 x 12 tiles of 4 x 4
    ((1, 16, 61, 63), (16, 16, 3, 3), {}, 4),                            # 59 x 61: ragged blocks both ways
    ((2, 16, 62, 60), (32, 16, 3, 3), dict(pads=[2, 0, 1, 1]), 4),       # asymmetric pads, 63 x 59
    ((1, 16, 200, 14), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]), 4),      # rows narrower than a vector
    ((1, 17, 12, 200), (18, 17, 3, 3), dict(pads=[1, 1, 1, 1]), 4),      # wide rows, 50 tiles each
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,variant", CASES, ids=[str(i) for i in range(len(CASES))])
def test_winograd_conv(x_shape, w_shape, attrs, variant):
    dev = _tiles()
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    y = reference(node, {"x": x}, {"w": w, "b": b}, 17)[0]
    names = _kernels(node, x, {"w": w, "b": b}, y.shape, dev)
    assert names[:3] == ([f"wino{variant}_in", "gemm", f"wino{variant}_out"] if variant == 4
                         else ["wino_in", "gemm", "wino_out"]), names
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


@pytest.mark.parametrize("act,alpha,beta", [("Relu", 0.0, 0.0), ("Clip", 0.0, 6.0), ("LeakyRelu", 0.1, 0.0),
                                            ("Tanh", 0.0, 0.0), ("", 0.0, 0.0)])
def test_winograd_fused_epilogue(act, alpha, beta):
    """FusedConv's bias, residual and activation in the output transforms of F(2x2) (22 x 46) and
    F(4x4) (64 x 46) (a non-piecewise activation is its own program), with and without bias."""
    dev = _tiles()
    for bias, hgt in ((True, 22), (False, 22), (True, 64), (False, 64)):
        x, w, b = rand(2, 16, hgt, 46), rand(24, 16, 3, 3), rand(24)
        consts = {"w": w, **({"b": b} if bias else {})}
        conv = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], pads=[1, 1, 1, 1])
        z = rand(2, 24, hgt, 46)
        pre = reference(conv, {"x": x}, consts, 17)[0] + z
        y = pre
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
        names = [ln.kernel for ln in lower(node, {"x": x, "z": z}, consts, {"y": (y.shape, np.float32)}, device=dev)]
        assert ("wino4_out" if hgt == 64 else "wino_out") in names, names
        (got,), _ = run(node, {"x": x, "z": z}, consts, expected=[y.astype(np.float32)], device=dev)
        # the error of the activation's input, not scaled down with its output (Tanh's max is 1)
        np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-4 * float(np.abs(pre).max()))


PIECES = [  # (cap, x shape, launches of each kernel)
    (1, (3, 16, 64, 20), 3 * 2),   # F(2x2), 32 tile rows of 10 tiles, 12 x 32 GEMM tiles: runs of >= 13 rows
    (64 * (16 + 24) * 10 * 32 // 3 + 1, (3, 16, 64, 20), 3),   # one image per piece
    (1 << 30, (3, 16, 64, 20), 1),                              # all three at once
    (1, (2, 16, 64, 64), 2 * 2),   # F(4x4), 16 tile rows of 16 tiles: runs of >= 8 rows
]


@pytest.mark.parametrize("cap,x_shape,pieces", PIECES, ids=[str(i) for i in range(len(PIECES))])
def test_winograd_pieces(monkeypatch, cap, x_shape, pieces):
    """Images or runs of tile rows per launch within the scratch cap: with the smallest cap each
    image in balanced runs of at least the tile rows that keep 4 column tiles of tiles, one image
    per piece, or the whole batch at once."""
    monkeypatch.setattr(wino, "_PIECE_CAP", cap)
    dev = _tiles()
    x, w, b = rand(*x_shape), rand(24, 16, 3, 3), rand(24)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    names = _kernels(node, x, {"w": w, "b": b}, (x_shape[0], 24) + x_shape[2:], dev)
    assert names.count("gemm") == pieces and len(names) == 3 * pieces, names
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


def test_winograd_choice():
    """ResNet-50's 56x56 stride-1 3x3s take F(4x4), its 28x28 ones F(2x2) (49 tiles of 4 x 4: too
    few columns for the GEMM), its 14x14 and 7x7 ones neither; nor does a strided, dilated,
    grouped, 5x5 or few-channel conv, an image wider than the row ring, the GPU family, or
    PlanOptions.winograd off (CLGLOW_WINOGRAD=0)."""
    cfg = GemmConfig(12, 16, 2, (1, 1, 1))
    cpu, on = Target(family="cpu"), PlanOptions(winograd=True)

    def pick(cfg, spatial, groups, cin_g, m, target=cpu, options=on):  # the variant of (variant, GEMM tiles)
        geom = ConvGeometry(*spatial, cin=cin_g * groups, cout=m * groups, groups=groups)
        chosen = wino.winograd_variant(target, options, cfg, geom)
        return None if chosen is None else chosen[0]
    assert pick(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64) is wino.F4
    assert pick(cfg, (28, 28, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1), 1, 128, 128) is wino.F2
    assert pick(cfg, (14, 14, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1), 1, 256, 256) is None
    assert pick(cfg, (56, 56, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1), 1, 128, 128) is None
    assert pick(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 2, 2, 2, 2), 1, 64, 64) is None
    assert pick(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 2, 32, 32) is None
    assert pick(cfg, (56, 56, 56, 56, 5, 5, 1, 1, 2, 2, 1, 1), 1, 64, 64) is None
    assert pick(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 8, 64) is None
    assert pick(cfg, (600, 600, 600, 600, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64) is None  # beyond the row ring
    assert pick(GemmConfig(4, 4, 1, (8, 8, 1)), (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64,
                target=Target(family="gpu")) is None
    assert pick(cfg, (56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 1, 64, 64, options=PlanOptions(winograd=False)) is None


_BT = {2: [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
       4: [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
           [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]}
_AT = {2: [[1, 1, 1, 0], [0, 1, -1, -1]],
       4: [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]}


@pytest.mark.parametrize("variant", [wino.F2, wino.F4], ids=["F2", "F4"])
def test_winograd_filter_algebra(variant):
    """A^T [(G g G^T) (.) (B^T d B)] A is the m x m correlation of the (m + 2)^2 patch d with g,
    for winograd_filter's U and the B^T / A^T that winograd.cl applies (float64, random data)."""
    rng = np.random.default_rng(0)
    m, a = variant.m, variant.alpha
    g = rng.standard_normal((3, 5, 3, 3))
    u = wino.winograd_filter(g, variant).astype(np.float64).reshape(a, a, 3, 5)
    bt, at = np.array(_BT[m], np.float64), np.array(_AT[m], np.float64)
    d = rng.standard_normal((5, a, a))
    v = np.einsum("ak,ckl,bl->abc", bt, d, bt)               # [alpha, alpha, Cin]
    mm = np.einsum("aboc,abc->abo", u, v)                      # summed over Cin: [alpha, alpha, Cout]
    y = np.einsum("ia,abo,jb->oij", at, mm, at)                # [Cout, m, m]
    direct = np.array([[[np.sum(g[o] * d[:, i:i + 3, j:j + 3]) for j in range(m)] for i in range(m)]
                       for o in range(3)])
    np.testing.assert_allclose(y, direct, rtol=1e-5, atol=1e-4)  # U is rounded to float32


def test_winograd_gemm_tiles():
    """The Winograd GEMM's tiles by the columns gemm.cl computes (a last column tile with at most
    one vector left computes that vector): ResNet-50's 28x28 layers (128 channels, 196 tiles) on
    8 x 48 (128 x 208 outputs) rather than 12 x 32 (132 x 208); none when B cannot be read in place."""
    from clglow.lower.gemm_kernel import in_place_columns
    cfg = GemmConfig(12, 16, 2, (1, 1, 1))
    assert in_place_columns(cfg, 196) == 6 * 32 + 16
    assert in_place_columns(wino.narrow_rows(cfg), 196) == 4 * 48 + 16
    assert in_place_columns(cfg, 150) == 4 * 32 + 32  # 22 left: a whole last tile
    assert in_place_columns(cfg, 256) == 256
    assert wino.gemm_tiles(cfg, 128, 196).mr == 8
    assert wino.gemm_tiles(cfg, 24, 336).mr == 12    # 24 rows: no padding with 12-row tiles
    assert wino.gemm_tiles(cfg, 64, 100) is None      # 100 columns: neither reads B in place
