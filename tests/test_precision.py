"""SessionOptions(precision=...): half storage of float tensors (passes/precision.py,
kernels_cl/storage.h), the kernels' half paths against numpy, and the accuracy of whole models
in fp16 against their fp32 runs (bounds measured on pocl 3.1, stated with each test)."""
from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "kernels"))

import clglow  # noqa: E402
from clglow.errors import InvalidArgument  # noqa: E402
from clglow.passes.precision import apply_precision, half_pays, resolve_precision  # noqa: E402
from clglow.target import Target  # noqa: E402
from harness import run  # noqa: E402
from models import causal_decoder, mobilenet_se, pooling_cnn, sample_inputs, transformer_encoder  # noqa: E402

F16, F32 = np.float16, np.float32


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def _half(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(F16)


def _check_half(node, feeds: dict, consts: dict, expected: np.ndarray, rtol: float = 1e-3) -> None:
    """The node's launches on half storage vs `expected` (float32 math on the half values, rounded
    to half as the kernel's store does: 1 ulp of half is 2^-11 relative)."""
    (got,), _ = run(node, feeds, consts, expected=[expected.astype(F16)])
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), expected.astype(F16).astype(F32), rtol=rtol,
                               atol=rtol * float(np.abs(expected).max()))


_CONV_SRC = """
#include "storage.h"
__kernel void h2f(__global const half* x, __global float* y) {
    const int i = get_global_id(0);
    if (i % 2) ST_STV(0, 16, y + 16 * i, ST_LDV(1, 16, x + 16 * i));
    else for (int j = 0; j < 16; ++j) y[16 * i + j] = ST_LD(1, x, 16 * i + j);
}
__kernel void f2h(__global const float* x, __global half* y) {
    const int i = get_global_id(0);
    if (i % 2) ST_STV(1, 16, y + 16 * i, ST_LDV(0, 16, x + 16 * i));
    else for (int j = 0; j < 16; ++j) ST_ST(1, y, 16 * i + j, x[16 * i + j]);
}
"""


def test_storage_conversions_exact():
    """storage.h's inline half <-> float conversions, scalar and 16-lane: every half bit pattern
    to float, and float to half rounded to nearest even (subnormals, overflow to inf, NaN) on a
    million random float bit patterns and the edge cases, against numpy's astype."""
    import pyopencl as cl

    from clglow.runtime.device import select_device

    dev = select_device()
    kdir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels_cl")
    prg = cl.Program(dev.context, _CONV_SRC).build(options=[f"-I{kdir}"])
    mf, q = cl.mem_flags, dev.queue

    def launch(name: str, x: np.ndarray, out_dtype) -> np.ndarray:
        y = np.empty(x.size, out_dtype)
        xb = cl.Buffer(dev.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
        yb = cl.Buffer(dev.context, mf.WRITE_ONLY, y.nbytes)
        getattr(prg, name)(q, (x.size // 16,), None, xb, yb)
        cl.enqueue_copy(q, y, yb)
        return y

    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(F16)
    got = launch("h2f", halves, F32)
    want = halves.astype(F32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all() and (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()
    bits = np.random.default_rng(11).integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e10, np.inf, -np.inf, np.nan, 2 ** -24, 2 ** -25,
                      3 * 2 ** -26, 2 ** -14, 2 ** -14 * (1 - 2 ** -11), 1 + 2 ** -11, 1 + 3 * 2 ** -11], F32)
    floats = np.concatenate([bits.view(F32), edges, np.zeros(16 - edges.size % 16, F32)])
    got = launch("f2h", floats, F16)
    with np.errstate(over="ignore"):
        want = floats.astype(F16)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint16) == want[~nan].view(np.uint16)).all()


# --- kernels on half storage vs numpy -----------------------------------------------------------------
@pytest.mark.parametrize("m,k,n,b_const", [(64, 96, 80, True), (37, 50, 128, False), (37, 50, 129, False),
                                           (5, 33, 64, True)])
def test_matmul_half_storage(m, k, n, b_const):
    """gemm.cl with A, B and C in half (B packed constant panels or read in place; a live B it packs
    first, 129 columns, goes through float32 copies)."""
    rng = np.random.default_rng(m)
    a, b = _half(rng, m, k), _half(rng, k, n)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    feeds, consts = ({"a": a}, {"b": b}) if b_const else ({"a": a, "b": b}, {})
    _check_half(node, feeds, consts, a.astype(F32) @ b.astype(F32), rtol=2e-3)


def test_matmul_half_on_float_paths():
    """A one-row product (the GEMV path, float32 only) on half storage: converted around it."""
    rng = np.random.default_rng(1)
    a, b = _half(rng, 1, 64), _half(rng, 64, 48)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    _check_half(node, {"a": a}, {"b": b}, a.astype(F32) @ b.astype(F32), rtol=2e-3)


@pytest.mark.parametrize("sa,sb", [((4, 33), (4, 33)), ((6, 40), (40,)), ((3, 1, 5), (1, 4, 5))])
def test_binary_half_storage(sa, sb):
    """Add with both operands half (flat, rows and general broadcast kernels), and Mul mixing a
    half and a float32 operand."""
    rng = np.random.default_rng(2)
    a, b = _half(rng, *sa), _half(rng, *sb)
    _check_half(helper.make_node("Add", ["a", "b"], ["y"]), {"a": a, "b": b}, {}, a.astype(F32) + b.astype(F32))
    bf = b.astype(F32) * 1.5
    _check_half(helper.make_node("Mul", ["a", "b"], ["y"]), {"a": a, "b": bf}, {}, a.astype(F32) * bf)


@pytest.mark.parametrize("op,fn", [("Sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("Tanh", np.tanh),
                                   ("Softsign", lambda x: x / (1 + np.abs(x)))])
def test_unary_half_storage(op, fn):
    """Vector (fused_elementwise.cl, ragged tail) and scalar (elementwise.cl) unary kernels."""
    x = _half(np.random.default_rng(3), 5, 37)
    _check_half(helper.make_node(op, ["x"], ["y"]), {"x": x}, {}, fn(x.astype(F32)))


def test_moves_and_select_half_storage():
    """Transpose, Concat, Gather move half bits; Where and Clip compute on them."""
    rng = np.random.default_rng(4)
    x, z = _half(rng, 3, 20, 7), _half(rng, 3, 20, 7)
    _check_half(helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1]), {"x": x}, {}, x.transpose(2, 0, 1))
    _check_half(helper.make_node("Concat", ["x", "z"], ["y"], axis=1), {"x": x, "z": z}, {},
                np.concatenate([x, z], axis=1))
    idx = np.array([2, 0, 2], np.int64)
    _check_half(helper.make_node("Gather", ["x", "i"], ["y"], axis=0), {"x": x}, {"i": idx}, x[idx])
    c = rng.random((3, 20, 7)) > 0.5
    _check_half(helper.make_node("Where", ["c", "x", "z"], ["y"]), {"c": c, "x": x, "z": z}, {}, np.where(c, x, z))
    lo, hi = np.array(-0.5, F32), np.array(0.75, F32)
    _check_half(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x}, {"lo": lo, "hi": hi},
                np.clip(x.astype(F32), -0.5, 0.75))


