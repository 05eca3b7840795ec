"""Window functions, MelWeightMatrix, Det, SwiGLU and TensorScatter kernels vs onnx.reference
(and numpy.linalg.det), over their attributes, float32 and float64 (and float16 for SwiGLU)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("pyopencl")
import clglow.lower.linalg  # noqa: E402,F401  (registers Det; lower/__init__ imports it too)
import clglow.lower.swiglu  # noqa: E402,F401
import clglow.lower.tensor_scatter  # noqa: E402,F401
import clglow.lower.windows  # noqa: E402,F401
try:  # tests/kernels may or may not be a package
    from .run_launches import check, device_info, run_node  # noqa: E402
except ImportError:
    from run_launches import check, device_info, run_node  # type: ignore  # noqa: E402

RNG = np.random.default_rng(23)


def _skip_fp64(dtype) -> None:
    if np.dtype(dtype) == np.float64 and not device_info().has_fp64:
        pytest.skip("no fp64 on this device")


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [2, 10, 257])
@pytest.mark.parametrize("out_type", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_window(op, periodic, size, out_type):
    _skip_fp64(np.float64 if out_type == TensorProto.DOUBLE else np.float32)
    node = helper.make_node(op, ["n"], ["y"], periodic=periodic, output_datatype=out_type)
    check(node, {}, {"n": np.array(size, np.int64)}, opset=17, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("m,n,rate,lo,hi", [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 7600.0),
                                            (5, 64, 22050, 300.0, 3000.0), (40, 1024, 16000, 0.0, 8000.0)])
def test_mel_weight_matrix(m, n, rate, lo, hi):
    node = helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["y"])
    consts = {"m": np.array(m, np.int64), "n": np.array(n, np.int64), "r": np.array(rate, np.int64),
              "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    check(node, {}, consts, opset=17, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (4, 1, 5, 5), (7, 8, 8), (1, 1), (3, 16, 16)])
def test_det(dtype, shape):
    _skip_fp64(dtype)
    x = RNG.standard_normal(shape).astype(dtype)
    want = np.linalg.det(x.astype(np.float64)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    got, _ = run_node(helper.make_node("Det", ["x"], ["y"]), {"x": x}, {}, 22, expected=[np.asarray(want)])
    np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))
    check(helper.make_node("Det", ["x"], ["y"]), {"x": x}, opset=22, rtol=tol, atol=tol)


def test_det_singular_and_pivoting():
    """A zero pivot needs a row swap (sign flip); a singular matrix gives 0."""
    x = np.array([[[0, 1, 2], [3, 4, 5], [6, 7, 9]], [[1, 2, 3], [2, 4, 6], [1, 0, 1]],
                  [[0, 0, 0], [1, 2, 3], [4, 5, 6]]], np.float32)
    got, _ = run_node(helper.make_node("Det", ["x"], ["y"]), {"x": x}, {}, 22,
                      expected=[np.linalg.det(x).astype(np.float32)])
    np.testing.assert_allclose(got[0], [-3.0, 0.0, 0.0], atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("alpha", [None, 0.5, 1.702])
def test_swiglu(dtype, alpha):
    _skip_fp64(dtype)
    a = (RNG.standard_normal((3, 5, 7)) * 3).astype(dtype)
    b = RNG.standard_normal((3, 5, 7)).astype(dtype)
    attrs = {} if alpha is None else {"alpha": alpha}
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {"rtol": 1e-5, "atol": 1e-6}
    check(helper.make_node("SwiGLU", ["a", "b"], ["y"], **attrs), {"a": a, "b": b}, opset=28, **tol)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("shape,upd_len,axis", [((2, 3, 8, 4), 3, -2), ((3, 6, 5), 2, 1), ((2, 3, 8, 4), 8, 2),
                                                ((2, 4, 6), 1, -2)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_tensor_scatter(mode, shape, upd_len, axis, dtype):
    past = (RNG.standard_normal(shape) * 10).astype(dtype)
    ushape = list(shape)
    ushape[axis] = upd_len
    upd = (RNG.standard_normal(ushape) * 10).astype(dtype)
    length = shape[axis]
    hi = length if mode == "circular" else length - upd_len + 1
    idx = RNG.integers(0, hi, size=(shape[0],)).astype(np.int64)
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode=mode, axis=axis)
    check(node, {"p": past, "u": upd, "w": idx}, opset=24, rtol=0, atol=0)


def test_tensor_scatter_no_indices():
    past = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    upd = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    check(helper.make_node("TensorScatter", ["p", "u"], ["y"]), {"p": past, "u": upd}, opset=24, rtol=0, atol=0)
