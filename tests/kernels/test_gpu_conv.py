"""The GPU family's convolutions on local-memory tiles against onnx.reference and numpy:
xgemm.cl's implicit GEMM (B gathered from X per tile, lower/gpu_conv.py) and gpu_dwconv.cl's
depthwise tiles with local-memory halos (lower/gpu_dwconv.py).

pocl's local memory is emulated, so the GPU family there keeps dwconv.cl and im2col panels;
these tests force a Target of the GPU family with local_mem_type="local" (what a GPU and
Oclgrind report), as test_xgemm.py does. Shapes cover ragged tiles, strides, dilations,
asymmetric pads, groups, depth multipliers, 1-D convs and every point of both search spaces;
the epilogue (bias, residual, activations); the selection under each family and local-memory
type; the tunable families' spaces within a small device's limits and their benchmarks.

XGEMM_SMALL=1 (tests/oclgrind): only the small shapes (a simulator runs every work-item).
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
    from .run_launches import execute, reference
except ImportError:
    from harness import check, device_info, lower  # type: ignore
    from run_launches import execute, reference  # type: ignore

from clglow.lower.base import Buf
from clglow.lower.common import ConvGeometry
from clglow.lower.gpu_dwconv import SEARCH_SPACE as DW_SPACE, DwTile, dw_launch, search_space as dw_space
from clglow.lower.gpu_gemm import SEARCH_SPACE as XG_SPACE, search_space as xg_space
from clglow.lower.gpu_conv import implicit_launch
from clglow.lower.tunable import FAMILIES
from clglow.target import Target

RNG = np.random.default_rng(11)
SMALL = os.environ.get("XGEMM_SMALL") == "1"


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def gpu_local() -> Target:
    """The test device under the GPU family, told its local memory is dedicated."""
    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


def kernels_of(node, feeds: dict, consts: dict, out_shape: tuple, device: Target) -> list:
    return [(ln.program, ln.kernel) for ln in lower(node, feeds, consts, {"y": (out_shape, np.float32)},
                                                    device=device)]


def out_shape(node, feeds: dict, consts: dict) -> tuple:
    return reference(node, feeds, consts, 17)[0].shape


# --- implicit GEMM ---------------------------------------------------------------------------------------------
CONVS = [  # (X, W, attributes): none a multiple of a tile
    ((1, 8, 9, 11), (12, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 6, 11, 13), (4, 3, 3, 3), dict(group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 2, 0, 1])),
    ((1, 3, 12, 12), (7, 3, 5, 5), dict(pads=[2, 1, 2, 1], dilations=[1, 2])),
    ((2, 4, 10, 9), (5, 4, 1, 1), dict(strides=[2, 2])),       # strided 1x1: gathered, not in place
    ((1, 5, 8, 8), (3, 5, 1, 1), dict(pads=[1, 0, 0, 1])),     # padded 1x1
    ((1, 2, 17), (3, 2, 4), dict(pads=[2, 1], strides=[3])),   # 1-D
    ((1, 1, 7, 7), (1, 1, 7, 7), dict(pads=[3, 3, 3, 3])),     # one channel, taps > map
    ((1, 6, 6, 6), (6, 3, 2, 2), dict(group=2, pads=[0, 0, 1, 1], dilations=[2, 2])),
]
if not SMALL:
    CONVS += [
        ((1, 64, 28, 28), (96, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((2, 3, 67, 65), (16, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),
        ((1, 32, 15, 15), (64, 8, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2])),
    ]


@pytest.mark.parametrize("xs,ws,attrs", CONVS, ids=str)
def test_implicit_conv(xs, ws, attrs):
    """One xgemm.cl B_CONV launch per conv, vs onnx.reference."""
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    feeds, consts = {"x": rand(*xs)}, {"w": rand(*ws), "b": rand(ws[0])}
    launches = lower(node, feeds, consts, {"y": (out_shape(node, feeds, consts), np.float32)}, device=gpu_local())
    assert [(ln.program, ln.defines.get("B_CONV")) for ln in launches] == [("xgemm", 1)]
    check(node, feeds, consts, device=gpu_local())


def test_gather_division_is_exact_below_its_bound():
    """xgemm.cl's DIV_BY(a, 1/d) = int((float(a) + 0.5f) * float32(1/d)) in float32 arithmetic (IEEE,
    as OpenCL's +, * and conversions are) equals a // d for a < MAX_GATHER_INDEX: both ends of the
    range, divisors of taps, tap counts and output widths (numpy's float32 ops round as the device's)."""
    from clglow.lower.gpu_gemm import MAX_GATHER_INDEX

    top = MAX_GATHER_INDEX
    a = np.concatenate([np.arange(0, 1 << 16), np.arange(top - (1 << 16), top)]).astype(np.int64)
    for d in list(range(1, 65)) + [9 * c for c in (3, 16, 17, 64, 512, 2048)] + [25, 49, 112, 224, 1000, 4095, 65537]:
        inv = np.float32(1.0 / d)
        q = ((a.astype(np.float32) + np.float32(0.5)) * inv).astype(np.int64)
        assert (q == a // d).all(), (d, a[q != a // d][:5])


def test_implicit_conv_refused_past_the_index_bound():
    from clglow.config import PlanOptions
    from clglow.lower.common import Epilogue
    from clglow.lower.conv import ConvCase
    from clglow.lower.gpu_conv import implicit_applicable

    def why(g: ConvGeometry):
        return implicit_applicable(ConvCase(gpu_local(), PlanOptions(), g, Epilogue(""), True))

    assert why(_geom((1, 8, 64, 64), (8, 8, 3, 3), pad=1)) is None
    assert why(_geom((1, 1, 2050, 2050), (1, 1, 3, 3), pad=1)) is not None  # N = 2050^2 > 2^22


def test_implicit_conv_weights_not_constant():
    """Weights fed at run time (read in place as A: no packing either way)."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    check(node, {"x": rand(2, 5, 9, 10), "w": rand(6, 5, 3, 3)}, {}, device=gpu_local())


