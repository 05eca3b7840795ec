"""DFT, STFT, Det, SwiGLU, TensorScatter, the windows and MelWeightMatrix through a session with
host fallback off (lower/spectral.py, linalg.py, swiglu.py, tensor_scatter.py, windows.py), vs
onnx.reference and numpy, under the default kernel family and the GPU family (target="gpu").

The shape-deciding scalars (DFT-20's axis and dft_length, STFT's frame_step, a window's size)
are graph inputs here, as in the ONNX node suite: they become plan constants
(runtime.engine.SHAPE_INPUTS) and the data-carrying input runs on OpenCL.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper
from onnx.reference import ReferenceEvaluator

import clglow

TARGETS = [None, "gpu"]
RNG = np.random.default_rng(29)


def _model(node, inputs, outputs, opset: int) -> onnx.ModelProto:
    g = helper.make_graph([node], "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return m


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    """A value of `shape`, or of rank `shape` with symbolic dimensions when it is an int."""
    if isinstance(shape, int):
        shape = [f"{name}{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, elem, shape)


def _run(model: onnx.ModelProto, feeds: dict, target, op: str) -> list:
    sess = clglow.InferenceSession(model.SerializeToString(),
                                   sess_options=clglow.SessionOptions(host_fallback=False, target=target))
    got = sess.run(None, feeds)
    assert all(p.where == "opencl" for p in sess.placement if p.op_type == op), sess.explain()
    return got


def _check(model, feeds, target, op, rtol=1e-4, atol=1e-4) -> None:
    got = _run(model, feeds, target, op)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_dft20_axis_and_length_as_inputs(target, inverse, onesided):
    node = helper.make_node("DFT", ["x", "n", "axis"], ["y"], inverse=inverse, onesided=onesided)
    cin = 2 if inverse else 1
    m = _model(node, [_vi("x", T.FLOAT, [2, 12, 5, cin]), _vi("n", T.INT64, []), _vi("axis", T.INT64, [])],
               [_vi("y", T.FLOAT, 4)], 20)
    x = RNG.standard_normal((2, 12, 5, cin)).astype(np.float32)
    for n, axis in ((12, 1), (16, 1), (8, -3), (5, 2)):
        _check(m, {"x": x, "n": np.array(n, np.int64), "axis": np.array(axis, np.int64)}, target, "DFT")


@pytest.mark.parametrize("target", TARGETS)
def test_dft17_float64_vs_numpy_fft(target):
    node = helper.make_node("DFT", ["x"], ["y"], axis=1)
    m = _model(node, [_vi("x", T.DOUBLE, [3, 96, 2])], [_vi("y", T.DOUBLE, 3)], 17)
    xc = RNG.standard_normal((3, 96)) + 1j * RNG.standard_normal((3, 96))
    got = _run(m, {"x": np.stack([xc.real, xc.imag], -1)}, target, "DFT")[0]
    want = np.fft.fft(xc, axis=1)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], want, rtol=1e-12, atol=1e-11)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_window(target, onesided):
    node = helper.make_node("STFT", ["x", "step", "w"], ["y"], onesided=onesided)
    m = _model(node, [_vi("x", T.FLOAT, [2, 200, 1]), _vi("step", T.INT64, []), _vi("w", T.FLOAT, [32])],
               [_vi("y", T.FLOAT, 4)], 17)
    x = RNG.standard_normal((2, 200, 1)).astype(np.float32)
    w = np.hanning(32).astype(np.float32)
    for step in (8, 13):
        _check(m, {"x": x, "step": np.array(step, np.int64), "w": w}, target, "STFT")


@pytest.mark.parametrize("target", TARGETS)
def test_window_feeds_device_work(target):
    """The window's size is a plan constant: the window is computed at planning, the Mul on OpenCL."""
    nodes = [helper.make_node("HannWindow", ["n"], ["w"], periodic=0), helper.make_node("Mul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [_vi("x", T.FLOAT, [3, 16]), _vi("n", T.INT64, [])],
                          [_vi("y", T.FLOAT, 2)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    _check(m, {"x": x, "n": np.array(16, np.int64)}, target, "Mul", rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(3, 3), (5, 4, 4), (2, 3, 6, 6)])
def test_det(target, shape):
    m = _model(helper.make_node("Det", ["x"], ["y"]), [_vi("x", T.FLOAT, list(shape))],
               [_vi("y", T.FLOAT, len(shape) - 2)], 22)
    x = RNG.standard_normal(shape).astype(np.float32)
    got = _run(m, {"x": x}, target, "Det")[0]
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("elem,dtype", [(T.FLOAT, np.float32), (T.FLOAT16, np.float16)])
def test_swiglu(target, elem, dtype):
    m = _model(helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5), [_vi("a", elem, [4, 33]),
                                                                          _vi("b", elem, [4, 33])],
               [_vi("y", elem, 2)], 28)
    feeds = {k: (RNG.standard_normal((4, 33)) * 2).astype(dtype) for k in "ab"}
    tol = 2e-3 if dtype == np.float16 else 1e-5
    _check(m, feeds, target, "SwiGLU", rtol=tol, atol=tol)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(target, mode):
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode=mode)
    m = _model(node, [_vi("p", T.FLOAT, [3, 2, 10, 4]), _vi("u", T.FLOAT, [3, 2, 3, 4]), _vi("w", T.INT64, [3])],
               [_vi("y", T.FLOAT, 4)], 24)
    feeds = {"p": RNG.standard_normal((3, 2, 10, 4)).astype(np.float32),
             "u": RNG.standard_normal((3, 2, 3, 4)).astype(np.float32),
             "w": np.array([0, 7, 9] if mode == "circular" else [0, 7, 4], np.int64)}
    _check(m, feeds, target, "TensorScatter", rtol=0, atol=0)


