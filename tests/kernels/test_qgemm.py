"""Integer matrix products on OpenCL (lower/qgemm.py, kernels_cl/qgemm.cl) against exact numpy.

Integer outputs (MatMulInteger) are compared exactly with an int64 numpy product; requantised
ones exactly with numpy's float32 version of onnxruntime's formula (rint(float32(acc) *
(a_scale * b_scale / y_scale)) + y_zp, half to even) and within one step of onnx.reference
(which forms the multiplier in float64, so a tie can round the other way); float outputs
within float32 rounding. onnxruntime's own integer GEMM is not the oracle: on CPUs without VNNI
its int16 pair sums saturate when weights use all 8 bits.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import run_node  # noqa: E402
except ImportError:
    from run_launches import run_node  # type: ignore  # noqa: E402

RNG = np.random.default_rng(2022)
MIXES = [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]
SHAPES = [(1, 1, 1), (5, 7, 3), (37, 70, 45), (13, 129, 33), (64, 96, 128)]


def rand(shape: tuple, dt) -> np.ndarray:
    """Values over the type's whole range (every bit used: the case onnxruntime gets wrong)."""
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, shape).astype(dt)


def exact(a: np.ndarray, b: np.ndarray, za, zb) -> np.ndarray:
    """(A - za) @ (B - zb) in int64 (za per row as [M, 1], zb per column)."""
    return (a.astype(np.int64) - np.asarray(za, np.int64)) @ (b.astype(np.int64) - np.asarray(zb, np.int64))


def requant(acc: np.ndarray, mul: np.ndarray, yz: int, dt, lo: Optional[int] = None, hi: Optional[int] = None):
    """onnxruntime's requantisation in numpy float32: clamp, round half to even, add y_zp."""
    info = np.iinfo(dt)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    f = acc.astype(np.float32) * np.asarray(mul, np.float32)
    f = np.clip(f, np.float32(lo - yz), np.float32(hi - yz))
    return (np.rint(f).astype(np.int64) + yz).astype(dt)


