"""Integer convolutions on OpenCL (lower/qconv.py) against exact numpy, onnx.reference and
onnxruntime, and a small quantized model end to end with the host fallback off.

ConvInteger is compared exactly with an int64 numpy convolution; QLinearConv exactly with numpy's
float32 version of onnxruntime's requantisation and within one step of onnx.reference /
onnxruntime's unoptimised run (their multipliers round differently at ties: see lower/qgemm.py).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import run_node  # noqa: E402
except ImportError:
    from run_launches import run_node  # type: ignore  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "quant"))
from quant_oracle import ort_exact_weights  # noqa: E402

RNG = np.random.default_rng(1717)

# (x shape, w shape, group, strides, pads, dilations)
CASES = [((1, 3, 9, 11), (5, 3, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
         ((2, 8, 10, 10), (8, 1, 3, 3), 8, (2, 2), (1, 0, 1, 2), (1, 1)),  # depthwise, odd pads
         ((1, 6, 12, 9), (4, 3, 3, 2), 2, (1, 2), (0, 1, 2, 1), (2, 1)),  # groups, dilation
         ((1, 16, 7, 7), (32, 16, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),  # pointwise
         ((1, 4, 8, 8), (8, 1, 5, 5), 4, (1, 1), (2, 2, 2, 2), (1, 1)),  # depthwise, multiplier 2
         ((1, 24, 14, 14), (40, 24, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
         ((1, 8, 20, 37), (16, 8, 3, 3), 1, (1, 1), (1, 2, 1, 0), (1, 1)),  # rows of 16-pixel moves
         ((2, 32, 18, 18), (24, 32, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
         ((1, 4, 40, 40), (4, 1, 3, 3), 4, (2, 2), (1, 1, 1, 1), (1, 1)),  # depthwise, stride-2 moves
         ((1, 3, 20, 40), (6, 1, 3, 3), 3, (1, 1), (1, 1, 1, 1), (1, 1)),  # depthwise, 16-byte moves
         ((1, 64, 3, 3), (40, 64, 3, 3), 1, (1, 1), (0, 0, 0, 0), (1, 1)),  # one output pixel (narrow tiles)
         ((2, 12, 7, 7), (12, 1, 3, 3), 12, (1, 1), (1, 1, 1, 1), (1, 1)),  # depthwise edge tiles: masked moves
         ((1, 10, 15, 15), (10, 1, 3, 3), 10, (2, 2), (1, 1, 1, 1), (1, 1))]  # the same at stride 2
MIXES = [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)]


def rand(shape: tuple, dt) -> np.ndarray:
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, shape).astype(dt)


def conv_exact(x, w, xz, wz, group, strides, pads, dil) -> np.ndarray:
    """sum (x - xz)(w - wz[c]) in int64, by taps (numpy, zero padding of x - xz)."""
    xi = x.astype(np.int64) - np.int64(np.asarray(xz))
    wi = w.astype(np.int64) - np.asarray(wz, np.int64).reshape(-1, 1, 1, 1)
    n, _, h, wd = x.shape
    co, cg, kh, kw = w.shape
    xp = np.pad(xi, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    y = np.zeros((n, co, oh, ow), np.int64)
    m = co // group
    for g in range(group):
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dil[0], kx * dil[1]
                patch = xp[:, g * cg:(g + 1) * cg, y0:y0 + strides[0] * (oh - 1) + 1:strides[0],
                           x0:x0 + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, g * m:(g + 1) * m] += np.einsum("ncyx,oc->noyx", patch, wi[g * m:(g + 1) * m, :, ky, kx])
    return y


def _attrs(group, strides, pads, dil) -> dict:
    return {"group": group, "strides": list(strides), "pads": list(pads), "dilations": list(dil)}


@pytest.mark.parametrize("xdt,wdt", MIXES)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("zps", ["none", "tensor", "channel"])
def test_conv_integer_exact(xdt, wdt, case, zps):
    xs, wsh, g, st, pads, dil = CASES[case]
    x, w = rand(xs, xdt), rand(wsh, wdt)
    xz = rand((), xdt) if zps != "none" else np.zeros((), xdt)
    wz = rand((wsh[0],) if zps == "channel" else (), wdt) if zps != "none" else np.zeros((), wdt)
    e = conv_exact(x, w, xz, wz, g, st, pads, dil).astype(np.int32)
    inputs = ["x", "w"] + (["xz", "wz"] if zps != "none" else [])
    node = helper.make_node("ConvInteger", inputs, ["y"], **_attrs(g, st, pads, dil))
    got, _ = run_node(node, {"x": x}, {"w": w, "xz": xz, "wz": wz}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def test_conv_integer_1d_same_upper_live_weights():
    """A 1-D conv with auto_pad SAME_UPPER and a live weight (no zero points)."""
    x, w = rand((2, 5, 13), np.uint8), rand((6, 5, 4), np.uint8)
    x4, w4 = x[:, :, None, :], w[:, :, None, :]
    e = conv_exact(x4, w4, 0, 0, 1, (1, 2), (0, 1, 0, 2), (1, 1))[:, :, 0, :].astype(np.int32)  # total pad 3
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2])
    got, _ = run_node(node, {"x": x, "w": w}, {}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def _qlconv(case: int, xdt, wdt, per_channel: bool, bias: bool) -> tuple:
    xs, wsh, g, st, pads, dil = CASES[case]
    cout = wsh[0]
    f = {"x": rand(xs, xdt), "xs": np.array(0.03, np.float32), "xz": rand((), xdt), "w": rand(wsh, wdt),
         "ws": (RNG.random(cout) * 0.01 + 0.001).astype(np.float32) if per_channel else np.array(0.004, np.float32),
         "wz": (rand((cout,), wdt) if wdt == np.uint8 else np.zeros(cout, wdt)) if per_channel else rand((), wdt),
         "ys": np.array(0.02 * np.sqrt(np.prod(wsh[1:])), np.float32), "yz": rand((), xdt),
         "b": RNG.integers(-2000, 2000, cout).astype(np.int32)}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"] + (["b"] if bias else [])
    return f, names, helper.make_node("QLinearConv", names, ["y"], **_attrs(g, st, pads, dil))


@pytest.mark.parametrize("xdt,wdt", MIXES)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(xdt, wdt, case, per_channel):
    f, names, node = _qlconv(case, xdt, wdt, per_channel, bias=True)
    _, _, g, st, pads, dil = CASES[case]
    acc = conv_exact(f["x"], f["w"], f["xz"], f["wz"], g, st, pads, dil) + f["b"].reshape(1, -1, 1, 1)
    mul = (f["xs"] * f["ws"]).reshape(1, -1, 1, 1) / f["ys"]  # float32, onnxruntime's order
    info = np.iinfo(xdt)
    yz = int(f["yz"])
    e = (np.rint(np.clip(acc.astype(np.float32) * mul, info.min - yz, info.max - yz)).astype(np.int64) + yz).astype(xdt)
    consts = {k: f[k] for k in names[1:]}
    got, _ = run_node(node, {"x": f["x"]}, consts, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)
    got, ref = run_node(node, {"x": f["x"]}, consts, opset=10)
    assert np.abs(got[0].astype(np.int64) - ref[0].astype(np.int64)).max() <= 1


@pytest.mark.parametrize("case", [0, 1, 2])
def test_qlinear_conv_vs_onnxruntime(case):
    """onnxruntime's literal QLinearConv (uint8 x int8, its supported mix) within one step, on
    7-bit weights (its x86 kernels without VNNI saturate on full-range ones: see
    tests/quant/quant_oracle.ort_exact_weights; test_qlinear_conv covers them exactly)."""
    f, names, node = _qlconv(case, np.uint8, np.int8, per_channel=True, bias=True)
    f["w"] = ort_exact_weights(RNG, f["w"].shape)
    got, ref = run_node(node, {"x": f["x"]}, {k: f[k] for k in names[1:]}, opset=10, oracle="onnxruntime")
    assert np.abs(got[0].astype(np.int64) - ref[0].astype(np.int64)).max() <= 1


def test_qlinear_conv_qclamp():
    """qclamp (a fused Relu: lower bound at the zero point) saturates the conv's output."""
    f, names, _ = _qlconv(0, np.uint8, np.int8, per_channel=False, bias=False)
    yz = int(f["yz"])
    _, _, g, st, pads, dil = CASES[0]
    node = helper.make_node("QLinearConv", names, ["y"], qclamp=[yz, 255], **_attrs(g, st, pads, dil))
    acc = conv_exact(f["x"], f["w"], f["xz"], f["wz"], g, st, pads, dil)
    mul = (f["xs"] * f["ws"]) / f["ys"]
    e = (np.rint(np.clip(acc.astype(np.float32) * mul, 0, 255 - yz)).astype(np.int64) + yz).astype(np.uint8)
    got, _ = run_node(node, {"x": f["x"]}, {k: f[k] for k in names[1:]}, opset=10, expected=[e])
    np.testing.assert_array_equal(got[0], e)