def _geom(xs: tuple, ws: tuple, **kw) -> ConvGeometry:
    n, cin, h, w = xs
    cout, _, kh, kw_ = ws
    p, s, d, groups = kw.get("pad", 0), kw.get("stride", 1), kw.get("dil", 1), kw.get("groups", 1)
    oh, ow = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (w + 2 * p - d * (kw_ - 1) - 1) // s + 1
    return ConvGeometry(h, w, oh, ow, kh, kw_, s, s, p, p, d, d, n, cin, cout, groups)


def _numpy_conv(x: np.ndarray, wt: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """The oracle: the conv as a sum over taps of strided views of the zero-padded X (float64)."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (g.ph, g.ph), (g.pw, g.pw)])
    xg = xp.reshape(g.n_img, g.groups, g.cin_g, *xp.shape[2:])
    wg = wt.astype(np.float64).reshape(g.groups, g.m, g.cin_g, g.kh, g.kw)
    y = np.zeros((g.n_img, g.groups, g.m, g.oh, g.ow))
    for i in range(g.kh):
        for j in range(g.kw):
            y0, x0 = i * g.dh, j * g.dw
            patch = xg[..., y0: y0 + g.sh * (g.oh - 1) + 1: g.sh, x0: x0 + g.sw * (g.ow - 1) + 1: g.sw]
            y += np.einsum("gmc,ngchw->ngmhw", wg[..., i, j], patch)
    return y.reshape(g.n_img, g.cout, g.oh, g.ow)


# On Oclgrind (XGEMM_SMALL) the default, a strided 8x8-per-item one and the smallest, as test_xgemm.py
@pytest.mark.parametrize("cfg", [XG_SPACE[0], XG_SPACE[2], XG_SPACE[-1]] if SMALL else XG_SPACE,
                         ids=lambda c: c.label())
def test_implicit_every_configuration(cfg):
    """Each point of xgemm's search space on a ragged grouped strided conv, with bias, residual
    and an activation (vs numpy)."""
    g = _geom((2, 6, 13, 11), (10, 3, 3, 3), pad=1, stride=2, groups=2)
    x, wt, b, z = rand(2, 6, 13, 11), rand(10, 3, 3, 3), rand(10), rand(2, 10, g.oh, g.ow)
    launch = implicit_launch(cfg, g, Buf("x"), Buf("w"), Buf("y"), bias=Buf("b"), res=Buf("z"), act="LeakyRelu",
                             act_alpha=0.1)
    got = execute([launch], {"x": x, "w": wt, "b": b, "z": z}, {"y": np.empty(z.shape, np.float32)})["y"]
    v = _numpy_conv(x, wt, g) + b[None, :, None, None] + z
    np.testing.assert_allclose(got, np.where(v < 0, 0.1 * v, v), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act,kw", [("Relu", {}), ("Clip", dict(alpha=-0.3, beta=0.4)), ("Sigmoid", {}),
                                    ("HardSwish", {})])
def test_fused_conv_epilogue(act, kw):
    """FusedConv's bias, residual and activation in the implicit GEMM's epilogue (vs onnx.reference
    of the unfused Conv)."""
    x, w, bias, z = rand(1, 4, 7, 9), rand(6, 4, 3, 3), rand(6), rand(1, 6, 4, 5)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", pads=[1, 1, 1, 1],
                            strides=[2, 2], activation=act, **kw)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    v = reference(conv, {"x": x}, {"w": w, "b": bias}, 17)[0] + z
    want = {"Relu": lambda t: np.maximum(t, 0), "Clip": lambda t: np.clip(t, -0.3, 0.4),
            "Sigmoid": lambda t: 1 / (1 + np.exp(-t)), "HardSwish": lambda t: t * np.clip(t / 6 + 0.5, 0, 1)}[act](v)
    check(node, {"x": x, "z": z}, {"w": w, "b": bias}, expected=[want.astype(np.float32)], device=gpu_local())
    assert kernels_of(node, {"x": x, "z": z}, {"w": w, "b": bias}, want.shape, gpu_local()) == [("xgemm", "xgemm")]


# --- depthwise with local-memory halos ---------------------------------------------------------------------------
DW_CONVS = [  # (X, multiplier, kernel, attributes)
    ((1, 4, 9, 11), 1, (3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 3, 10, 13), 2, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 2, 12, 12), 1, (5, 5), dict(pads=[4, 4, 4, 4], dilations=[2, 2])),
    ((1, 3, 8, 9), 1, (7, 7), dict(pads=[3, 2, 3, 1], strides=[2, 1])),
    ((1, 2, 6, 7), 1, (2, 3), dict(pads=[0, 1, 1, 0], dilations=[1, 3])),
    ((2, 3, 19), 1, (5,), dict(pads=[2, 2])),                     # 1-D
]
if not SMALL:
    DW_CONVS += [
        ((1, 32, 112, 112), 1, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
        ((2, 24, 14, 14), 1, (5, 5), dict(pads=[2, 2, 2, 2])),
        ((1, 16, 33, 35), 1, (3, 3), dict(pads=[12, 12, 12, 12], dilations=[12, 12])),
    ]


@pytest.mark.parametrize("xs,mult,ks,attrs", DW_CONVS, ids=str)
def test_depthwise(xs, mult, ks, attrs):
    """One gpu_dwconv.cl launch per depthwise conv, vs onnx.reference."""
    c = xs[1]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **attrs)
    feeds, consts = {"x": rand(*xs)}, {"w": rand(c * mult, 1, *ks), "b": rand(c * mult)}
    assert kernels_of(node, feeds, consts, out_shape(node, feeds, consts), gpu_local()) == [("gpu_dwconv", "dw_tile")]
    check(node, feeds, consts, device=gpu_local())


# On Oclgrind (XGEMM_SMALL): one output per item, four rows per item, 64-item groups, a single row
@pytest.mark.parametrize("tile", [DW_SPACE[i] for i in (0, 2, 7, 8)] if SMALL else DW_SPACE,
                         ids=lambda t: f"{t.tw}x{t.th}/{t.wx}x{t.wy}")
def test_depthwise_every_tile(tile):
    """Each point of the search space on a ragged stride-2 3x3 with bias, residual and Relu6 (vs numpy)."""
    g = _geom((2, 3, 21, 19), (6, 1, 3, 3), pad=1, stride=2, groups=3)
    x, wt, b, z = rand(2, 3, 21, 19), rand(6, 1, 3, 3), rand(6), rand(2, 6, g.oh, g.ow)
    launch = dw_launch(tile, g, Buf("x"), Buf("w"), Buf("y"), bias=Buf("b"), res=Buf("z"), act="Clip",
                       act_alpha=0.0, act_beta=6.0)
    got = execute([launch], {"x": x, "w": wt, "b": b, "z": z}, {"y": np.empty(z.shape, np.float32)})["y"]
    want = np.clip(_numpy_conv(x, wt, g) + b[None, :, None, None] + z, 0, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_fused_residual_no_bias():
    x, w, z = rand(1, 4, 6, 6), rand(4, 1, 3, 3), rand(1, 4, 6, 6)
    node = helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], domain="clglow", group=4, pads=[1, 1, 1, 1],
                            activation="Relu")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])
    want = np.maximum(reference(conv, {"x": x}, {"w": w}, 17)[0] + z, 0)
    check(node, {"x": x, "z": z}, {"w": w}, expected=[want], device=gpu_local())


# --- Winograd F(2x2, 3x3) and F(4x4, 3x3) on xgemm.cl -----------------------------------------------------------------------------
WINO = [  # (X, Cout, pads): odd output sizes (a half-empty last tile row/column), batches, asymmetric pads
    ((1, 16, 6, 6), 16, [1, 1, 1, 1]),
    ((2, 17, 7, 9), 19, [1, 0, 2, 1]),
    ((1, 16, 5, 4), 24, [0, 0, 0, 0]),
]
if not SMALL:
    WINO += [((2, 64, 28, 28), 64, [1, 1, 1, 1]), ((1, 32, 15, 17), 48, [1, 1, 1, 1])]


def _winograd_launches(node, feeds: dict, consts: dict, shape: tuple, variant: str = "") -> list:
    """The node's launches on the "gpu winograd" row (after the implicit GEMM in the ranked table:
    a tuning entry's choice) in `variant` ("": F(2x2), "F4": F(4x4)), lowered through the row itself."""
    from clglow.lower.conv import _PATHS, conv_case
    from clglow.lower.gpu_winograd import lower_gpu_winograd, winograd_applicable

    try:
        from .run_launches import lower_ctx
    except ImportError:
        from run_launches import lower_ctx  # type: ignore
    _op, ctx = lower_ctx(node, feeds, consts, {"y": (shape, np.float32)}, device=gpu_local())
    case = conv_case(ctx)
    if variant:
        case.variants = (variant,)
    assert winograd_applicable(case) is None and _PATHS["gpu winograd"].lower is lower_gpu_winograd
    return lower_gpu_winograd(ctx, case)


@pytest.mark.parametrize("xs,cout,pads", WINO, ids=str)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("variant", ["", "F4"], ids=["F2", "F4"])
def test_gpu_winograd(xs, cout, pads, fused, variant):
    """Input transform, 16 (F(2x2)) or 36 (F(4x4)) batched xgemm GEMMs, output transform (with
    bias, residual and Relu when fused), vs onnx.reference."""
    x, w, b = rand(*xs), rand(cout, xs[1], 3, 3), rand(cout)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads)
    want = reference(conv, {"x": x}, {"w": w, "b": b}, 17)[0]
    feeds, node = {"x": x}, conv
    if fused:
        z = rand(*want.shape)
        node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", pads=pads,
                                activation="Relu")
        feeds, want = {"x": x, "z": z}, np.maximum(want + z, 0)
    launches = _winograd_launches(node, feeds, {"w": w, "b": b}, want.shape, variant)
    m = 4 if variant == "F4" else 2
    assert [ln.kernel for ln in launches] == [f"wino{m}_in", "xgemm", f"wino{m}_out"]
    got = execute(launches, {**feeds, "w": w, "b": b}, {"y": np.empty(want.shape, np.float32)})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def test_gpu_winograd_from_the_conv_familys_tuning_entry():
    """The conv family's space offers "gpu winograd" for such a conv, and a database entry choosing
    it (what `clglow tune MODEL` stores where it measured faster) makes the node lower through it."""
    from clglow.lower import tunable
    from clglow.lower.conv import conv_space

    x, w, b = rand(1, 16, 9, 9), rand(16, 16, 3, 3), rand(16)
    g = _geom((1, 16, 9, 9), (16, 16, 3, 3), pad=1)
    key = dataclasses.astuple(g) + ("", True, False)
    space = conv_space(gpu_local(), key)
    assert space[0]["path"] == "xgemm implicit"
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    for variant, m in (("", 2), ("F4", 4)):
        point = {"path": "gpu winograd", "variant": variant}
        assert point in space
        tuned = dataclasses.replace(gpu_local(), tuned=(("conv", tunable.key_str(key), tunable.params_items(point)),))
        assert [k for _p, k in kernels_of(node, {"x": x}, {"w": w, "b": b}, (1, 16, 9, 9), tuned)] == \
            [f"wino{m}_in", "xgemm", f"wino{m}_out"]
        check(node, {"x": x}, {"w": w, "b": b}, device=tuned)
    assert {"path": "gpu winograd", "variant": "F2T"} not in space  # the CPU family's names are not this row's