@pytest.mark.parametrize("adt,bdt", MIXES)
@pytest.mark.parametrize("mkn", SHAPES)
@pytest.mark.parametrize("zps", ["none", "tensor", "column", "row"])
@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer_exact(adt, bdt, mkn, zps, b_const):
    m, k, n = mkn
    a, b = rand((m, k), adt), rand((k, n), bdt)
    feeds, inputs = {"a": a, "b": b}, ["a", "b"]
    za, zb = 0, 0
    if zps != "none":
        za = rand((m,), adt) if zps == "row" else rand((), adt)
        zb = rand((n,), bdt) if zps in ("column", "row") else rand((), bdt)
        feeds.update(za=za, zb=zb)
        inputs += ["za", "zb"]
    consts = {k_: feeds.pop(k_) for k_ in ("b", "zb") if b_const and k_ in feeds}
    e = exact(a, b, np.asarray(za).reshape(-1, 1) if zps == "row" else za, zb).astype(np.int32)
    got, _ = run_node(helper.make_node("MatMulInteger", inputs, ["y"]), feeds, consts, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


@pytest.mark.parametrize("ashape,bshape", [((3, 5, 40), (40, 17)), ((2, 3, 9, 20), (2, 3, 20, 11)),
                                           ((9, 20), (4, 20, 11)), ((4, 9, 20), (1, 20, 11)), ((20,), (20, 6))])
@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer_batched(ashape, bshape, b_const):
    a, b = rand(ashape, np.uint8), rand(bshape, np.int8)
    za, zb = np.array(131, np.uint8), np.array(-3, np.int8)
    e = np.matmul(a.astype(np.int64) - 131, b.astype(np.int64) + 3).astype(np.int32)
    feeds, consts = {"a": a, "za": za}, {"zb": zb}
    (consts if b_const else feeds)["b"] = b
    got, _ = run_node(helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"]), feeds, consts, opset=10,
                      expected=[e])
    np.testing.assert_array_equal(got[0], e)


def _qlmm_inputs(m: int, k: int, n: int, adt, bdt, per_column: bool, ydt) -> dict:
    a, b = rand((m, k), adt), rand((k, n), bdt)
    bs = (RNG.random(n) * 0.02 + 0.001).astype(np.float32) if per_column else np.array(0.01, np.float32)
    bz = rand((n,), bdt) if per_column else rand((), bdt)
    return {"a": a, "as": np.array(0.05, np.float32), "az": rand((), adt), "b": b, "bs": bs, "bz": bz,
            "ys": np.array(np.sqrt(k) * 0.3, np.float32), "yz": rand((), ydt)}


@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("mkn", [(5, 7, 3), (37, 70, 45), (16, 256, 64)])
def test_qlinear_matmul(adt, bdt, per_column, mkn):
    ydt = adt
    f = _qlmm_inputs(*mkn, adt, bdt, per_column, ydt)
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    node = helper.make_node("QLinearMatMul", names, ["y"])
    consts = {k: f[k] for k in names[1:]}
    mul = (f["as"] * f["bs"]) / f["ys"]  # float32, in onnxruntime's order
    e = requant(exact(f["a"], f["b"], f["az"], f["bz"]), mul, int(f["yz"]), ydt)
    got, ref = run_node(node, {"a": f["a"]}, consts, opset=13, expected=[e])
    np.testing.assert_array_equal(got[0], e)
    got, ref = run_node(node, {"a": f["a"]}, consts, opset=21)
    assert np.abs(got[0].astype(np.int64) - ref[0].astype(np.int64)).max() <= 1


def test_qlinear_matmul_qclamp():
    """The QDQ pass's qclamp bounds (a fused Relu at the zero point) saturate the output."""
    f = _qlmm_inputs(9, 33, 20, np.uint8, np.int8, True, np.uint8)
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    yz = int(f["yz"])
    node = helper.make_node("QLinearMatMul", names, ["y"], qclamp=[yz, 255])
    e = requant(exact(f["a"], f["b"], f["az"], f["bz"]), (f["as"] * f["bs"]) / f["ys"], yz, np.uint8, yz, 255)
    got, _ = run_node(node, {"a": f["a"]}, {k: f[k] for k in names[1:]}, opset=13, expected=[e])
    np.testing.assert_array_equal(got[0], e)
    assert got[0].min() >= yz


def _ms(op: str, inputs: list, **attrs) -> object:
    return helper.make_node(op, inputs, ["y"], domain="com.microsoft", **attrs)


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_integer_to_float(per_column, bias):
    m, k, n = 11, 70, 37
    a, b = rand((3, m, k), np.uint8), rand((k, n), np.int8)
    az, bz = np.array(120, np.uint8), (rand((n,), np.int8) if per_column else np.array(2, np.int8))
    as_ = np.array(0.03, np.float32)
    bs = (RNG.random(n) * 0.01 + 0.001).astype(np.float32) if per_column else np.array(0.004, np.float32)
    bb = RNG.standard_normal(n).astype(np.float32)
    inputs = ["a", "b", "as", "bs", "az", "bz"] + (["bias"] if bias else [])
    consts = {"b": b, "as": as_, "bs": bs, "az": az, "bz": bz, "bias": bb}
    e = exact(a, b, az, bz).astype(np.float32) * (as_ * bs) + (bb if bias else 0)
    got, _ = run_node(_ms("MatMulIntegerToFloat", inputs), {"a": a}, consts, expected=[e.astype(np.float32)])
    np.testing.assert_allclose(got[0], e, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("b_const", [True, False])
def test_dynamic_quantize_matmul(b_const):
    """A quantised on the device as DynamicQuantizeLinear does (numpy: its ONNX formula); a live B
    is packed and its column sums taken on the device."""
    x = (RNG.standard_normal((2, 7, 48)) * 3).astype(np.float32)
    b, bs, bz = rand((48, 30), np.int8), (RNG.random(30) * 0.01).astype(np.float32), rand((30,), np.int8)
    bias = RNG.standard_normal(30).astype(np.float32)
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    s = np.float32((hi - lo) / 255)
    zp = np.uint8(np.clip(np.rint(-lo / s), 0, 255))
    q = np.clip(np.rint(x / s) + zp, 0, 255).astype(np.uint8)
    e = exact(q, b, zp, bz).astype(np.float32) * (s * bs) + bias
    feeds, consts = {"x": x}, {"bs": bs, "bz": bz, "bias": bias}
    (consts if b_const else feeds)["b"] = b
    got, _ = run_node(_ms("DynamicQuantizeMatMul", ["x", "b", "bs", "bz", "bias"]), feeds, consts,
                      expected=[e.astype(np.float32)])
    np.testing.assert_allclose(got[0], e, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("quant_out", [True, False])
@pytest.mark.parametrize("trans", [(0, 1), (1, 0)])
def test_qgemm(quant_out, trans):
    """QGemm: alpha folded into a_scale, int32 C added to the accumulator, requantised or float."""
    m, k, n = 13, 50, 21
    ta, tb = trans
    a, b = rand((m, k), np.uint8), rand((k, n), np.int8)
    az, bz = np.array(77, np.uint8), rand((n,), np.int8)
    as_, bs = np.array(0.02, np.float32), (RNG.random(n) * 0.01 + 0.001).astype(np.float32)
    c = RNG.integers(-3000, 3000, (n,)).astype(np.int32)
    ys, yz, alpha = np.array(2.5, np.float32), np.array(130, np.uint8), 0.75
    feeds = {"a": a.T.copy() if ta else a}
    consts = {"as": as_, "az": az, "b": b.T.copy() if tb else b, "bs": bs, "bz": bz, "c": c, "ys": ys, "yz": yz}
    if ta:
        consts["a"] = feeds.pop("a")
    inputs = ["a", "as", "az", "b", "bs", "bz", "c"] + (["ys", "yz"] if quant_out else [])
    acc = exact(a, b, az, bz) + c
    scale = (np.float32(alpha) * as_) * bs
    if quant_out:
        e = requant(acc, scale / ys, int(yz), np.uint8)
    else:
        e = (acc.astype(np.float32) * scale).astype(np.float32)
    got, _ = run_node(_ms("QGemm", inputs, alpha=alpha, transA=ta, transB=tb), feeds, consts, expected=[e])
    if quant_out:
        np.testing.assert_array_equal(got[0], e)
    else:
        np.testing.assert_allclose(got[0], e, rtol=1e-6, atol=1e-5)


def test_search_space_declared():
    """The family declares its space on the Target, the default first, every point within the
    Target's work-group limit."""
    from clglow.lower import qgemm_kernel
    try:
        from .run_launches import device_info
    except ImportError:
        from run_launches import device_info  # type: ignore
    t = device_info()
    space = qgemm_kernel.qgemm_space(t)
    assert space[0] == qgemm_kernel.default_qgemm_config(t)
    assert len(space) > 4 and len(set(space)) == len(space)
    assert all(int(np.prod(c.lsize)) <= t.max_work_group_size for c in space)


@pytest.mark.parametrize("pick", ["cpu default", "cpu kc16", "cpu last", "gpu default", "gpu last"])
def test_search_space_points_exact(pick, monkeypatch):
    """Points of both families' declared spaces (each inner-step form: KC 1, 16 and 4) give the
    exact product on this device."""
    from clglow.lower import qgemm, qgemm_kernel
    try:
        from .run_launches import device_info
    except ImportError:
        from run_launches import device_info  # type: ignore
    family, which = pick.split()
    space = qgemm_kernel.qgemm_space(device_info().with_family(family))
    cfg = space[0] if which == "default" else space[-1] if which == "last" else next(c for c in space if c.kc == 16)
    monkeypatch.setattr(qgemm, "tuned_qgemm", lambda target, m, n, k, label="": cfg)
    a, b = rand((29, 75), np.uint8), rand((75, 41), np.int8)
    za, zb = np.array(9, np.uint8), rand((41,), np.int8)
    e = exact(a, b, za, zb).astype(np.int32)
    got, _ = run_node(helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"]), {"a": a, "b": b},
                      {"za": za, "zb": zb}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def _supports(op: str, inputs: dict, consts: dict, domain: str = "", **attrs) -> object:
    """The device op's supports() verdict for one node (None: it runs on OpenCL)."""
    from clglow.ir import Graph, Node, Value
    from clglow.lower import base
    try:
        from .run_launches import device_info
    except ImportError:
        from run_launches import device_info  # type: ignore
    values = {n: Value(n, a.dtype, tuple(a.shape), a if n in consts else None) for n, a in {**inputs, **consts}.items()}
    values["y"] = Value("y", np.dtype(np.int32), None)
    node = Node(op, op, list(inputs) + list(consts), ["y"], attrs, domain)
    graph = Graph([node], values, list(inputs), ["y"], {"": 13, "com.microsoft": 1})
    return base.lookup(node).supports(node, graph, device_info())


def test_supports_refuses_what_the_lowering_cannot_take():
    """Live per-index parameters of a batched matrix and QGemm's alpha on a live scale are
    refused up front (the node then runs on the host), not failed at lowering."""
    a3, b2 = rand((2, 4, 8), np.uint8), rand((8, 5), np.int8)
    assert _supports("MatMulInteger", {"a": a3, "b": b2, "za": rand((4,), np.uint8)}, {}) is not None
    assert _supports("MatMulInteger", {"a": a3, "b": b2}, {"za": np.uint8(3)}) is None
    f = np.float32
    q = {"a": rand((4, 8), np.uint8), "as": np.array(0.1, f)}
    rest = {"az": np.uint8(1), "b": b2, "bs": np.array(0.1, f), "bz": np.int8(0)}
    assert _supports("QGemm", q, rest, "com.microsoft", alpha=2.0) is not None
    assert _supports("QGemm", {"a": q["a"]}, {"as": q["as"], **rest}, "com.microsoft", alpha=2.0) is None


def test_tunable_family_registered():
    """qgemm is a tunable family (lower/tunable.py): its space and default per shape, and a
    benchmark launch the search can time, for every point of the space."""
    from clglow.lower import qgemm_kernel, tunable
    try:
        from .run_launches import device_info
    except ImportError:
        from run_launches import device_info  # type: ignore
    t = device_info()
    fam = tunable.FAMILIES["qgemm"]
    key = (64, 3, 576)
    d = fam.default(t, key)
    assert qgemm_kernel.fit_columns(qgemm_kernel.default_qgemm_config(t), 3).params() == d
    assert fam.space(t, key)[0] == qgemm_kernel.default_qgemm_config(t).params()
    for p in fam.space(t, key)[:3] + [d]:
        launch, sizes = fam.bench(t, key, p)
        assert launch.kernel == "qgemm" and set(sizes) == {"A", "B", "C"}
    assert qgemm_kernel.tuned_qgemm(t, 64, 3, 576) == qgemm_kernel.fit_columns(qgemm_kernel.default_qgemm_config(t), 3)


def test_requantisation_ties_round_half_to_even():
    """A multiplier of 0.5 puts every odd sum on a tie: rounded half to even, as ONNX
    QuantizeLinear and onnxruntime round (numpy's rint is the oracle)."""
    a, b = rand((6, 3), np.int8) // 8, rand((3, 10), np.int8) // 8
    f = np.float32
    consts = {"as": np.array(1.0, f), "az": np.int8(0), "b": b, "bs": np.array(1.0, f), "bz": np.int8(0),
              "ys": np.array(2.0, f), "yz": np.int8(-3)}
    acc = exact(a, b, 0, 0)
    assert np.any(acc % 2 == 1)
    e = requant(acc, np.float32(0.5), -3, np.int8)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    got, _ = run_node(node, {"a": a}, consts, opset=13, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def test_fit_tile_fewer_padded_products_same_registers():
    """The default KC=1 tile is fitted to the shape among tiles of its accumulator count: a
    49-pixel layer (ResNet-50's 7x7) gets a tile that computes fewer padded columns, in the
    declared space; shapes where the saving is small keep the default; and the fitted tile's
    QLinearConv-shaped product is exact."""
    from clglow.lower import qgemm_kernel as qk
    try:
        from .run_launches import device_info
    except ImportError:
        from run_launches import device_info  # type: ignore
    t = device_info().with_family("cpu")
    d = qk.default_qgemm_config(t)
    fit = qk.fit_columns(d, 49, 512)
    padded = lambda c: qk.round_up(512, c.mr) * qk.round_up(49, c.nr)  # noqa: E731
    assert fit.mr * fit.nv == d.mr * d.nv and fit.kc == d.kc and fit.fa == d.fa
    assert padded(fit) < padded(d) and fit in qk.qgemm_space(t)
    big = qk.fit_columns(d, 16 * d.nr * 9, 8 * d.mr)  # whole tiles: nothing to save
    assert big == d
    assert qk.tuned_qgemm(t, 512, 49, 4608) == fit  # the tests' own empty cache: the default path
    a = np.random.default_rng(3).integers(0, 256, (1, 40, 7, 7)).astype(np.uint8)
    w = np.random.default_rng(4).integers(-128, 128, (20, 40, 3, 3)).astype(np.int8)
    e = _conv_int(a, w)
    got, _ = run_node(helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), {"x": a}, {"w": w},
                      opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def _conv_int(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact int32 3x3 pad-1 stride-1 convolution of one image (int64 sums)."""
    _, c, h, wd = x.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[0, :, i:i + h, j:j + wd] for i in range(3) for j in range(3)], 1)  # [c, 9, h, w]
    return np.einsum("ockl,cklhw->ohw", w.astype(np.int64).reshape(w.shape[0], c, 3, 3),
                     cols.reshape(c, 3, 3, h, wd))[None].astype(np.int32)