@pytest.mark.parametrize("shape,axis", [((6, 37), -1), ((2, 5, 40), 1), ((3, 7, 5), 1), ((4, 9), -1)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_half_storage(shape, axis, op):
    """softmax.cl's row kernels (last axis with a ragged tail, inner axis by 16 columns and the
    partial run, scalar rows) on half x and y: max, sum and exp in float32."""
    x = (3 * _half(np.random.default_rng(7), *shape)).astype(F16)
    xf = x.astype(F32)
    e = np.exp(xf - xf.max(axis=axis, keepdims=True))
    ref = e / e.sum(axis=axis, keepdims=True)
    ref = np.log(ref) if op == "LogSoftmax" else ref
    _check_half(helper.make_node(op, ["x"], ["y"], axis=axis), {"x": x}, {}, ref)


# --- resolution, options, the pass ------------------------------------------------------------------
def test_auto_resolves_by_profile():
    """auto: fp16 only where the device reports cl_khr_fp16 and the profile says it pays."""
    assert resolve_precision("auto", Target(type="gpu", has_fp16=False)) == "fp32"
    assert resolve_precision("auto", Target(type="gpu", has_fp16=True)) == "fp16"
    assert resolve_precision("auto", Target(type="cpu", has_fp16=True)) == "fp32"  # converts every load
    assert resolve_precision(None, Target()) == "fp32"
    assert resolve_precision("fp16", Target(has_fp16=False)) == "fp16"  # storage needs no cl_khr_fp16
    with pytest.raises(ValueError, match="fp32, fp16, auto"):
        resolve_precision("bf16", Target())


def _small_model():
    """x -> MatMul(W) -> Add(b) -> Sigmoid -> TopK(values, indices) and a Softmax output."""
    rng = np.random.default_rng(5)
    w, b = rng.standard_normal((32, 24)).astype(F32), rng.standard_normal(24).astype(F32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], axis=-1)]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, [4, 24]),
                           helper.make_tensor_value_info("v", TensorProto.FLOAT, [4, 3]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [4, 3])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                           numpy_helper.from_array(np.array([3], np.int64), "k")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_fp16_keeps_model_types_and_is_close():
    """Inputs and outputs keep the model's types; the half activations are inside; the results
    are within half's rounding of fp32's (measured max relative 2e-4 on p)."""
    model = _small_model().SerializeToString()
    x = np.random.default_rng(6).standard_normal((4, 32)).astype(F32)
    ref = clglow.InferenceSession(model).run(None, {"x": x})
    sess = clglow.InferenceSession(model, clglow.SessionOptions(precision="fp16"))
    assert sess.precision == "fp16"
    assert [a.type for a in sess.get_inputs()] == ["tensor(float)"]
    assert [a.type for a in sess.get_outputs()] == ["tensor(float)", "tensor(float)", "tensor(int64)"]
    got = sess.run(None, {"x": x})
    assert [g.dtype for g in got] == [np.float32, np.float32, np.int64]
    assert any(v.dtype == F16 for v in sess.graph.values.values())
    np.testing.assert_allclose(got[0], ref[0], rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(got[1], ref[1], rtol=2e-3)


def test_auto_on_this_device_and_invalid_value():
    """auto resolves as the profile says on the test device (pocl: fp32, no half arithmetic on a
    CPU); a bad value is refused naming the option."""
    sess = clglow.InferenceSession(_small_model().SerializeToString(), clglow.SessionOptions(precision="auto"))
    assert sess.precision == ("fp16" if half_pays(sess._engine.target) else "fp32")
    if not sess._engine.target.has_fp16:
        assert sess.precision == "fp32"
    with pytest.raises(InvalidArgument, match="precision"):
        clglow.InferenceSession(_small_model().SerializeToString(), clglow.SessionOptions(precision="half"))


def test_pass_casts_where_storage_disagrees(caplog):
    """A half tensor read by a float32-only kernel gets one Cast; a graph output stored as half
    (a view of one) gets one at the edge; constants beyond the half range are clipped and counted;
    small constants (epsilons) stay float32."""
    from clglow.frontend.onnx_model import import_model

    big = np.full((4, 32), 1e6, F32)
    nodes = [helper.make_node("Add", ["x", "big"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Hardmax", ["r"], ["p"], axis=1), helper.make_node("Add", ["r", "eps"], ["e"]),
             helper.make_node("Reshape", ["e", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, [4, 32]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [128])],
                          [numpy_helper.from_array(big, "big"), numpy_helper.from_array(np.array(1e-12, F32), "eps"),
                           numpy_helper.from_array(np.array([128], np.int64), "shape")])
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with caplog.at_level(logging.WARNING, logger="clglow.passes.precision"):
        out = apply_precision(graph, "fp16", Target())
    assert "128 values of constant 'big'" in caplog.text
    assert out.values["big"].dtype == F16 and float(np.abs(out.values["big"].const).max()) == 65504.0
    assert out.values["eps"].dtype == F32
    assert out.values["a"].dtype == F16 and out.values["r"].dtype == F16
    casts = [n for n in out.nodes if n.op_type == "Cast"]
    assert len(casts) == 2  # before Hardmax (float32 only), and y's at the edge
    reduce = next(n for n in out.nodes if n.op_type == "Hardmax")
    assert out.values[reduce.inputs[0]].dtype == F32
    assert out.values["y"].dtype == F32 and out.values["p"].dtype == F32
    assert apply_precision(graph, "fp32", Target()) is graph


# --- whole models in fp16 vs fp32 ---------------------------------------------------------------------
def _fp16_vs_fp32(model, feeds: dict) -> tuple:
    data = model.SerializeToString()
    ref = clglow.InferenceSession(data).run(None, feeds)[0]
    sess = clglow.InferenceSession(data, clglow.SessionOptions(precision="fp16"))
    got = sess.run(None, feeds)[0]
    assert got.dtype == ref.dtype
    return got, ref, sess


def test_encoder_fp16_accuracy():
    """BERT-style encoder (2 layers, d 64, seq 16): relative error (L2) of the hidden states,
    measured 7.5e-4 on pocl; bound 3e-3."""
    model = transformer_encoder(seq=16)
    got, ref, sess = _fp16_vs_fp32(model, sample_inputs(model, seed=1, dims={"seq_len": 16}))
    assert sum(v.dtype == F16 for v in sess.graph.values.values()) > 20
    assert _rel(got, ref) < 3e-3


def test_decoder_fp16_accuracy():
    """GPT-2-style decoder (2 layers, d 64, vocab 512, 12 tokens): relative error of the logits,
    measured 1.1e-3 on pocl, bound 5e-3; the next token agrees at every position."""
    model = causal_decoder()
    got, ref, _ = _fp16_vs_fp32(model, sample_inputs(model, seed=1, dims={"seq": 12}))
    assert _rel(got, ref) < 5e-3
    assert (got[0].argmax(-1) == ref[0].argmax(-1)).all()


# the float32 activations each model keeps by design: the logits (a graph output, written float32
# by its producer), the SE blocks' gates (C values an image, clglow.SqueezeExcite writes float32),
# the pooling CNN's MaxPool before LRN (LRN reads float32 only) and LRN itself
_FLOAT32_KEPT = {"mobilenet_se": {"SqueezeExcite", "FusedMatMul"}, "pooling_cnn": {"Softmax", "MaxPool", "LRN"}}


@pytest.mark.parametrize("make,bound,half", [pytest.param(mobilenet_se, 5e-3, 26, marks=pytest.mark.slow),
                                             (pooling_cnn, 1e-3, 10)], ids=["mobilenet_se", "pooling_cnn"])
def test_cnn_fp16_accuracy(make, bound, half):
    """A MobileNet-style model (depthwise convs, SE blocks' pools and 1x1s, SiLU / ReLU6 fused)
    and a pooling CNN (max / average pools, LRN, Concat) in fp16: relative error of the logits
    measured 1.1e-3 and 8.4e-5 on pocl (bounds 5e-3, 1e-3), the classes agree, the activations
    between the convs and pools stay in half with no Cast left (every activation a node produces
    is half except those of _FLOAT32_KEPT's op types)."""
    model = make()
    got, ref, sess = _fp16_vs_fp32(model, sample_inputs(model, seed=1))
    producer = {o: n for n in sess.graph.nodes for o in n.outputs}
    kept = _FLOAT32_KEPT[make.__name__]
    wide = [(name, producer[name].op_type) for name, v in sess.graph.values.items()
            if name in producer and v.dtype != F16 and producer[name].op_type not in kept]
    assert not wide
    assert sum(v.dtype == F16 for v in sess.graph.values.values()) >= half
    assert not [n.name for n in sess.graph.nodes if n.op_type == "Cast"]
    assert _rel(got, ref) < bound
    assert (got.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.slow
def test_resnet50_fp16_top1():
    """ResNet-50 (clglow.models, seeded weights): top-1 of fp16 equals fp32's on 3 seeded images;
    relative error of the logits measured 6.7e-4 .. 7.1e-4 on pocl, bound 1e-2. Every activation
    between the input and the logits is stored in half (58 tensors: convs, pools, the classifier)
    and no Cast is left: the first conv reads the float32 input, the classifier writes float32."""
    from clglow.models import resnet50

    data = resnet50(seed=0).SerializeToString()
    s32 = clglow.InferenceSession(data)
    s16 = clglow.InferenceSession(data, clglow.SessionOptions(precision="fp16"))
    assert sum(v.dtype == F16 for v in s16.graph.values.values()) >= 50
    assert not [n.name for n in s16.graph.nodes if n.op_type == "Cast"]
    for seed in range(3):
        x = np.random.default_rng(seed).random((1, 3, 224, 224), dtype=np.float64).astype(F32)
        ref, got = s32.run(None, {"data": x})[0], s16.run(None, {"data": x})[0]
        assert got.dtype == np.float32
        assert int(got.argmax()) == int(ref.argmax())
        assert _rel(got, ref) < 1e-2


def test_fused_matmul_gemv_with_half_bias():
    """A one-row FusedMatMul (the float32-only GEMV) with half weights and a half bias constant:
    the bias, read in place, goes up as a float32 copy (it was read as float from half bits)."""
    rng = np.random.default_rng(8)
    w, b = rng.standard_normal((64, 40)).astype(F32), rng.standard_normal(40).astype(F32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], "fc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = clglow.InferenceSession(data, clglow.SessionOptions(precision="fp16"))
    x = rng.standard_normal((1, 64)).astype(F32)
    ref = x @ w.astype(F16).astype(F32) + b.astype(F16).astype(F32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [48, 50])
@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_layernorm_half_storage(op, length):
    """norm.cl's layernorm on half x and y (16-lane runs and a tail): mean and variance
    accumulated in float32, scale and bias float32."""
    rng = np.random.default_rng(9)
    x = (2 + _half(rng, 6, length)).astype(F16)
    scale, bias = rng.standard_normal(length).astype(F32), rng.standard_normal(length).astype(F32)
    xf = x.astype(F32)
    if op == "LayerNormalization":
        node = helper.make_node(op, ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)
        ref = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5) * scale + bias
        consts = {"s": scale, "b": bias}
    else:
        node = helper.make_node(op, ["x", "s"], ["y"], axis=-1, epsilon=1e-5)
        ref = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-5) * scale
        consts = {"s": scale}
    _check_half(node, {"x": x}, consts, ref, rtol=2e-3)


def test_backend_prepare_takes_precision():
    """onnx's Backend API: prepare(model, precision=...) reaches the session."""
    from clglow.backend import ClglowBackend

    rep = ClglowBackend.prepare(_small_model(), precision="fp16")
    x = np.random.default_rng(10).standard_normal((4, 32)).astype(F32)
    ref = clglow.InferenceSession(_small_model().SerializeToString()).run(None, {"x": x})
    got = rep.run([x])
    assert rep.session.precision == "fp16" and got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], ref[0], rtol=2e-3, atol=1e-4)