def test_gpu_winograd_applies_where_stated():
    """Only undilated 3x3 stride-1 single-group convs with constant weights and >= 16 channels,
    under the GPU family with dedicated local memory and Winograd on."""
    from clglow.config import PlanOptions
    from clglow.lower.conv import ConvCase
    from clglow.lower.common import Epilogue
    from clglow.lower.gpu_winograd import winograd_applicable

    def why(target=None, const=True, winograd=True, **kw) -> object:
        g = _geom((1, kw.pop("cin", 16), 8, 8), (kw.pop("cout", 16), 16, 3, 3), pad=1, **kw)
        return winograd_applicable(ConvCase(target or gpu_local(), PlanOptions(winograd=winograd), g, Epilogue(""),
                                            const))

    assert why() is None
    assert why(stride=2) and why(dil=2) and why(cin=8) and why(cout=8) and why(const=False) and why(winograd=False)
    assert why(target=dataclasses.replace(gpu_local(), local_mem_type="global"))
    assert why(target=dataclasses.replace(gpu_local(), family="cpu"))


# --- selection and the tuner's spaces ------------------------------------------------------------------------------
@pytest.mark.parametrize("family,local", [("gpu", "local"), ("gpu", "global"), ("cpu", "global"), ("cpu", "local")])
def test_paths_only_with_local_memory(family, local):
    """The implicit GEMM and the halo depthwise are chosen only under the GPU family with dedicated
    local memory; elsewhere the existing paths run (and every one is right)."""
    target = dataclasses.replace(device_info().with_family(family), local_mem_type=local)
    gpu = family == "gpu" and local == "local"
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    dw = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=4)
    for node, ws, kernel in ((conv, (5, 4, 3, 3), "xgemm"), (dw, (4, 1, 3, 3), "dw_tile")):
        feeds, consts = {"x": rand(1, 4, 8, 8)}, {"w": rand(*ws)}
        names = [k for _p, k in kernels_of(node, feeds, consts, out_shape(node, feeds, consts), target)]
        assert (kernel in names) == gpu, (family, local, names)
        check(node, feeds, consts, device=target)


