"""Conv and clglow FusedConv on OpenCL vs onnx.reference: kernel sizes, strides, asymmetric pads,
dilations, groups, depthwise, auto_pad, 1-D, live weights, every fused activation with residual."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower, run
    from .run_launches import execute, lower_ctx, reference
except ImportError:
    from harness import check, device_info, lower, run  # type: ignore
    from run_launches import execute, lower_ctx, reference  # type: ignore

from clglow.ir import Graph, Node, Value
from clglow.lower import conv as conv_mod
from clglow.lower import conv_gemm
from clglow.lower.base import Buf, lookup
from clglow.lower.common import ConvGeometry
from clglow.lower.gemm_kernel import GemmConfig, fit_rows, gemm_config, transposed_config
from clglow.target import Target

CPU = Target(family="cpu")  # the CPU family's path choices, whatever device runs the tests
GPU = Target(family="gpu")

RNG = np.random.default_rng(2)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_check(x_shape, w_shape, bias=True, w_const=True, opset=17, device=None, **attrs):
    x, w = rand(*x_shape), rand(*w_shape)
    inputs = ["x", "w"] + (["b"] if bias else [])
    feeds, consts = {"x": x}, {}
    (consts if w_const else feeds)["w"] = w
    if bias:
        consts["b"] = rand(w_shape[0])
    check(helper.make_node("Conv", inputs, ["y"], **attrs), feeds, consts, opset=opset, device=device)


CASES = [
    # (x shape, w shape, attrs)
    ((1, 3, 17, 19), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((3, 4, 16, 15), (6, 4, 5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2])),
    ((1, 3, 23, 21), (8, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),   # ResNet stem shape
    ((2, 5, 11, 13), (7, 5, 3, 3), dict(pads=[1, 2, 0, 1], strides=[2, 1])),   # asymmetric pads
    ((1, 4, 14, 12), (6, 4, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    ((1, 4, 13, 11), (5, 4, 3, 2), dict(dilations=[2, 1], strides=[1, 2])),    # rectangular kernel
    ((3, 6, 9, 10), (8, 3, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),          # groups 2
    ((1, 8, 7, 7), (8, 2, 3, 3), dict(group=4)),                              # groups 4, no pad
    ((2, 6, 11, 9), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),          # depthwise
    ((1, 6, 12, 12), (6, 1, 3, 3), dict(group=6, pads=[0, 1, 1, 0], strides=[2, 2])),
    ((1, 4, 10, 9), (8, 1, 5, 5), dict(group=4, pads=[2, 2, 2, 2], dilations=[2, 1])),  # multiplier 2
    ((2, 3, 5, 41), (3, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),          # wide rows: interior path
    ((1, 4, 9, 75), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2])),  # stride-2 vector path
    ((1, 3, 7, 80), (3, 1, 3, 3), dict(group=3, strides=[2, 2])),                     # stride 2, no pad
    ((2, 4, 6, 90), (4, 1, 3, 3), dict(group=4, pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2])),
    ((1, 8, 5, 70), (16, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2])),  # multiplier 2
    ((2, 3, 7, 48), (3, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),          # stride 1, pad 1: edge lanes
    ((1, 2, 5, 33), (4, 1, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),          # multiplier 2, ragged tail
    ((1, 2, 6, 80), (2, 1, 5, 5), dict(group=2, pads=[2, 2, 2, 2], strides=[3, 3])),  # stride 3: gathers
    ((1, 2, 6, 77), (4, 1, 3, 5), dict(group=2, pads=[1, 2, 0, 1], strides=[1, 2], dilations=[1, 2])),
    ((1, 7, 13, 11), (9, 7, 1, 1), {}),                                       # 1x1, packed at run time
    ((3, 5, 20, 20), (7, 5, 1, 1), {}),                                       # 1x1, X read in place
    ((2, 6, 20, 20), (4, 3, 1, 1), dict(group=2)),                            # grouped 1x1 in place
    ((1, 5, 13, 13), (7, 5, 1, 1), dict(strides=[2, 2])),                     # strided 1x1 (im2col)
    ((1, 5, 9, 9), (4, 5, 1, 1), dict(pads=[1, 0, 1, 2])),                    # padded 1x1
    ((2, 3, 10, 9), (4, 3, 4, 4), dict(kernel_shape=[4, 4], strides=[3, 2])),
    ((1, 3, 20, 56), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                  # ResNet rows: vector runs
    ((2, 3, 40, 70), (5, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),  # stem rows: stride-2 runs
    ((1, 2, 5, 80), (3, 2, 1, 3), dict(strides=[1, 2])),                      # stride-2 runs to the plane end
]


@pytest.mark.parametrize("geom", [(56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), (28, 28, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1),
                                  (224, 224, 112, 112, 7, 7, 2, 2, 3, 3, 1, 1), (9, 40, 9, 20, 1, 1, 1, 2, 0, 0, 1, 1),
                                  (9, 21, 7, 19, 3, 3, 1, 1, 0, 0, 1, 1), (14, 14, 12, 12, 3, 3, 1, 1, 1, 1, 2, 2)])
@pytest.mark.parametrize("nr", [32, 8, 7])
def test_im2col_table_runs(geom, nr):
    """The vector-run flags agree with a brute-force reading of the offsets (a run across a padded
    row edge can start and end exactly PV-1 apart, and must not be flagged)."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom
    np_ = -(-oh * ow // nr) * nr
    full = conv_gemm.im2col_table(ConvGeometry(*geom), np_, nr)
    pv = conv_gemm.panel_vector_width(nr)
    tab, fast = full[:kh * kw * np_].reshape(kh * kw, np_), full[kh * kw * np_:].reshape(kh * kw, np_ // pv)
    for r in range(kh * kw):
        for j in range(np_ // pv):
            run = [int(v) for v in tab[r, j * pv:(j + 1) * pv]]
            if run[0] >= 0 and run == list(range(run[0], run[0] + pv)):
                want = run[0]
            elif pv > 1 and run[0] >= 0 and run == list(range(run[0], run[0] + 2 * pv, 2)) and run[0] + 2 * pv <= h * w:
                want = -(run[0] + 2)
            else:
                want = -1
            assert fast[r, j] == want, (r, j, run)
    if (kh, sh, ph) == (3, 1, 1) and pv == 16 and w == 56:
        assert (fast >= 0).mean() > 0.5  # most runs of a ResNet layer1 conv are vector loads


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_conv2d(x_shape, w_shape, attrs):
    conv_check(x_shape, w_shape, **attrs)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
@pytest.mark.parametrize("stride", [1, 2])
def test_auto_pad(auto_pad, stride):
    conv_check((1, 3, 10, 11), (4, 3, 4, 3), auto_pad=auto_pad, strides=[stride, stride])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_auto_pad_depthwise(auto_pad):
    conv_check((1, 4, 8, 9), (4, 1, 4, 4), auto_pad=auto_pad, group=4, strides=[2, 2])


@pytest.mark.parametrize("attrs", [dict(pads=[2, 1]), dict(strides=[3], dilations=[2]),
                                   dict(auto_pad="SAME_UPPER"), dict(group=3, pads=[1, 1])], ids=str)
def test_conv1d(attrs):
    w_shape = (6, 1, 3) if attrs.get("group") == 3 else (5, 3, 3)
    conv_check((2, 3, 17), w_shape, **attrs)


def test_conv1d_pointwise():
    conv_check((2, 3, 300), (5, 3, 1))


@pytest.mark.parametrize("case", [0, 6, 8, 14])
def test_live_weights(case):
    """Weights computed at run time: A read strided instead of packed."""
    x_shape, w_shape, attrs = CASES[case]
    conv_check(x_shape, w_shape, w_const=False, **attrs)


def test_no_bias_opset1():
    conv_check((1, 2, 6, 6), (3, 2, 3, 3), bias=False, opset=1)


def test_gpu_tiles():
    """The GPU configuration (small tiles in padded 8x8 work-groups) on the same cases."""
    dev = device_info().with_family("gpu")
    for i in (1, 6, 14):
        x_shape, w_shape, attrs = CASES[i]
        conv_check(x_shape, w_shape, device=dev, **attrs)


@pytest.mark.parametrize("cap", [1, 3 * 4 * 32 * 9 * 4 + 1, 1 << 30])
def test_scratch_pieces(monkeypatch, cap):
    """A packed operand larger than the scratch cap is made piece by piece (images, then runs of
    panels of one image), in both GEMM orientations, with residual and grouped convs."""
    monkeypatch.setattr(conv_gemm, "SCRATCH_CAP", cap)
    conv_check((3, 4, 9, 40), (5, 4, 3, 3), pads=[1, 1, 1, 1])
    conv_check((3, 4, 7, 7), (5, 4, 1, 1))  # 1x1 whose pack runs per image / per panel run
    conv_check((2, 6, 9, 40), (8, 3, 3, 3), group=2, pads=[1, 1, 1, 1])
    # small N, many channels: the transposed GEMM (pixels as MR-row panels)
    conv_check((2, 16, 14, 14), (64, 16, 3, 3), pads=[1, 1, 1, 1])
    conv_check((2, 16, 14, 14), (64, 16, 1, 1))


def test_empty_output():
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    assert lower(node, {"x": rand(0, 3, 5, 5)}, {"w": rand(2, 3, 3, 3)}, {"y": ((0, 2, 3, 3), np.float32)}) == []


def test_declines_4d():  # 3-D convs run on OpenCL (lower/conv_nd.py, tests/kernels/test_conv_nd.py)
    values = {"x": Value("x", np.dtype(np.float32), (1, 2, 4, 4, 4, 4)),
              "w": Value("w", np.dtype(np.float32), (3, 2, 3, 3, 3, 3)), "y": Value("y", np.dtype(np.float32))}
    node = Node("Conv", "c", ["x", "w"], ["y"])
    why = lookup(node).supports(node, Graph([node], values, ["x", "w"], ["y"], {"": 17}), device_info())
    assert why and "4-D" in why


def test_declines_double():
    values = {"x": Value("x", np.dtype(np.float64), (1, 2, 4, 4)),
              "w": Value("w", np.dtype(np.float64), (3, 2, 3, 3)), "y": Value("y", np.dtype(np.float64))}
    node = Node("Conv", "c", ["x", "w"], ["y"])
    assert lookup(node).supports(node, Graph([node], values, ["x", "w"], ["y"], {"": 17}), device_info())


# --- FusedConv ------------------------------------------------------------------------------------
def _act(y, act, alpha, beta):
    if act == "Relu":
        return np.maximum(y, 0)
    if act == "Clip":
        return np.clip(y, alpha, beta)
    if act == "LeakyRelu":
        return np.where(y >= 0, y, y * alpha)
    if act == "Sigmoid":
        return 1 / (1 + np.exp(-y))
    if act == "HardSigmoid":
        return np.clip(y * alpha + beta, 0, 1)
    if act == "Tanh":
        return np.tanh(y)
    if act == "Swish":
        return y / (1 + np.exp(-y))
    if act == "HardSwish":
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if act == "Gelu":
        import math
        return 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    return y


ACTS = [("", 0.0, 0.0), ("Relu", 0.0, 0.0), ("Clip", 0.0, 6.0), ("LeakyRelu", 0.1, 0.0),
        ("Sigmoid", 0.0, 0.0), ("HardSigmoid", 0.2, 0.5), ("Tanh", 0.0, 0.0), ("Gelu", 0.0, 0.0),
        ("Swish", 0.0, 0.0), ("HardSwish", 0.0, 0.0)]


def fused_check(x_shape, w_shape, act, alpha, beta, residual=True, bias=True, device=None, **attrs):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    conv_inputs = ["x", "w"] + (["b"] if bias else [])
    consts = {"w": w, **({"b": b} if bias else {})}
    y = reference(helper.make_node("Conv", conv_inputs, ["y"], **attrs), {"x": x}, consts, 17)[0]
    feeds = {"x": x}
    if residual:
        feeds["z"] = rand(*y.shape)
        y = y + feeds["z"]
    expected = _act(y, act, alpha, beta).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b" if bias else "", "z" if residual else ""], ["y"],
                            domain="clglow", activation=act, alpha=alpha, beta=beta, **attrs)
    check(node, feeds, consts, expected=[expected], device=device)


IN_PLACE = [  # the GEMM paths whose tiles overlap a neighbour, each with a ragged tile
    ((1, 8, 14, 14), (300, 8, 1, 1), {}, "gemm"),                                # X in place: 196 = 6x32 + 4
    ((1, 5, 20, 40), (13, 5, 3, 3), dict(pads=[1, 1, 1, 1]), "conv_phases"),     # implicit: 820 columns
    ((2, 6, 12, 12), (40, 6, 3, 3), dict(pads=[1, 1, 1, 1]), "conv_phases"),     # transposed, 156 pixel rows
    ((1, 6, 16, 70), (13, 6, 1, 1), dict(strides=[2, 2]), "conv_phases"),        # strided 1x1, one phase
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,first", IN_PLACE, ids=[str(i) for i in range(len(IN_PLACE))])
def test_residual_updated_in_place(x_shape, w_shape, attrs, first):
    """A FusedConv offers its output the residual's buffer (LowerCtx.may_update): run with Y bound
    to Z's buffer, the result is still conv + Z for every output, also where a ragged tile
    overlaps its neighbour (each output read and written by one work-item)."""
    dev = _default_tiles()
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    y = reference(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs), {"x": x}, {"w": w, "b": b}, 17)[0]
    z = rand(*y.shape)
    expected = np.maximum(y + z, 0).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", activation="Relu", **attrs)
    op, lctx = lower_ctx(node, {"x": x, "z": z}, {"w": w, "b": b}, {"y": (y.shape, np.float32)}, 17, dev)
    launches = op.lower(lctx)
    assert lctx.inplace == {0: 3} and launches[0].kernel == first, (lctx.inplace, [ln.kernel for ln in launches])
    aliased = [dataclasses.replace(ln, args=[Buf("z") if isinstance(a, Buf) and a.name == "y" else a
                                             for a in ln.args]) for ln in launches]
    got = execute(aliased, {"x": x, "z": z, "w": w, "b": b}, {"z": expected})["z"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


PADDED = [  # (x, 1x1 producer's W, 3x3 consumer's W, consumer attrs, transposed GEMMs)
    ((2, 8, 20, 30), (13, 8, 1, 1), (7, 13, 3, 3), dict(pads=[1, 1, 1, 1]), False),    # N = 600 columns
    ((2, 16, 14, 14), (64, 16, 1, 1), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # 196 pixel rows
    ((1, 5, 9, 40), (6, 5, 1, 1), (5, 6, 5, 3), dict(pads=[2, 1, 2, 1]), False),       # 5x3 taps
    # whole row tiles whose vectors cross a row end of the padded layout (gemm.cl FOR_RUNS), gaps of 1 and 2
    ((1, 8, 28, 28), (64, 8, 1, 1), (8, 64, 3, 3), dict(pads=[1, 1, 1, 1]), False),    # gap 1, 28-pixel rows
    ((1, 8, 20, 36), (32, 8, 1, 1), (8, 32, 5, 5), dict(pads=[2, 2, 2, 2]), False),    # gap 2
]
# strided 3x3s on the transposed GEMM, reading the padded image with their strides (ResNet's 28 -> 14),
# where conv_gemm.OFFER_STRIDED_PADDED lets them offer it
PADDED_STRIDED = [
    ((1, 16, 14, 14), (64, 16, 1, 1), (64, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),
    ((2, 8, 15, 13), (64, 8, 1, 1), (64, 64, 3, 3), dict(strides=[2, 3], pads=[1, 2, 1, 0]), True),
]


@pytest.mark.parametrize("x_shape,w1_shape,w2_shape,attrs,trans", PADDED, ids=[str(i) for i in range(len(PADDED))])
def test_padded_activation_between_convs(x_shape, w1_shape, w2_shape, attrs, trans):
    """A 1x1 conv writes its output straight into the zero-padded image the next stride-1 conv
    reads (PaddedLayout: the consumer's conv_phases copy is gone); the pair computes what
    onnx.reference does for the two convs."""
    _padded_pair(x_shape, w1_shape, w2_shape, attrs, trans)


@pytest.mark.parametrize("x_shape,w1_shape,w2_shape,attrs,trans", PADDED_STRIDED,
                         ids=[str(i) for i in range(len(PADDED_STRIDED))])
def test_padded_activation_before_strided_convs(monkeypatch, x_shape, w1_shape, w2_shape, attrs, trans):
    """Where offered (conv_gemm.OFFER_STRIDED_PADDED, off by default), a strided conv whose
    transposed GEMM reads its pixel rows in place takes its input as the padded image its 1x1
    producer writes; the pair matches onnx.reference."""
    monkeypatch.setattr(conv_gemm, "OFFER_STRIDED_PADDED", True)
    _padded_pair(x_shape, w1_shape, w2_shape, attrs, trans)


def _padded_pair(x_shape, w1_shape, w2_shape, attrs, trans):
    dev = _default_tiles()
    x, w1, b1, w2, b2 = rand(*x_shape), rand(*w1_shape), rand(w1_shape[0]), rand(*w2_shape), rand(w2_shape[0])
    conv1 = helper.make_node("FusedConv", ["x", "w1", "b1"], ["mid"], domain="clglow", activation="Relu")
    conv2 = helper.make_node("Conv", ["mid", "w2", "b2"], ["y"], **attrs)
    mid = np.maximum(reference(helper.make_node("Conv", ["x", "w1", "b1"], ["m"]), {"x": x}, {"w1": w1, "b1": b1},
                               17)[0], 0).astype(np.float32)
    y = reference(helper.make_node("Conv", ["mid", "w2", "b2"], ["y"], **attrs), {"mid": mid}, {"w2": w2, "b2": b2},
                  17)[0]
    op2, ctx2 = lower_ctx(conv2, {"mid": mid}, {"w2": w2, "b2": b2}, {"y": (y.shape, np.float32)}, 17, dev)
    op2.lower(ctx2)
    layout = ctx2.offer_padded_in
    assert layout is not None
    op1, ctx1 = lower_ctx(conv1, {"x": x}, {"w1": w1, "b1": b1}, {"mid": (mid.shape, np.float32)}, 17, dev)
    op1.lower(ctx1)
    assert ctx1.offer_padded_out
    ctx1.out_layout, ctx2.in_layout = layout, layout
    first, second = op1.lower(ctx1), op2.lower(ctx2)
    assert [ln.kernel for ln in first] == ["gemm"] and [ln.kernel for ln in second] == ["gemm"], (first, second)
    assert all(("-DC_TRANS=1" in ln.build_options()) == trans for ln in first + second), (first, second)
    zeros = np.zeros(layout.nbytes(x_shape[0], w1_shape[0]) // 4, np.float32)
    got = execute(first + second, {"x": x, "mid": zeros, "w1": w1, "b1": b1, "w2": w2, "b2": b2},
                  {"y": y.astype(np.float32)})["y"]
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-4)


def test_padded_offers_only_where_supported():
    """No padded output from a conv with a residual or groups, no padded input for a pointwise
    or a strided conv (phase images, or a padded image not offered: OFFER_STRIDED_PADDED)."""
    dev = _default_tiles()
    x = rand(1, 8, 20, 30)
    cases = [(helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], domain="clglow"), (8, 8, 1, 1), True, False),
             (helper.make_node("Conv", ["x", "w"], ["y"], group=2), (8, 4, 1, 1), False, False),
             (helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]), (8, 8, 3, 3), False, False),
             (helper.make_node("Conv", ["x", "w"], ["y"]), (8, 8, 1, 1), False, True),
             # a strided 3x3 on the transposed GEMM's pixel rows: no offer (OFFER_STRIDED_PADDED)
             (helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]), (64, 8, 3, 3), False,
              False)]
    for node, w_shape, residual, padded_out in cases:
        w = rand(*w_shape)
        yref = reference(helper.make_node("Conv", ["x", "w"], ["y"], **{a.name: helper.get_attribute_value(a)
                                                                        for a in node.attribute}), {"x": x}, {"w": w}, 17)[0]
        feeds = {"x": x, **({"z": rand(*yref.shape)} if residual else {})}
        op, ctx = lower_ctx(node, feeds, {"w": w}, {"y": (yref.shape, np.float32)}, 17, dev)
        op.lower(ctx)
        assert ctx.offer_padded_in is None and ctx.offer_padded_out == padded_out, node