# --- convolutions and pools on half storage (lower/conv.py HALF_PATHS, im2col.cl X_HALF) ---------------
def _cpu_tiles():
    """The test device with the AVX-512 CPU tile defaults (as tests/kernels/test_conv.py): the
    paths below are forced through conv family database entries for these tiles."""
    import dataclasses

    from run_launches import device_info

    info = dataclasses.replace(device_info(), gemm_tiles=None, preferred_vector_width_float=16)
    if not info.is_cpu_family:
        pytest.skip("the conv paths forced here are the CPU family's")
    return info


def _conv_forced(x_shape, w_shape, attrs: dict, path: str, act: str, residual: bool, dev=None):
    """(device (default: the CPU tiles') with a database entry choosing `path`, the FusedConv node)."""
    import dataclasses

    from clglow.lower import tunable
    from clglow.lower.common import ConvGeometry

    dev = dev if dev is not None else _cpu_tiles()
    (ph, pw, _, _), (sh, sw) = attrs.get("pads", (0,) * 4), attrs.get("strides", (1, 1))
    dh, dw = attrs.get("dilations", (1, 1))
    (n, c, h, w), (m, cg, kh, kw) = x_shape, w_shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    g = ConvGeometry(h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, n, c, m, c // cg)
    key = dataclasses.astuple(g) + (act, True, residual)
    path, _, variant = path.partition(" F")
    variant = {"winograd": "F" + (variant or "2"), "gpu winograd": "F" + variant if variant else ""}.get(path, "")
    point = {"path": path, "variant": variant}
    dev = dataclasses.replace(dev, tuned=(("conv", tunable.key_str(key), tunable.params_items(point)),))
    node = helper.make_node("FusedConv", ["x", "w", "b", "z" if residual else ""], ["y"], domain="clglow",
                            activation=act, group=c // cg, **attrs)
    return dev, node


CONV_HALF = [  # (X, W, attributes, path forced, kernels on float32 copies expected)
    ((1, 16, 8, 12), (40, 16, 1, 1), {}, "pointwise", False),
    ((1, 5, 20, 40), (13, 5, 3, 3), dict(pads=[1, 1, 1, 1]), "implicit", False),
    ((2, 6, 15, 17), (24, 6, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), "implicit", False),
    ((1, 6, 11, 13), (20, 6, 3, 3), dict(pads=[1, 0, 1, 0], strides=[2, 2]), "im2col", False),
    ((1, 8, 7, 7), (300, 8, 1, 1), {}, "im2col", False),                                # a 1x1's pack_b
    ((2, 6, 12, 12), (40, 6, 3, 3), dict(pads=[1, 1, 1, 1]), "transposed", False),
    ((1, 8, 7, 7), (64, 8, 1, 1), {}, "transposed", False),
    ((1, 8, 14, 15), (64, 8, 1, 1), dict(strides=[2, 2]), "transposed", False),
    ((1, 8, 40, 40), (64, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), "transposed rows", False),
    ((1, 16, 24, 24), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1]), "winograd", False),
    ((1, 16, 52, 50), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]), "winograd F4", False),
    ((1, 12, 10, 10), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1]), "depthwise", False),      # dwconv_rows, edges
    ((1, 16, 33, 35), (16, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), "depthwise", False),
    ((1, 8, 30, 40), (8, 1, 5, 5), dict(pads=[2, 2, 2, 2]), "depthwise", False),
    ((1, 6, 9, 40), (12, 1, 2, 2), dict(pads=[1, 1, 1, 1]), "depthwise", False),         # dwconv, multiplier 2
    ((3, 72, 1, 1), (40, 72, 1, 1), {}, "gemv", False),                                 # an SE block's FC
    ((1, 8, 20, 20), (16, 8, 3, 3), dict(pads=[12] * 4, dilations=[12, 12]), "regions", False),  # ASPP rate 12
    ((1, 20, 1, 1), (48, 20, 1, 1), {}, "gemv", False),
    ((1, 3, 5, 41), (6, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[1, 2]), "depthwise", False),
]