def test_spaces_within_a_small_device():
    """Work-group sizes and local memory within the device's limits; a window too big for local
    memory takes no tile (the conv then runs as dwconv.cl)."""
    small = Target(max_work_group_size=64, max_work_item_sizes=(64, 64, 64), local_mem_size=4096, family="gpu")
    g = _geom((1, 8, 56, 56), (8, 1, 3, 3), pad=1, groups=8)
    tiles = dw_space(small, g)
    assert tiles and all(t.wx * t.wy <= 64 and 4 * t.window(g)[0] * t.window(g)[1] <= 4096 for t in tiles)
    wide = _geom((1, 8, 200, 200), (8, 1, 3, 3), pad=40, dil=40, groups=8)
    assert dw_space(small, wide) == []
    assert all(c.threads <= 64 and c.local_bytes <= 4096 for c in xg_space(small))
    from clglow.lower.gpu_conv import gathers
    assert all(gathers(c) for c in XG_SPACE)  # every xgemm point stages whole B columns (B_CONV's #error)
    key = dataclasses.astuple(g)
    for fam in ("gpu_dwconv", "xgemm_conv"):
        space = FAMILIES[fam].space(small, key)
        assert space and space[0] == FAMILIES[fam].default(small, key)


def test_depthwise_default_tile_fits_the_map():
    """A 7x7 map does not take a 32x8 tile (five outputs computed per one stored)."""
    target = gpu_local()
    g = _geom((1, 8, 7, 7), (8, 1, 3, 3), pad=1, groups=8)
    tile = DwTile(*FAMILIES["gpu_dwconv"].default(target, dataclasses.astuple(g))["tile"])
    assert tile.waste(g) <= 1.5 and tile.why_not(target, g) is None


