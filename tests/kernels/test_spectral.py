"""DFT and STFT kernels vs numpy.fft and onnx.reference: real and complex inputs, forward and
inverse, onesided (rfft / irfft), dft_length (padding and truncation), axis as attribute
(opset 17) and constant input (opset 20), float32 and float64; STFT with and without a window.
Lengths below lower/fft.DIRECT_BELOW or with a prime factor above 13 run the direct sum, the
others the Stockham FFT: both are covered."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check, device_info, run_node  # noqa: E402
except ImportError:
    from run_launches import check, device_info, run_node  # type: ignore  # noqa: E402

RNG = np.random.default_rng(17)
DTYPES = [np.float32, np.float64]


def _tol(dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


def _skip_fp64(dtype) -> None:
    if dtype == np.float64 and not device_info().has_fp64:
        pytest.skip("no fp64 on this device")


def _dft_node(opset: int, axis: int, dft_length: bool, **attrs):
    ins = ["x", "n" if dft_length else ""]
    if opset >= 20:
        ins.append("axis")
    else:
        attrs["axis"] = axis
    return helper.make_node("DFT", ins, ["y"], **attrs)


def _consts(opset: int, axis: int, n) -> dict:
    c = {}
    if n is not None:
        c["n"] = np.array(n, np.int64)
    if opset >= 20:
        c["axis"] = np.array(axis, np.int64)
    return c


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("complex_in", [False, True])
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("axis,n", [(1, None), (2, None), (1, 7), (-2, 13), (1, 16), (1, 64), (-2, 120)])
def test_dft_vs_reference(dtype, opset, complex_in, inverse, onesided, axis, n):
    _skip_fp64(dtype)
    if opset < 20 and axis == -2:
        axis = 2  # opset 17's axis counts the same dimension from the front
    x = RNG.standard_normal((2, 10, 9, 2 if complex_in else 1)).astype(dtype)
    node = _dft_node(opset, axis, n is not None, inverse=inverse, onesided=onesided)
    check(node, {"x": x}, _consts(opset, axis, n), opset=opset, **_tol(dtype))


@pytest.mark.parametrize("n", [1, 5, 64, 100, 257, 400, 512, 1001, 2 * 3 * 5 * 7 * 11])
def test_dft_vs_numpy_fft(n):
    """Independent oracle: numpy.fft over the whole attribute space that maps onto it."""
    xc = RNG.standard_normal((3, n)) + 1j * RNG.standard_normal((3, n))
    x = np.stack([xc.real, xc.imag], -1).astype(np.float32)
    xr = xc.real[..., None].astype(np.float32)
    cases = [
        (_dft_node(17, 1, False), x, np.fft.fft(xc, axis=1)),
        (_dft_node(17, 1, False, inverse=1), x, np.fft.ifft(xc, axis=1)),
        (_dft_node(17, 1, False, onesided=1), xr, np.fft.rfft(xc.real, axis=1)),
    ]
    for node, xin, want in cases:
        exp = np.stack([want.real, want.imag], -1).astype(np.float32)
        got, _ = run_node(node, {"x": xin}, {}, 17, expected=[exp])
        np.testing.assert_allclose(got[0], exp, rtol=1e-4, atol=2e-5 * np.sqrt(n) * np.abs(exp).max())
    if n > 1:  # irfft of a one-sided spectrum back to n samples
        spec = np.fft.rfft(xc.real, axis=1)
        xs = np.stack([spec.real, spec.imag], -1).astype(np.float32)
        exp = np.fft.irfft(spec, n=n, axis=1)[..., None].astype(np.float32)
        got, _ = run_node(_dft_node(17, 1, True, inverse=1, onesided=1), {"x": xs},
                          {"n": np.array(n, np.int64)}, 17, expected=[exp])
        np.testing.assert_allclose(got[0], exp, rtol=1e-4, atol=1e-5 * np.sqrt(n) * np.abs(exp).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("complex_in", [False, True])
@pytest.mark.parametrize("step,n", [(8, 16), (5, 12), (16, 16), (160, 400), (64, 256)])
def test_stft(dtype, window, onesided, complex_in, step, n):
    _skip_fp64(dtype)
    if complex_in and onesided:
        pytest.skip("onesided needs a real signal")
    x = RNG.standard_normal((2, 64 if n < 64 else 1200, 2 if complex_in else 1)).astype(dtype)
    consts = {"step": np.array(step, np.int64), "len": np.array(n, np.int64)}
    ins = ["x", "step", "", "len"]
    feeds = {"x": x}
    if window:
        ins[2] = "w"
        feeds["w"] = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(dtype)
    node = helper.make_node("STFT", ins, ["y"], onesided=onesided)
    check(node, feeds, consts, opset=17, **_tol(dtype))