def _conv_half_case(rng, x_shape, w_shape, attrs, residual):
    """Weights, bias, the onnx.reference output (float32, on X's half values; with the residual
    added and Relu applied) and the feeds (X, and Z when residual) of a half-storage conv case."""
    from run_launches import reference

    x, w = _half(rng, *x_shape), rng.standard_normal(w_shape).astype(F32) * 0.3
    b = rng.standard_normal(w_shape[0]).astype(F32)
    y = reference(helper.make_node("Conv", ["x", "w", "b"], ["y"], group=x_shape[1] // w_shape[1], **attrs),
                  {"x": x.astype(F32)}, {"w": w, "b": b}, 17)[0]
    feeds = {"x": x}
    if residual:
        feeds["z"] = _half(rng, *y.shape)
        y = np.maximum(y + feeds["z"].astype(F32), 0)
    return w, b, y, feeds


@pytest.mark.parametrize("x_shape,w_shape,attrs,path,copies", CONV_HALF, ids=[c[3] + str(i) for i, c in
                                                                               enumerate(CONV_HALF)])
@pytest.mark.parametrize("act,residual", [("", False), ("Relu", True)])
def test_conv_half_storage(x_shape, w_shape, attrs, path, copies, act, residual):
    """FusedConv with X, the residual and Y in half on each CPU-family conv path, vs onnx.reference
    on the half values in float32 (Y rounded to half): the HALF_PATHS rows read and write half
    themselves (no float32 copies: no cast kernels), the others go through copies. Bound: 2e-3
    relative with atol 2e-3 x max|Y| (a half store rounds by 2^-11; accumulation is fp32)."""
    from harness import lower

    dev, node = _conv_forced(x_shape, w_shape, attrs, path, act, residual)
    w, b, y, feeds = _conv_half_case(np.random.default_rng(len(path)), x_shape, w_shape, attrs, residual)
    launches = lower(node, feeds, {"w": w, "b": b}, {"y": (y.shape, F16)}, device=dev)
    kernels = [ln.kernel for ln in launches]
    if path.startswith("winograd"):
        assert kernels[0] == ("wino4_in" if path.endswith("F4") else "wino_in"), kernels
    if path == "depthwise":
        assert kernels[0] in ("dwconv", "dwconv_rows"), kernels
    if path == "gemv":
        assert kernels == ["conv_gemv"], kernels
    if path == "regions" and not residual:  # (no regions with a residual: another path then)
        assert kernels[-1] == "scatter_pixels", kernels
    if path == "im2col":
        assert kernels[0] == ("pack_b" if w_shape[2:] == (1, 1) else "im2col"), kernels
    assert any(k.startswith("cast_") for k in kernels) == copies, kernels
    (got,), _ = run(node, feeds, {"w": w, "b": b}, expected=[y.astype(F16)], device=dev)
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), y.astype(F16).astype(F32), rtol=2e-3,
                               atol=2e-3 * float(np.abs(y).max()))