def _small_model() -> onnx.ModelProto:
    """QLinearConv (per-channel int8 weights, int32 bias) -> Reshape -> QLinearMatMul, uint8 activations;
    7-bit weights, so that onnxruntime is exact on every CPU (quant_oracle.ort_exact_weights)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("xs", np.array(0.02, np.float32)), ("xz", np.array(128, np.uint8)),
        ("w1", ort_exact_weights(rng, (8, 3, 3, 3))),
        ("w1s", (rng.random(8) * 0.01 + 0.002).astype(np.float32)), ("w1z", np.zeros(8, np.int8)),
        ("ys", np.array(0.05, np.float32)), ("yz", np.array(100, np.uint8)),
        ("b1", rng.integers(-500, 500, 8).astype(np.int32)), ("shape", np.array([1, -1], np.int64)),
        ("w2", ort_exact_weights(rng, (8 * 6 * 6, 10))), ("w2s", np.array(0.004, np.float32)),
        ("w2z", np.array(0, np.int8)), ("zs", np.array(0.3, np.float32)), ("zz", np.array(7, np.uint8))]]
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w1", "w1s", "w1z", "ys", "yz", "b1"], ["c"],
                              pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("QLinearMatMul", ["r", "ys", "yz", "w2", "w2s", "w2z", "zs", "zz"], ["y"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TP.UINT8, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TP.UINT8, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_small_quantized_model_on_device(monkeypatch):
    """Every node on OpenCL (host fallback off), within one step of onnxruntime's literal run."""
    import onnxruntime as ort

    import clglow

    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    m = _small_model()
    x = np.random.default_rng(6).integers(0, 256, (1, 3, 12, 12)).astype(np.uint8)
    got = clglow.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    e = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == e.dtype and got.shape == e.shape
    assert np.abs(got.astype(np.int64) - e.astype(np.int64)).max() <= 1