@pytest.mark.parametrize("act,alpha,beta", ACTS, ids=[a[0] or "none" for a in ACTS])
def test_fused_activations(act, alpha, beta):
    fused_check((2, 5, 9, 11), (7, 5, 3, 3), act, alpha, beta, pads=[1, 1, 1, 1])


@pytest.mark.parametrize("act,alpha,beta", [ACTS[1], ACTS[2], ACTS[4]], ids=["Relu", "Clip", "Sigmoid"])
def test_fused_depthwise(act, alpha, beta):
    fused_check((1, 6, 10, 9), (6, 1, 3, 3), act, alpha, beta, group=6, pads=[1, 1, 1, 1])
    # whole 16-output tiles of the stride-1 and stride-2 vector paths, with the residual
    fused_check((1, 4, 6, 40), (4, 1, 3, 3), act, alpha, beta, group=4, pads=[1, 1, 1, 1])
    fused_check((1, 4, 6, 75), (4, 1, 3, 3), act, alpha, beta, group=4, pads=[1, 1, 1, 1], strides=[2, 2])


def test_fused_pointwise_residual():
    """The ResNet bottleneck's last 1x1: bias + residual + Relu in the GEMM epilogue, X in place."""
    fused_check((2, 8, 16, 16), (12, 8, 1, 1), "Relu", 0.0, 0.0)
    fused_check((1, 8, 7, 7), (12, 8, 1, 1), "Relu", 0.0, 0.0)
    # N = 28*28 = 784 (ragged): the last column tile overlaps its neighbour (gemm.cl), batch 2
    fused_check((2, 16, 28, 28), (24, 16, 1, 1), "Relu", 0.0, 0.0)