POOL_HALF = [  # (op, X, attributes): pool2d_rows (3x3/2, 2x2/2, 3x3/1 average), the general kernel, global
    ("MaxPool", (1, 5, 23, 40), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (2, 3, 17, 19), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 4, 16, 16), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("AveragePool", (1, 3, 9, 300), dict(kernel_shape=[2, 3], strides=[1, 2], count_include_pad=1,
                                         pads=[0, 1, 0, 1])),
    ("MaxPool", (1, 2, 12, 13), dict(kernel_shape=[3, 3], dilations=[2, 2])),
    ("GlobalAveragePool", (2, 7, 7, 7), {}),
    ("GlobalAveragePool", (1, 5, 3, 11), {}),
    ("GlobalMaxPool", (1, 6, 5, 5), {}),
]


@pytest.mark.parametrize("op,shape,attrs", POOL_HALF, ids=[f"{p[0]}{i}" for i, p in enumerate(POOL_HALF)])
def test_pool_half_storage(op, shape, attrs):
    """pool.cl (pool2d_rows, pool, global_pool) with X and Y in half vs onnx.reference on the half
    values in float32, Y rounded to half: a max is exact, a mean within 1e-3 relative."""
    from run_launches import reference

    x = _half(np.random.default_rng(len(shape) + sum(shape)), *shape)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    y = reference(node, {"x": x.astype(F32)}, {}, 17)[0]
    _check_half(node, {"x": x}, {}, y, rtol=1e-3)


