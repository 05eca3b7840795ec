"""qgemm.cl's KC=2 tiles (pairs of k as 16-bit lanes, summed in pairs into int32: the paired
multiply-add shape), the pair
im2col and the vector epilogue, against exact numpy int64 references.

Every sampled point of the KC=2 part of the CPU family's space must build and give the exact
product: MatMulInteger with zero points on both sides (the zero-point sums of the epilogue),
ConvInteger through the pair im2col (odd K, padding, stride, groups), and QLinearConv /
QLinearMatMul's requantising vector epilogue (per-channel scales, bias, full and ragged tiles).
"""
from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import device_info, run_node  # noqa: E402
    from .test_qconv import conv_exact
    from .test_qgemm import exact, requant
except ImportError:
    from run_launches import device_info, run_node  # type: ignore  # noqa: E402
    from test_qconv import conv_exact  # type: ignore
    from test_qgemm import exact, requant  # type: ignore

RNG = np.random.default_rng(4242)


def rand(shape: tuple, dt) -> np.ndarray:
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, shape).astype(dt)


def _pair_points() -> list:
    """The KC=2 points of the CPU family's declared space: a seeded sample plus the largest tile
    of each inner form."""
    import dataclasses

    from clglow.lower import qgemm_kernel
    wide = dataclasses.replace(device_info().with_family("cpu"), preferred_vector_width_float=16)
    space = [c for c in qgemm_kernel.qgemm_space(wide) if c.kc == 2]  # as on a 16-float-wide device
    assert space, "the space declares KC=2 pair tiles"
    big = [max(space, key=lambda c: c.mr * c.nv * c.vw), max(space, key=lambda c: (c.vw == 8, c.mr * c.nv))]
    return big + random.Random(7).sample([c for c in space if c not in big], 4)


POINTS = _pair_points()


def _kc1_points() -> list:
    """KC=1 points that read a pointwise conv's input in place: the exact-float default, int32
    products, and the narrowest vectors."""
    import dataclasses

    from clglow.lower import qgemm_kernel
    wide = dataclasses.replace(device_info().with_family("cpu"), preferred_vector_width_float=16)
    space = [c for c in qgemm_kernel.qgemm_space(wide) if c.kc == 1]
    return [space[0], next(c for c in space if not c.fa and c.vw == 8 and c.nv == 2),
            next(c for c in space if c.vw == 4 and c.fa)]


KC1_POINTS = _kc1_points()


def _use(monkeypatch, cfg) -> None:
    from clglow.lower import qconv, qgemm
    monkeypatch.setattr(qgemm, "tuned_qgemm", lambda target, m, n, k, label="": cfg)
    monkeypatch.setattr(qconv, "tuned_qgemm", lambda target, m, n, k, label="": cfg)