@pytest.mark.parametrize("target", TARGETS)
def test_stft_default_onesided_feeds_device_work(target):
    """An absent onesided is 1 (the schema, onnx.reference): n / 2 + 1 bins reach the next node
    (onnx's own shape inference says n; clglow.shapes infers it as the schema says)."""
    nodes = [helper.make_node("STFT", ["x", "step", "w"], ["y"]), helper.make_node("Abs", ["y"], ["z"])]
    g = helper.make_graph(nodes, "g", [_vi("x", T.FLOAT, [1, 128, 1]), _vi("step", T.INT64, []),
                                       _vi("w", T.FLOAT, [16])], [_vi("z", T.FLOAT, 4)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal((1, 128, 1)).astype(np.float32), "step": np.array(8, np.int64),
             "w": np.hanning(16).astype(np.float32)}
    _check(m, feeds, target, "STFT", rtol=1e-5, atol=1e-5)
    assert _run(m, feeds, target, "Abs")[0].shape == (1, 15, 9, 2)


@pytest.mark.parametrize("axis", [3, -1, 7])
def test_dft_bad_axis_is_a_clear_error(axis):
    """An axis on the real/imaginary dimension or past the rank: an InvalidModel naming the node."""
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], name="the_dft")
    m = _model(node, [_vi("x", T.FLOAT, [2, 8, 4, 1]), _vi("axis", T.INT64, [])], [_vi("y", T.FLOAT, 4)], 20)
    sess = clglow.InferenceSession(m.SerializeToString(), sess_options=clglow.SessionOptions(host_fallback=False))
    with pytest.raises(clglow.InvalidModel, match="the_dft"):
        sess.run(None, {"x": np.zeros((2, 8, 4, 1), np.float32), "axis": np.array(axis, np.int64)})


def test_tensor_scatter_mismatched_update_is_a_clear_error():
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], name="the_scatter")
    m = _model(node, [_vi("p", T.FLOAT, [2, 4, 3]), _vi("u", T.FLOAT, [2, 5, 3]), _vi("w", T.INT64, [2])],
               [_vi("y", T.FLOAT, 3)], 24)
    with pytest.raises(clglow.ClglowError, match="the_scatter"):
        sess = clglow.InferenceSession(m.SerializeToString(), sess_options=clglow.SessionOptions(host_fallback=False))
        sess.run(None, {"p": np.zeros((2, 4, 3), np.float32), "u": np.zeros((2, 5, 3), np.float32),
                        "w": np.zeros(2, np.int64)})