@pytest.mark.parametrize("op,shape,axes", [("ReduceMean", (2, 6, 5, 7), [2, 3]), ("ReduceMax", (3, 40, 9), [1]),
                                           ("ReduceSum", (4, 33), [0]), ("ReduceL2", (2, 3, 50), [2]),
                                           ("ReduceLogSumExp", (5, 17), [1])])
def test_reduce_half_storage(op, shape, axes):
    """reduce.cl's `reduce` with x and y in half (fp32 accumulation) vs onnx.reference on the half
    values in float32, y rounded to half: within 1e-3 relative."""
    from run_launches import reference

    x = _half(np.random.default_rng(sum(shape)), *shape)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    consts = {"axes": np.array(axes, np.int64)}
    y = reference(node, {"x": x.astype(F32)}, consts, 18)[0]
    (got,), _ = run(node, {"x": x}, consts, opset=18, expected=[y.astype(F16)])
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), y.astype(F16).astype(F32), rtol=1e-3, atol=1e-3 * float(np.abs(y).max()))


# --- the GPU family's kernels on half storage (dedicated local memory, as a GPU and Oclgrind report) ----------
def _gpu_local():
    """The test device under the GPU family, told its local memory is dedicated (xgemm.cl and the
    work-group kernels apply; pocl's is emulated, so a plain CLGLOW_TARGET=gpu keeps gemm.cl)."""
    import dataclasses

    from run_launches import device_info

    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


def _no_copies(launches: list, expect: str) -> None:
    """The lowering ran `expect` on the tensors as stored: no cast kernels (float32 copies)."""
    kernels = [ln.kernel for ln in launches]
    assert expect in kernels, kernels
    assert not [k for k in kernels if k.startswith("cast_")], kernels


def _run_half(node, feeds: dict, consts: dict, expected: np.ndarray, kernel: str, rtol: float = 2e-3,
              opset: int = 17) -> None:
    """The node on the GPU family with half storage: `kernel` reads and writes it (no copies), the
    result vs `expected` (float math on the half values) rounded to half, within rtol (a half store
    rounds by 2^-11 relative; accumulation is fp32)."""
    from harness import lower

    dev = _gpu_local()
    _no_copies(lower(node, feeds, consts, {"y": (expected.shape, F16)}, opset, dev), kernel)
    (got,), _ = run(node, feeds, consts, opset, expected=[expected.astype(F16)], device=dev)
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), expected.astype(F16).astype(F32), rtol=rtol,
                               atol=rtol * float(np.abs(expected).max()))


GPU_CONV_HALF = [  # (X, W, attributes, path forced, its GEMM or conv kernel)
    ((1, 16, 8, 12), (40, 16, 1, 1), {}, "xgemm pointwise", "xgemm"),
    ((1, 16, 5, 5), (3, 16, 1, 1), {}, "xgemm pointwise", "gemv"),  # 3 output channels: gpu_gemv.cl
    ((2, 6, 15, 17), (24, 6, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), "xgemm implicit", "xgemm"),
    ((1, 4, 9, 9), (6, 2, 3, 3), dict(pads=[1, 1, 1, 1]), "xgemm implicit", "xgemm"),  # 2 groups
    ((1, 6, 11, 13), (20, 6, 3, 3), dict(pads=[1, 0, 1, 0], strides=[2, 2]), "xgemm im2col", "im2col"),
    ((1, 16, 12, 13), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1]), "gpu winograd", "wino2_in"),
    ((1, 16, 11, 13), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1]), "gpu winograd F4", "wino4_in"),
    ((1, 12, 10, 10), (12, 1, 3, 3), dict(pads=[1, 1, 1, 1]), "gpu depthwise", "dw_tile"),
    ((1, 6, 9, 40), (12, 1, 2, 2), dict(pads=[1, 1, 1, 1]), "gpu depthwise", "dw_tile"),  # multiplier 2
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,path,kernel", GPU_CONV_HALF,
                         ids=[f"{c[3]}{i}" for i, c in enumerate(GPU_CONV_HALF)])
@pytest.mark.parametrize("act,residual", [("", False), ("Relu", True)])
def test_gpu_conv_half_storage(x_shape, w_shape, attrs, path, kernel, act, residual):
    """FusedConv with X, the residual and Y in half on the GPU family's conv rows (xgemm.cl B_HALF /
    C_HALF / Z_HALF, gpu_winograd.cl and gpu_dwconv.cl XH / YH) vs onnx.reference on the half values
    in float32, Y rounded to half: no float32 copies; bound 2e-3 relative, atol 2e-3 x max|Y|."""
    from harness import lower

    dev, node = _conv_forced(x_shape, w_shape, attrs, path, act, residual, dev=_gpu_local())
    w, b, y, feeds = _conv_half_case(np.random.default_rng(len(path) + x_shape[1]), x_shape, w_shape, attrs, residual)
    launches = lower(node, feeds, {"w": w, "b": b}, {"y": (y.shape, F16)}, device=dev)
    _no_copies(launches, kernel)
    (got,), _ = run(node, feeds, {"w": w, "b": b}, expected=[y.astype(F16)], device=dev)
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), y.astype(F16).astype(F32), rtol=2e-3,
                               atol=2e-3 * float(np.abs(y).max()))


@pytest.mark.parametrize("m,k,n,batch,const_b", [(37, 50, 45, (), True), (3, 64, 70, (), True),
                                                 (20, 33, 17, (2, 3), False), (1, 40, 9, (2,), False)])