@pytest.mark.parametrize("cfg", POINTS, ids=str)
@pytest.mark.parametrize("mkn", [(29, 75, 41), (8, 64, 128), (3, 1, 17)])
def test_matmul_integer_pairs_exact(cfg, mkn, monkeypatch):
    _use(monkeypatch, cfg)
    m, k, n = mkn
    a, b = rand((m, k), np.uint8), rand((k, n), np.int8)
    za, zb = np.array(201, np.uint8), rand((n,), np.int8)
    e = exact(a, b, za, zb).astype(np.int32)
    got, _ = run_node(helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"]), {"a": a, "b": b},
                      {"za": za, "zb": zb}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


@pytest.mark.parametrize("cfg", POINTS[:3], ids=str)
@pytest.mark.parametrize("case", [((1, 5, 9, 37), (8, 5, 3, 3), 1, (1, 1), (1, 1, 1, 1)),  # K = 45, 16-pixel moves
                                  ((1, 6, 12, 20), (4, 3, 3, 2), 2, (2, 1), (0, 1, 2, 1)),   # groups, stride
                                  ((1, 64, 8, 8), (24, 64, 1, 1), 1, (1, 1), (0, 0, 0, 0))])  # pointwise
def test_conv_integer_pair_im2col_exact(cfg, case, monkeypatch):
    _use(monkeypatch, cfg)
    xs, wsh, g, st, pads = case
    x, w = rand(xs, np.uint8), rand(wsh, np.int8)
    xz, wz = np.array(131, np.uint8), rand((wsh[0],), np.int8)
    e = conv_exact(x, w, xz, wz, g, st, pads, (1, 1)).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=g, strides=list(st), pads=list(pads))
    got, _ = run_node(node, {"x": x}, {"w": w, "xz": xz, "wz": wz}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


@pytest.mark.parametrize("cfg", POINTS[:2], ids=str)
@pytest.mark.parametrize("npix", [16 * 16, 7 * 5])  # full vector tiles, and ragged ones
def test_qlinear_conv_vector_epilogue_exact(cfg, npix, monkeypatch):
    """The requantising epilogue on whole column vectors: per-channel weight scales and zero
    points, int32 bias, uint8 output with a zero point, exactly numpy's float32 formula."""
    _use(monkeypatch, cfg)
    h, w_ = (16, 16) if npix == 256 else (7, 5)
    cin, cout = 24, 20
    x, w = rand((1, cin, h, w_), np.uint8), rand((cout, cin, 1, 1), np.int8)
    xs, xz = np.float32(0.03), np.uint8(120)
    ws, wz = RNG.uniform(0.002, 0.01, cout).astype(np.float32), np.zeros(cout, np.int8)
    ys, yz = np.float32(0.35), np.uint8(100)
    bias = RNG.integers(-3000, 3000, cout).astype(np.int32)
    acc = conv_exact(x, w, xz, wz, 1, (1, 1), (0, 0, 0, 0), (1, 1)) + bias.reshape(1, -1, 1, 1)
    mul = ((xs * ws) / ys).astype(np.float32).reshape(1, -1, 1, 1)
    e = requant(acc, mul, int(yz), np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"])
    got, _ = run_node(node, {"x": x}, {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": wz, "ys": ys, "yz": yz, "b": bias},
                      opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


@pytest.mark.parametrize("cfg", POINTS[:2], ids=str)
def test_qlinear_matmul_per_column_vector_epilogue_exact(cfg, monkeypatch):
    """Per-column B scales and zero points read as vectors by the epilogue (stride 1)."""
    _use(monkeypatch, cfg)
    m, k, n = 9, 40, 80
    a, b = rand((m, k), np.uint8), rand((k, n), np.int8)
    az, bz = np.uint8(77), rand((n,), np.int8)
    as_, bs = np.float32(0.02), RNG.uniform(0.001, 0.01, n).astype(np.float32)
    ys, yz = np.float32(0.2), np.int8(-5)
    e = requant(exact(a, b, az, bz), ((as_ * bs) / ys).astype(np.float32), int(yz), np.int8)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    got, _ = run_node(node, {"a": a}, {"as": as_, "az": az, "b": b, "bs": bs, "bz": bz, "ys": ys, "yz": yz},
                      opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def test_conv_weights_widened_for_pair_tiles(monkeypatch):
    """A constant convolution weight reaches KC=2 tiles as int16 (A16: one 32-bit broadcast per
    row and k pair); other tiles keep the 8-bit weights."""
    try:
        from .run_launches import lower_ctx
    except ImportError:
        from run_launches import lower_ctx  # type: ignore
    from clglow.lower import qgemm_kernel
    x, w = rand((1, 8, 6, 6), np.uint8), rand((16, 8, 3, 3), np.int8)
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    space = qgemm_kernel.qgemm_space(device_info().with_family("cpu"))
    for cfg, widened in ((next(c for c in space if c.kc == 2), True), (next(c for c in space if c.kc == 1), False)):
        _use(monkeypatch, cfg)
        op, ctx = lower_ctx(node, {"x": x}, {"w": w}, {"y": ((1, 16, 6, 6), np.int32)}, opset=10)
        gemm = [lc for lc in op.lower(ctx) if lc.kernel == "qgemm"]
        assert len(gemm) == 1 and ("A16" in gemm[0].defines) == widened


@pytest.mark.parametrize("cfg", POINTS[:3] + KC1_POINTS, ids=str)
@pytest.mark.parametrize("case", [((2, 24, 9, 9), 40, 1, "channel"),    # 81 pixels: a ragged column tile
                                  ((1, 33, 8, 16), 16, 1, "tensor"),    # odd K, 128 pixels: whole tiles
                                  ((1, 16, 5, 7), 12, 2, "none")])       # groups
def test_pointwise_conv_reads_input_in_place_exact(cfg, case, monkeypatch):
    """1x1 stride-1 convolutions under KC=2 and KC=1 tiles (int32 and exact-float): no im2col
    launch (B_DIRECT), exact results, ragged column tiles included."""
    try:
        from .run_launches import lower_ctx
    except ImportError:
        from run_launches import lower_ctx  # type: ignore
    _use(monkeypatch, cfg)
    xs, cout, g, zps = case
    x, w = rand(xs, np.uint8), rand((cout, xs[1] // g, 1, 1), np.int8)
    xz = np.array(0 if zps == "none" else 143, np.uint8)
    wz = rand((cout,), np.int8) if zps == "channel" else np.zeros((), np.int8)
    e = conv_exact(x, w, xz, wz, g, (1, 1), (0, 0, 0, 0), (1, 1)).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=g)
    op, ctx = lower_ctx(node, {"x": x}, {"w": w, "xz": xz, "wz": wz}, {"y": (e.shape, np.int32)}, opset=10)
    kernels = [lc.kernel for lc in op.lower(ctx)]
    assert ("qim2col" not in kernels) == (zps != "channel"), kernels  # a weight zero point needs the panels
    got, _ = run_node(node, {"x": x}, {"w": w, "xz": xz, "wz": wz}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_exact_float_accumulation_at_its_bound(adt, bdt, monkeypatch):
    """KC=1 tiles with float accumulation (QFA) stay exact where the largest products fill every
    block to 2^24 and K spans several blocks (a block one size too large would round)."""
    from clglow.lower import qgemm_kernel
    cfg = next(c for c in qgemm_kernel.qgemm_space(device_info().with_family("cpu")) if c.kc == 1 and c.fa)
    _use(monkeypatch, cfg)
    block = qgemm_kernel.exact_float_block(np.dtype(adt), np.dtype(bdt))
    ia, ib = np.iinfo(adt), np.iinfo(bdt)
    m, k, n = 5, 2 * block + 37, 70
    extreme_a = ia.min if ia.min < 0 else ia.max  # the largest |a * b|
    extreme_b = ib.min if ib.min < 0 else ib.max
    a = np.full((m, k), extreme_a, adt)
    b = np.full((k, n), extreme_b, bdt)
    a[1] = rand((k,), adt)
    b[:, 3] = rand((k,), bdt)
    b[::3, 5] = ib.max  # + 1 in some sums: an odd total that a rounding float sum would lose
    e = exact(a, b, 0, 0)
    e32 = e.astype(np.int32)
    assert np.array_equal(e32, e)
    got, _ = run_node(helper.make_node("MatMulInteger", ["a", "b"], ["y"]), {"a": a, "b": b}, {}, opset=10,
                      expected=[e32])
    np.testing.assert_array_equal(got[0], e32)