@pytest.mark.parametrize("fam,geom", [("gpu_dwconv", _geom((1, 16, 20, 20), (16, 1, 3, 3), pad=1, groups=16)),
                                      ("xgemm_conv", _geom((1, 8, 20, 20), (16, 8, 3, 3), pad=1))])
def test_family_benchmarks_run(fam, geom):
    """Every point of the family's space gives a launch the device runs (what `clglow tune` times),
    its result equal to the default point's."""
    if SMALL:
        pytest.skip("every point again: the kernels' own tests above cover them on a simulator")
    target, key = gpu_local(), dataclasses.astuple(geom)
    family = FAMILIES[fam]
    arrays, results = None, []
    for p in family.space(target, key):
        launch, sizes = family.bench(target, key, p)
        if arrays is None:  # the same inputs for every point
            arrays = {name: rand(n // 4) for name, n in sizes.items() if name != "Y"}
        results.append(execute([launch], arrays, {"Y": np.empty(sizes["Y"] // 4, np.float32)})["Y"])
    assert len(results) > 1
    for got in results[1:]:
        np.testing.assert_allclose(got, results[0], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_search_stores_both_families(tmp_path, monkeypatch):
    """`clglow tune`'s search measures the two families on a device with dedicated local memory,
    stores each shape's winner in the tuning database, and lowering then reads it from there."""
    from clglow.lower import tunable
    from clglow.runtime import search as search_mod
    from clglow.runtime.device import Device, select_device

    if SMALL:
        pytest.skip("a simulator's timings say nothing about a device")
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "cache"))
    base = select_device()
    dev = Device(base.context, base.cl_device)
    dev.cache = base.cache
    dev.info = dataclasses.replace(dev.info, local_mem_type="local")
    target = dev.target("gpu")
    assert target.has_local_memory
    dw = _geom((1, 16, 20, 20), (16, 1, 3, 3), pad=1, groups=16)
    conv = _geom((1, 8, 20, 20), (16, 8, 3, 3), pad=1, stride=2)
    keys = {("gpu_dwconv", dataclasses.astuple(dw)): 1, ("xgemm_conv", dataclasses.astuple(conv)): 1}
    results = search_mod.search(dev, target, keys, budget_s=120, max_points=3)
    assert sorted(r.family for r in results) == ["gpu_dwconv", "xgemm_conv"]
    assert all(r.source == "measured" for r in results)
    dev.reload_tuning("gpu")
    tuned = dev.target("gpu")
    for r in results:
        params, source = tunable.choose(tuned, r.family, r.key)
        assert (params, source) == (r.params, "db")


@pytest.mark.slow
def test_session_mobilenet_style_model():
    """Inverted residuals with depthwise convs, squeeze-excite, ReLU6/SiLU and residual Adds through a
    session on a Device whose local memory is called dedicated (the planner's buffers, residuals
    taking the output's place, start-up no-op launches): the implicit GEMM and the halo depthwise
    built and run, the logits vs onnxruntime."""
    import sys

    import clglow
    from clglow.runtime import device as D

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import models  # tests/models.py

    base = D.select_device()
    dev = D.Device(base.context, base.cl_device)
    dev.info = dataclasses.replace(dev.info, local_mem_type="local")
    model = models.mobilenet_se(batch=2, image_size=32)
    feeds = models.sample_inputs(model)
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(target="gpu", tune=False),
                                   device=dev)
    (got,) = sess.run(None, feeds)
    (want,) = models.ort_run(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    built = {o for (_, opts) in dev.cache._memory for o in opts}
    assert "-DB_CONV=1" in built and any(o.startswith("-DTW=") for o in built)