def test_gpu_matmul_half_storage(m, k, n, batch, const_b):
    """MatMul on xgemm.cl (or gpu_gemv.cl for 1 to 4 rows) with A, B and Y in half: no copies."""
    rng = np.random.default_rng(m + n)
    a, b = _half(rng, *batch, m, k), _half(rng, *(() if const_b else batch), k, n)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    y = np.matmul(a.astype(np.float64), b.astype(np.float64))
    feeds, consts = ({"a": a}, {"b": b}) if const_b else ({"a": a, "b": b}, {})
    _run_half(node, feeds, consts, y, "gemv" if m <= 4 else "xgemm")


@pytest.mark.parametrize("rows", [24, 2])
def test_gpu_fused_matmul_half_epilogue_and_views(rows):
    """Attention scores as FusedMatMul with a half bias constant, a half residual, Relu, Q read through
    perm_a (a head split's view) and K through perm_b: xgemm.cl / gpu_gemv.cl read each as stored
    (BIAS_HALF, Z_HALF, strided A and B)."""
    rng = np.random.default_rng(rows)
    a = _half(rng, 2, rows, 3, 16)  # [B, S, H, D] read as [B, H, S, D]
    b = _half(rng, 2, 3, 20, 16)  # [B, H, T, D] read as [B, H, D, T]
    bias, z = _half(rng, 20), _half(rng, 2, 3, rows, 20)
    node = helper.make_node("FusedMatMul", ["a", "b", "bias", "z"], ["y"], domain="clglow", perm_a=[0, 2, 1, 3],
                            perm_b=[0, 1, 3, 2], activation="Relu")
    y = np.matmul(a.astype(np.float64).transpose(0, 2, 1, 3), b.astype(np.float64).transpose(0, 1, 3, 2))
    y = np.maximum(y + bias + z, 0)
    _run_half(node, {"a": a, "b": b, "z": z}, {"bias": bias}, y, "gemv" if rows <= 4 else "xgemm")


@pytest.mark.parametrize("shape,axis,op", [((6, 300), -1, "Softmax"), ((2, 5, 7, 9), 1, "Softmax"),
                                           ((3, 40), -1, "LogSoftmax")])
def test_gpu_softmax_half_storage(shape, axis, op):
    """gpu_softmax.cl's rows and cols with x and y in half (XH / YH; max, sum and exp in fp32)."""
    from run_launches import reference

    x = _half(np.random.default_rng(sum(shape)), *shape)
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    y = reference(node, {"x": x.astype(F32)}, {}, 17)[0]
    _run_half(node, {"x": x}, {}, y, "softmax_rows" if axis == -1 else "softmax_cols", rtol=1e-3)


@pytest.mark.parametrize("op,shape,axes,kernel", [("ReduceMean", (2, 6, 5, 7), [2, 3], "wg_reduce"),
                                                  ("ReduceMax", (3, 40, 9), [1], "wg_reduce_cols"),
                                                  ("ReduceSum", (2, 9000), [1], "wg_reduce_split"),
                                                  ("ReduceLogSumExp", (5, 17), [1], "wg_reduce")])
def test_gpu_reduce_half_storage(op, shape, axes, kernel):
    """gpu_reduce.cl's work-group reductions with x and y in half (XH / YH, fp32 accumulation; a
    split reduction's partials stay float32), within 1e-3 relative."""
    from run_launches import reference

    x = _half(np.random.default_rng(sum(shape)), *shape)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    consts = {"axes": np.array(axes, np.int64)}
    y = reference(node, {"x": x.astype(F32)}, consts, 18)[0]
    _run_half(node, {"x": x}, consts, y, kernel, rtol=1e-3, opset=18)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_gpu_global_pool_half_storage(op):
    """Global pools on gpu_reduce.cl (a work-group per plane) with X and Y in half."""
    from run_launches import reference

    x = _half(np.random.default_rng(3), 2, 7, 9, 9)
    node = helper.make_node(op, ["x"], ["y"])
    y = reference(node, {"x": x.astype(F32)}, {}, 17)[0]
    _run_half(node, {"x": x}, {}, y, "wg_reduce", rtol=1e-3)


@pytest.mark.parametrize("mask", [False, True])
def test_gpu_attention_half_storage(mask):
    """FusedAttention as gpu_attention.cl's block with Q, K, V and Y in half (QH .. YH), the mask in
    float32; vs float64 math on the half values, within 2e-3 relative."""
    rng = np.random.default_rng(5)
    q, k, v = _half(rng, 2, 3, 5, 16), _half(rng, 2, 3, 37, 16), _half(rng, 2, 3, 37, 8)
    s = 0.25 * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
    feeds = {"q": q, "k": k, "v": v}
    if mask:
        feeds["mask"] = rng.standard_normal((2, 1, 1, 37)).astype(F32)
        s = s + feeds["mask"]
    e = np.exp(s - s.max(-1, keepdims=True))
    y = np.einsum("bhqk,bhkd->bhqd", e / e.sum(-1, keepdims=True), v.astype(np.float64))
    node = helper.make_node("FusedAttention", ["q", "k", "v"] + (["mask"] if mask else []), ["y"], domain="clglow",
                            scale=0.25)
    _run_half(node, feeds, {}, y, "attn_block")