def test_fused_no_bias_no_residual():
    fused_check((1, 3, 8, 8), (4, 3, 3, 3), "LeakyRelu", 0.2, 0.0, residual=False, bias=False)


def test_fused_grouped_residual():
    fused_check((2, 6, 9, 9), (6, 3, 3, 3), "Relu", 0.0, 0.0, group=2, pads=[1, 1, 1, 1], strides=[2, 2])


def test_resnet_like_layers():
    """Real layer sizes: 3x3 over 64 channels at 56x56, and a strided 3x3 at 28x28."""
    conv_check((1, 64, 56, 56), (64, 64, 3, 3), pads=[1, 1, 1, 1])
    conv_check((1, 128, 28, 28), (256, 128, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2])


SMALL_N = [
    # few output pixels, many channels: the transposed GEMM (pixels as rows, C stored transposed)
    ((1, 64, 7, 7), (96, 64, 3, 3), dict(pads=[1, 1, 1, 1])),                 # N = 49: MR = 7
    ((2, 48, 5, 5), (70, 48, 1, 1), {}),                                      # 1x1 in place, ragged M
    ((2, 32, 9, 9), (80, 32, 1, 1), dict(strides=[2, 2])),                    # strided 1x1, N = 25
    ((2, 16, 6, 6), (128, 8, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),        # groups, N = 36
    ((1, 20, 11, 11), (66, 20, 3, 3), dict(strides=[2, 2], dilations=[2, 2], pads=[2, 1, 2, 1])),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", SMALL_N, ids=[str(i) for i in range(len(SMALL_N))])
def test_small_n_transposed(x_shape, w_shape, attrs):
    conv_check(x_shape, w_shape, **attrs)
    ones = [a for a in ACTS if a[0] in ("Relu", "Clip")]
    for act, alpha, beta in ones:
        fused_check(x_shape, w_shape, act, alpha, beta, **attrs)


SMALL_N_IMPLICIT = [
    # the transposed GEMM reading its pixels in place (gemm.cl flag 8): ResNet's 14x14 layers
    ((2, 64, 14, 14), (96, 64, 1, 1), {}, False),                                  # 1x1: X itself
    ((1, 32, 14, 14), (64, 32, 3, 3), dict(pads=[1, 1, 1, 1]), True),              # phase images
    ((2, 24, 28, 28), (64, 24, 1, 1), dict(strides=[2, 2]), False),                # strided 1x1: X itself
    ((1, 24, 27, 27), (64, 24, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),  # padded image, strided
    ((1, 8, 23, 17), (64, 8, 3, 2), dict(strides=[3, 2], pads=[1, 0, 2, 1], dilations=[2, 1]), True),
    ((1, 8, 21, 21), (64, 8, 1, 1), dict(strides=[3, 2]), False),                  # 7 x 11 of 21 x 21
    ((2, 16, 13, 13), (128, 8, 1, 1), dict(group=2), False),                       # groups, 169 = 24*7 + 1
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,phases", SMALL_N_IMPLICIT,
                         ids=[str(i) for i in range(len(SMALL_N_IMPLICIT))])
def test_small_n_implicit_rows(x_shape, w_shape, attrs, phases):
    """Bias, residual and activations through the transposed store with padding rows skipped,
    a ragged last row tile computed overlapping its neighbour; no im2col or pack launch, and a
    copy of X (`phases`: conv_phases) only for a padded conv: a strided 1x1 reads X itself."""
    dev = _default_tiles()
    g = attrs.get("group", 1)
    geom = _geom(x_shape, w_shape, attrs.get("pads", (0,) * 4), attrs.get("strides", (1, 1)),
                 attrs.get("dilations", (1, 1)), groups=g)
    cfg = transposed_config(dev, gemm_config(dev), w_shape[0] // g, geom[2] * geom[3])
    assert cfg is not None and conv_gemm.implicit_rows_ok(dev, cfg, ConvGeometry(*geom))
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    launches = lower(node, {"x": x}, {"w": w, "b": b},
                     {"y": ((x_shape[0], w_shape[0], geom[2], geom[3]), np.float32)}, device=dev)
    names = [l.kernel for l in launches]
    assert names.count("conv_phases") == (1 if phases else 0) and not {"im2col", "pack_b"} & set(names), names
    # the rows are the output pixels: no tile for the phase images' padding columns
    assert [l.gsize[0] for l in launches if l.kernel == "gemm"] == [-(-geom[2] * geom[3] // cfg.mr)]
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)
    fused_check(x_shape, w_shape, "Relu", 0.0, 0.0, device=dev, **attrs)
    fused_check(x_shape, w_shape, "Clip", -0.5, 0.7, residual=False, device=dev, **attrs)


def test_small_n_uses_transposed_tiles():
    cfg = GemmConfig(12, 16, 2, (1, 1, 1))
    assert transposed_config(CPU, cfg, 512, 49).mr == 7
    assert transposed_config(CPU, cfg, 2048, 49).mr == 7
    assert transposed_config(CPU, cfg, 512, 3136) is None
    assert transposed_config(CPU, cfg, 8, 49) is None
    assert transposed_config(GPU, cfg, 512, 49) is None  # the GPU family keeps the plain GEMM


# --- implicit GEMM (phase images + row offsets, gemm.cl implicit flag) ---------------------------------
def _default_tiles():
    """The test device with the AVX-512 CPU tile defaults (12 x 32 tiles of float16): the path
    choices below are asserted for them, and they run on any CPU device (an AVX2 pocl, or one
    a session elsewhere in the run tuned to other tiles)."""
    info = dataclasses.replace(device_info(), gemm_tiles=None, preferred_vector_width_float=16)
    if not info.is_cpu_family:
        pytest.skip("the implicit GEMM paths are taken under the CPU family only")
    return info


def _geom(x_shape, w_shape, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), groups=1):
    """The ConvGeometry fields of a conv, as a tuple (h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw,
    images, cin, cout, groups)."""
    h, w = x_shape[2:]
    kh, kw = w_shape[2:]
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    return (h, w, oh, ow, kh, kw, *strides, pads[0], pads[1], *dilations, x_shape[0], x_shape[1], w_shape[0], groups)


IMPLICIT = [
    ((1, 5, 9, 40), (7, 5, 3, 3), dict(pads=[1, 1, 1, 1])),                         # stride 1, one phase
    ((2, 3, 12, 120), (6, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),       # the stem: 4 phases
    ((1, 4, 11, 58), (5, 4, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),        # ResNet's 56 -> 28
    ((1, 3, 10, 100), (4, 3, 3, 4), dict(pads=[0, 2, 1, 0], strides=[1, 3])),       # asymmetric, 3 phases
    ((1, 3, 9, 60), (4, 3, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),       # dilated
    ((2, 6, 8, 45), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1], group=2)),                # grouped
    ((3, 2, 1, 70), (3, 2, 1, 5), dict(pads=[0, 2, 0, 2])),                         # a 1-D conv as 2-D
    ((2, 6, 16, 70), (5, 6, 1, 1), dict(strides=[2, 2])),                           # strided 1x1: one phase
    ((1, 3, 12, 99), (4, 3, 1, 2), dict(strides=[3, 2], pads=[0, 1, 0, 0])),        # 1 x 2 phases
    ((1, 3, 7, 7), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                          # pitch 8: rows per vector
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", IMPLICIT, ids=[str(i) for i in range(len(IMPLICIT))])
def test_implicit_conv(x_shape, w_shape, attrs):
    dev = _default_tiles()
    cfg = fit_rows(dev, gemm_config(dev), w_shape[0] // attrs.get("group", 1))
    geom = _geom(x_shape, w_shape, attrs.get("pads", (0,) * 4), attrs.get("strides", (1, 1)),
                 attrs.get("dilations", (1, 1)), attrs.get("group", 1))
    assert conv_gemm.implicit_ok(dev, cfg, ConvGeometry(*geom))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    oh, ow = geom[2:4]
    names = [l.kernel for l in lower(node, {"x": x}, {"w": w, "b": b},
                                     {"y": ((x_shape[0], w_shape[0], oh, ow), np.float32)}, device=dev)]
    assert "conv_phases" in names and "im2col" not in names, names
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


PHASE_SPLITS = [  # (x shape, kh, kw, strides, pads, dilations): X split into the phase images its taps read
    ((1, 3, 12, 120), 7, 7, (2, 2), (3, 3), (1, 1)),  # the stem: both column phases, one row read each
    ((2, 4, 11, 58), 3, 3, (2, 2), (1, 1), (1, 1)),   # ResNet's 56 -> 28
    ((1, 2, 9, 13), 3, 3, (2, 2), (0, 0), (1, 1)),    # no padding, rows under 16 columns
    ((1, 2, 10, 37), 5, 5, (2, 2), (2, 2), (1, 1)),   # two padding columns, an odd width
    ((1, 3, 12, 33), 1, 2, (3, 2), (0, 1), (1, 1)),   # one row phase, two column phases
    ((1, 2, 8, 40), 3, 3, (1, 3), (1, 1), (1, 1)),    # three column phases (conv_phases)
    ((1, 2, 9, 31), 3, 3, (2, 2), (2, 2), (2, 2)),    # dilated: one phase each way (conv_phases)
]


@pytest.mark.parametrize("x_shape,kh,kw,strides,pads,dil", PHASE_SPLITS,
                         ids=[str(i) for i in range(len(PHASE_SPLITS))])
def test_phase_images(x_shape, kh, kw, strides, pads, dil):
    """conv_phases (a plane per work-item, or both column phases: conv_gemm.phase_kernel) writes
    every phase image the implicit GEMM reads: X[ci][yy*SH + py - PH][xx*SW + px - PW], zeros
    outside X, padding columns and the extra bottom row included (numpy oracle; the scratch
    starts as NaNs)."""
    from clglow.lower.base import Launch, i32, round_up

    n, c, h, w = x_shape
    oh = (h + 2 * pads[0] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (w + 2 * pads[1] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    g = ConvGeometry(h, w, oh, ow, kh, kw, *strides, *pads, *dil, n, c, 8, 1)
    nh, nw, hph, wph = conv_gemm.phase_geometry(g)
    x = rand(*x_shape)
    want = np.zeros((n, c, nh, nw, hph, wph), np.float32)
    for py in range(nh):
        for px in range(nw):
            for yy in range(hph):
                for xx in range(wph):
                    iy, ix = yy * strides[0] + py - pads[0], xx * strides[1] + px - pads[1]
                    if 0 <= iy < h and 0 <= ix < w:
                        want[:, :, py, px, yy, xx] = x[:, :, iy, ix]
    kernel, per_item = conv_gemm.phase_kernel(strides[1], nw)
    assert (per_item == 2) == (strides[1] == 2 and nw == 2)
    per_img = c * nh * nw * hph * wph
    args = [Buf("x"), i32(0), i32(c * h * w), i32(c), i32(h), i32(w), Buf("y"), i32(per_img), i32(hph), i32(wph),
            *(i32(v) for v in (*strides, *pads, nh, nw))]
    gsize = (-(-hph // 8), round_up(c * nh * nw // per_item, 16), n)
    launch = Launch("im2col", kernel, gsize, args, (1, 16, 1), {})
    got = execute([launch], {"x": x, "y": np.full(want.size, np.nan, np.float32)}, {"y": want.ravel()})["y"]
    np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("act,alpha,beta", [ACTS[1], ACTS[3], ACTS[6]], ids=["Relu", "LeakyRelu", "Tanh"])
def test_implicit_fused_residual(act, alpha, beta):
    """Bias, residual and activation in the remapped epilogue (whole vectors and runs of pixels
    across row ends), with a ragged row tile (M = 13): pitches 51 and 36, 8 (several rows per
    vector) and a strided 1x1 (pitch = width: every vector whole)."""
    dev = _default_tiles()
    fused_check((2, 6, 10, 50), (13, 6, 3, 3), act, alpha, beta, pads=[1, 1, 1, 1], device=dev)
    fused_check((1, 3, 16, 70), (13, 3, 5, 5), act, alpha, beta, pads=[2, 2, 2, 2], strides=[2, 2], device=dev)
    fused_check((2, 4, 7, 7), (13, 4, 3, 3), act, alpha, beta, pads=[1, 1, 1, 1], device=dev)
    fused_check((1, 6, 16, 70), (13, 6, 1, 1), act, alpha, beta, strides=[2, 2], device=dev)


@pytest.mark.parametrize("cap", [1, 2 * 4 * 11 * 42 * 4 + 1])
def test_implicit_pieces(monkeypatch, cap):
    """Phase images made per image or per run of images within the scratch cap."""
    monkeypatch.setattr(conv_gemm, "SCRATCH_CAP", cap)
    conv_check((5, 4, 9, 40), (5, 4, 3, 3), pads=[1, 1, 1, 1])
    fused_check((3, 4, 9, 40), (6, 4, 3, 3), "Relu", 0.0, 0.0, pads=[1, 1, 1, 1])


@pytest.mark.parametrize("case", [0, 1, 3, 4, 5, 7, 8])
def test_implicit_offsets(case):
    """koff[k] addresses tap (ky, kx) of channel ci in the phase images exactly where a direct
    reading of the padded input says it should be, for every valid output pixel."""
    x_shape, w_shape, attrs = IMPLICIT[case]
    geom = _geom(x_shape, w_shape, attrs.get("pads", (0,) * 4), attrs.get("strides", (1, 1)),
                 attrs.get("dilations", (1, 1)))
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw = geom[:12]
    cin_g = w_shape[1]
    g = ConvGeometry(*geom[:12], cin=cin_g)
    nh, nw, hph, wph = conv_gemm.phase_geometry(g)
    koff = conv_gemm.implicit_offsets(g)
    assert koff.shape == (cin_g * kh * kw,)
    # the phase images of a random input, built directly from the definition
    x = rand(cin_g, h, w)
    xp = np.zeros((cin_g, (hph + 1) * sh + kh * dh, (wph + 1) * sw + kw * dw), np.float32)
    xp[:, ph:ph + h, pw:pw + w] = x
    phases = np.stack([xp[:, py::sh, px::sw][:, :hph, :wph] for py in range(nh) for px in range(nw)], axis=1)
    flat = phases.ravel()
    for k in range(cin_g * kh * kw):
        ci, r = divmod(k, kh * kw)
        ky, kx = divmod(r, kw)
        y, xx = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
        got = flat[koff[k] + y * wph + xx]
        want = xp[ci, y * sh + ky * dh, xx * sw + kx * dw]
        np.testing.assert_array_equal(got, want)


def test_implicit_choice_resnet50():
    """Where the implicit GEMM is taken on a CPU device: ResNet-50's stem and its 56x56 and 28x28
    3x3 convs (little padding waste) and its strided 1x1 (one phase image: X subsampled), not
    the 14x14 ones (the transposed GEMM comes first)."""
    cfg = GemmConfig(12, 16, 2, (1, 1, 1))
    G = ConvGeometry
    ok = conv_gemm.implicit_ok
    assert ok(CPU, cfg, G(224, 224, 112, 112, 7, 7, 2, 2, 3, 3, 1, 1))
    assert ok(CPU, cfg, G(56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1))
    assert ok(CPU, cfg, G(56, 56, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1))
    assert ok(CPU, cfg, G(28, 28, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1))
    assert transposed_config(CPU, cfg, 256, 14 * 14) is not None  # taken before implicit_ok
    tcfg = transposed_config(CPU, cfg, 256, 14 * 14)
    rows_ok = conv_gemm.implicit_rows_ok
    assert rows_ok(CPU, tcfg, G(14, 14, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, cout=256))  # 210 rows
    assert rows_ok(CPU, tcfg, G(14, 14, 14, 14, 1, 1, 1, 1, 0, 0, 1, 1, cout=256))  # X in place
    assert not rows_ok(CPU, tcfg, G(14, 14, 14, 14, 1, 1, 1, 1, 0, 0, 1, 1, cout=1024))  # conv3
    tcfg = transposed_config(CPU, cfg, 512, 7 * 7)
    assert not rows_ok(CPU, tcfg, G(7, 7, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, cout=512))  # 56 rows
    assert ok(CPU, cfg, G(56, 56, 28, 28, 1, 1, 2, 2, 0, 0, 1, 1))  # downsample: one phase
    assert conv_gemm.phase_geometry(G(56, 56, 28, 28, 1, 1, 2, 2, 0, 0, 1, 1)) == (1, 1, 29, 28)
    # taps reading phases 0 and 2 of 4 (dilation 2, stride 4): im2col
    assert not ok(CPU, cfg, G(40, 200, 10, 50, 2, 2, 4, 4, 0, 0, 2, 2))
    # the GPU family keeps im2col
    assert not ok(GPU, GemmConfig(4, 4, 1, (8, 8, 1)), G(56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1))


def test_conv_tiles_fit_the_computed_columns():
    """24 output channels, 3x3 at 15x15: the implicit GEMM computes 15 x 16 padded-linear
    columns, 256 with 32-column tiles and 240 with 48-column ones, so the 12 x 32 config runs
    8 x 48 tiles (by its rows alone, 24 = 2 x 12, it would keep 12 x 32)."""
    dev = dataclasses.replace(_default_tiles(), gemm_tiles=(12, 16, 2, (1, 1, 1)))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    x, w, b = rand(2, 5, 15, 15), rand(24, 5, 3, 3), rand(24)
    gemms = [l for l in lower(node, {"x": x}, {"w": w, "b": b}, {"y": ((2, 24, 15, 15), np.float32)}, device=dev)
             if l.kernel == "gemm"]
    assert gemms and all((l.defines["MR"], l.defines["NV"]) == (8, 3) for l in gemms), [l.defines for l in gemms]
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)


DW3 = [
    ((2, 3, 37, 14), (3, 1, 3, 3), dict(pads=[1, 1, 1, 1])),                 # rows < 16, OH = 37 = 4 x 8 + 5
    ((1, 2, 20, 35), (2, 1, 3, 3), dict()),                                   # no padding, ragged 3-column tile
    ((1, 3, 33, 70), (3, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),  # stride 2: in-row and edge tiles
    ((1, 2, 9, 15), (4, 1, 3, 3), dict(pads=[0, 1, 1, 0], strides=[2, 2])),   # asymmetric pads, multiplier 2
    ((1, 2, 18, 16), (2, 1, 3, 3), dict(pads=[1, 1, 1, 1])),                  # W = 16: one edge tile per row
    ((1, 2, 6, 40), (2, 1, 3, 3), dict(pads=[2, 2, 2, 2])),                   # pad 2: two zero columns and rows
    ((1, 3, 10, 20), (3, 1, 3, 3), dict(pads=[1, 1, 1, 1])),                  # pad 1: the shifted-in zero lane
    ((2, 3, 19, 40), (3, 1, 5, 5), dict(pads=[2, 2, 2, 2])),                  # 5x5 (EfficientNet), pad 2
    ((1, 4, 23, 57), (4, 1, 5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2])),  # 5x5 stride 2
    ((1, 2, 12, 13), (2, 1, 5, 5), dict(pads=[1, 2, 2, 1], strides=[2, 2])),  # 5x5 narrow, asymmetric
    ((1, 2, 17, 44), (2, 1, 7, 7), dict(pads=[3, 3, 3, 3])),                  # 7x7
    ((1, 2, 17, 44), (4, 1, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),  # 7x7 stride 2, multiplier 2
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", DW3, ids=[str(i) for i in range(len(DW3))])
def test_depthwise_rows(x_shape, w_shape, attrs):
    """The KxK stride-1/2 depthwise kernel (8 output rows x 16 columns per work-item) against
    the reference, on the geometries its paths split on: loads straight from the row (also
    reading on into the next row for lanes that are not stored), a left padding column shifted
    in, the private segment (other paddings, narrow rows, the end of X)."""
    g = x_shape[1]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=g, **attrs)
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    y_shape = reference(node, {"x": x}, {"w": w, "b": b}, 17)[0].shape
    names = [l.kernel for l in lower(node, {"x": x}, {"w": w, "b": b}, {"y": (y_shape, np.float32)})]
    assert names == ["dwconv_rows"], names
    check(node, {"x": x}, {"w": w, "b": b})


@pytest.mark.parametrize("act,alpha,beta", [ACTS[8], ACTS[2]], ids=["Swish", "Clip"])
def test_fused_depthwise_narrow_rows(act, alpha, beta):
    """Residual and activation on tiles narrower than 16 (the 14x14 and 28x28 layers)."""
    fused_check((2, 5, 14, 14), (5, 1, 3, 3), act, alpha, beta, group=5, pads=[1, 1, 1, 1])
    fused_check((1, 4, 28, 28), (4, 1, 3, 3), act, alpha, beta, group=4, pads=[1, 1, 1, 1], strides=[2, 2])


TRANSPOSED_ROWS = [  # strided convs the conv family may store "transposed rows" for (x, w, attrs, launches)
    ((1, 32, 56, 56), (64, 32, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), ["conv_phases", "gemm"]),  # 784 px
    ((2, 8, 47, 61), (72, 8, 3, 2), dict(strides=[2, 3], pads=[1, 0, 2, 1], dilations=[2, 1]),
     ["conv_phases", "gemm"]),
    ((2, 16, 40, 40), (96, 16, 1, 1), dict(strides=[2, 2]), ["gemm"]),  # a strided 1x1: X itself
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,kernels", TRANSPOSED_ROWS,
                         ids=[str(i) for i in range(len(TRANSPOSED_ROWS))])
def test_transposed_rows_from_the_conv_familys_tuning_entry(x_shape, w_shape, attrs, kernels):
    """A strided conv with many output pixels (N > 8 column tiles, past transposed_config) is
    offered "transposed rows" in the conv family's space (after the default), and a database
    entry choosing it lowers the node to the transposed GEMM over its pixel rows read in place
    (the padded image's copy, or none for a 1x1), with bias, residual and activations as
    onnx.reference computes them."""
    from clglow.lower import tunable

    dev = _default_tiles()
    g = ConvGeometry(*_geom(x_shape, w_shape, attrs.get("pads", (0,) * 4), attrs.get("strides", (1, 1)),
                            attrs.get("dilations", (1, 1))))
    assert g.npix > 8 * 32 and transposed_config(dev, gemm_config(dev), g.m, g.npix) is None
    key = dataclasses.astuple(g) + ("", True, False)
    point = {"path": "transposed rows", "variant": ""}
    space = conv_mod.conv_space(dev, key)
    assert point in space and space[0] != point, space
    tuned = dataclasses.replace(dev, tuned=(("conv", tunable.key_str(key), tunable.params_items(point)),))
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    launches = lower(node, {"x": x}, {"w": w, "b": b}, {"y": ((x_shape[0], w_shape[0], g.oh, g.ow), np.float32)},
                     device=tuned)
    assert [ln.kernel for ln in launches] == kernels
    assert "-DC_TRANS=1" in launches[-1].build_options()
    check(node, {"x": x}, {"w": w, "b": b}, device=tuned)
    for act, alpha, beta, residual in (("Relu", 0.0, 0.0, True), ("Clip", -0.5, 0.7, False)):
        fkey = dataclasses.astuple(g) + (act, True, residual)
        ftuned = dataclasses.replace(dev, tuned=(("conv", tunable.key_str(fkey), tunable.params_items(point)),))
        fused_check(x_shape, w_shape, act, alpha, beta, residual=residual, device=ftuned, **attrs)


def test_transposed_rows_offered_where_stated():
    """Only strided convs (a 1x1 stride-1 one reads X as B; stride-1 kxk ones measured level) with
    64 to 256 output channels per group (8 column tiles read in place), constant weights, under
    the CPU family."""
    from clglow.config import PlanOptions
    from clglow.lower.common import Epilogue

    def tiles(x_shape, w_shape, target=None, const=True, **attrs):
        g = ConvGeometry(*_geom(x_shape, w_shape, attrs.get("pads", (0,) * 4), attrs.get("strides", (1, 1))))
        return conv_mod.ConvCase(target or _default_tiles(), PlanOptions(), g, Epilogue(""), const).transposed_rows

    s2 = dict(strides=[2, 2], pads=[1, 1, 1, 1])
    assert tiles((1, 32, 56, 56), (64, 32, 3, 3), **s2).mr == 8  # 784 = 98 x 8 pixel rows
    assert tiles((1, 32, 56, 56), (256, 32, 3, 3), **s2) is not None
    assert tiles((1, 32, 56, 56), (512, 32, 3, 3), **s2) is None     # 16 column tiles
    assert tiles((1, 32, 56, 56), (32, 32, 3, 3), **s2) is None      # under 2 column tiles
    assert tiles((1, 32, 56, 56), (64, 32, 3, 3), pads=[1, 1, 1, 1]) is None  # stride 1
    assert tiles((1, 32, 56, 56), (64, 32, 3, 3), const=False, **s2) is None
    gpu = dataclasses.replace(_default_tiles(), family="gpu")
    assert tiles((1, 32, 56, 56), (64, 32, 3, 3), target=gpu, **s2) is None