def test_cpu_attention_half_storage_on_copies():
    """The CPU family's attention.cl reads float32: on half storage it runs on float32 copies."""
    import dataclasses

    from harness import lower
    from run_launches import device_info

    rng = np.random.default_rng(6)
    q, k, v = _half(rng, 1, 2, 3, 8), _half(rng, 1, 2, 9, 8), _half(rng, 1, 2, 9, 8)
    node = helper.make_node("FusedAttention", ["q", "k", "v"], ["y"], domain="clglow", scale=0.5)
    dev = dataclasses.replace(device_info().with_family("cpu"))
    kernels = [ln.kernel for ln in lower(node, {"q": q, "k": k, "v": v}, {}, {"y": ((1, 2, 3, 8), F16)}, device=dev)]
    assert kernels[0] == "cast_from_half" and kernels[-1] == "cast_to_half", kernels
    s = 0.5 * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
    e = np.exp(s - s.max(-1, keepdims=True))
    y = np.einsum("bhqk,bhkd->bhqd", e / e.sum(-1, keepdims=True), v.astype(np.float64))
    (got,), _ = run(node, {"q": q, "k": k, "v": v}, {}, expected=[y.astype(F16)], device=dev)
    np.testing.assert_allclose(got.astype(F32), y.astype(F16).astype(F32), rtol=2e-3, atol=2e-3 * float(np.abs(y).max()))


# --- whole models in fp16 under the GPU family (dedicated local memory: xgemm.cl and the work-group kernels) --
def _gpu_session_pair(model):
    """(fp32 session, fp16 session) under target "gpu" on a Device whose local memory is called
    dedicated (what a GPU and Oclgrind report), so the GPU family's kernels run on pocl too."""
    import dataclasses

    from clglow.runtime import device as D

    base = D.select_device()
    dev = D.Device(base.context, base.cl_device)
    dev.cache = base.cache
    dev.info = dataclasses.replace(dev.info, local_mem_type="local")
    data = model.SerializeToString()
    return tuple(clglow.InferenceSession(data, clglow.SessionOptions(target="gpu", tune=False, precision=p), device=dev)
                 for p in ("fp32", "fp16"))


def _gpu_fp16_vs_fp32(model, feeds: dict, kernels: set) -> tuple:
    """(fp16 output, fp32 output, fp16 session's kernel names): the GPU family's `kernels` ran and
    no launch but a Cast node's converts between half and float32 (no float32 copies, lower/half.py)."""
    from clglow.runtime.binding import KernelStep

    s32, s16 = _gpu_session_pair(model)
    ref, got = s32.run(None, feeds)[0], s16.run(None, feeds)[0]
    assert got.dtype == ref.dtype
    steps = [st for st in s16._last_plan.steps if isinstance(st, KernelStep)]
    names = [st.kernel_name for st in steps]
    assert kernels <= set(names), sorted(set(names))
    # (a graph output stored as half has its Cast node at the edge: passes/precision.py)
    assert not [(st.label, st.kernel_name) for st in steps if st.kernel_name.startswith("cast_")
                and st.op_type != "Cast"], names
    return got, ref, names


def test_gpu_encoder_fp16_accuracy():
    """BERT-style encoder under the GPU family in fp16: xgemm.cl and gpu_softmax.cl on half storage,
    no cast launch; relative error measured 7.5e-4 on pocl (as the CPU family's), bound 3e-3."""
    model = transformer_encoder(seq=16)
    got, ref, _ = _gpu_fp16_vs_fp32(model, sample_inputs(model, seed=1, dims={"seq_len": 16}),
                                    {"xgemm", "softmax_rows"})
    assert _rel(got, ref) < 3e-3


def test_gpu_decoder_fp16_accuracy():
    """GPT-2-style decoder under the GPU family in fp16: relative error of the logits measured 1.1e-3
    on pocl, bound 5e-3; the next token agrees at every position; no cast launch."""
    model = causal_decoder()
    got, ref, _ = _gpu_fp16_vs_fp32(model, sample_inputs(model, seed=1, dims={"seq": 12}), {"xgemm"})
    assert _rel(got, ref) < 5e-3
    assert (got[0].argmax(-1) == ref[0].argmax(-1)).all()


@pytest.mark.slow
def test_gpu_mobilenet_fp16_accuracy():
    """MobileNet-style model under the GPU family in fp16 (gpu_dwconv.cl, xgemm.cl's 1x1s, the SE
    blocks' pools on gpu_reduce.cl, the classifier on gpu_gemv.cl): relative error measured 1.1e-3,
    bound 5e-3, the classes agree, no cast launch."""
    model = mobilenet_se()
    got, ref, _ = _gpu_fp16_vs_fp32(model, sample_inputs(model, seed=1), {"dw_tile", "xgemm", "wg_reduce"})
    assert _rel(got, ref) < 5e-3
    assert (got.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.slow
def test_gpu_resnet50_fp16_top1():
    """ResNet-50 under the GPU family in fp16 (xgemm.cl's implicit GEMM and 1x1s, gpu_reduce.cl's
    global pool): no cast launch, top-1 equals fp32's on 2 seeded images; relative error of the
    logits measured 6.9e-4 on pocl, bound 1e-2."""
    from clglow.models import resnet50
    from clglow.runtime.binding import KernelStep

    s32, s16 = _gpu_session_pair(resnet50(seed=0))
    for seed in range(2):
        x = np.random.default_rng(seed).random((1, 3, 224, 224), dtype=np.float64).astype(F32)
        ref, got = s32.run(None, {"data": x})[0], s16.run(None, {"data": x})[0]
        assert int(got.argmax()) == int(ref.argmax())
        assert _rel(got, ref) < 1e-2
    names = [st.kernel_name for st in s16._last_plan.steps if isinstance(st, KernelStep)]
    assert "xgemm" in names and not [k for k in names if k.startswith("cast_")]
