"""CenterCropPad, ReverseSequence, MaxUnpool, AffineGrid and Upsample kernels vs onnx.reference
(Upsample's linear mode vs onnxruntime: onnx.reference only does nearest with integer scales)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
import clglow.lower.spatial  # noqa: E402,F401  (registration)

try:  # tests/kernels may or may not be a package
    from .run_launches import check, device_info, reference, run_node  # noqa: E402
except ImportError:
    from run_launches import check, device_info, reference, run_node  # type: ignore  # noqa: E402

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("shape,target,axes", [
    ((20, 8, 3), (10, 10, 3), None), ((20, 8, 3), (10, 7), [0, 1]), ((3, 20, 8), (10, 9), [-2, -1]),
    ((5, 7, 4), (9, 3), [0, 2]), ((5, 7), (5, 7), None), ((2, 3), (6, 8), None)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, "bfloat16"])
def test_center_crop_pad(shape, target, axes, dtype):
    if dtype == "bfloat16":
        dtype = helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16)
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    kw = {} if axes is None else {"axes": axes}
    check(helper.make_node("CenterCropPad", ["x", "s"], ["y"], **kw), {"x": x},
          {"s": np.array(target, np.int64)}, opset=18)


@pytest.mark.parametrize("shape,time_axis,batch_axis", [((4, 4), 0, 1), ((4, 4), 1, 0), ((5, 3, 2), 0, 1),
                                                       ((3, 6, 4), 1, 0)])
@pytest.mark.parametrize("lens_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64, "bfloat16"])
def test_reverse_sequence(shape, time_axis, batch_axis, lens_dtype, dtype):
    if dtype == "bfloat16":
        dtype = helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16)
    x = (RNG.standard_normal(shape) * 20).astype(dtype)
    lens = RNG.integers(0, shape[time_axis] + 1, shape[batch_axis]).astype(lens_dtype)
    check(helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=time_axis, batch_axis=batch_axis),
          {"x": x, "l": lens}, opset=10)


def _pool_with_indices(x: np.ndarray, k: int, s: int) -> tuple:
    """2-D max pooling's values and flat indices (numpy), the input MaxUnpool takes."""
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    vals, idx = np.zeros((n, c, oh, ow), x.dtype), np.zeros((n, c, oh, ow), np.int64)
    for ni in range(n):
        for ci in range(c):
            for i in range(oh):
                for j in range(ow):
                    win = x[ni, ci, i * s:i * s + k, j * s:j * s + k]
                    a, b = np.unravel_index(np.argmax(win), win.shape)
                    vals[ni, ci, i, j] = win[a, b]
                    idx[ni, ci, i, j] = ((ni * c + ci) * h + i * s + a) * w + j * s + b
    return vals, idx


@pytest.mark.parametrize("k,s,out_shape", [(2, 2, None), (3, 2, None), (2, 2, (2, 3, 9, 11)), (2, 1, None)])
def test_max_unpool(k, s, out_shape):
    # an input the windows tile exactly: the pooling's indices then count in MaxUnpool's inferred shape
    x = RNG.standard_normal((2, 3, 3 * s + k, 4 * s + k)).astype(np.float32)
    vals, idx = _pool_with_indices(x, k, s)
    inputs = ["v", "i"] + (["o"] if out_shape else [])
    consts = {"o": np.array(out_shape, np.int64)} if out_shape else {}
    check(helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=[k, k], strides=[s, s]),
          {"v": vals, "i": idx}, consts, opset=11)


def test_max_unpool_1d_pads():
    vals = RNG.standard_normal((1, 2, 4)).astype(np.float32)
    idx = np.array([[[0, 3, 4, 6], [7, 8, 10, 13]]], np.int64)  # inferred length (4-1)*2-2+3 = 7 per channel
    check(helper.make_node("MaxUnpool", ["v", "i"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 1]),
          {"v": vals, "i": idx}, opset=11)


@pytest.mark.parametrize("size", [(2, 3, 5, 6), (1, 1, 4, 1), (2, 2, 3, 4, 5)])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(size, align):
    sd = len(size) - 2
    theta = RNG.standard_normal((size[0], sd, sd + 1)).astype(np.float32)
    if align and min(size[2:]) == 1:
        pytest.skip("onnx.reference divides by zero for a size-1 dim with align_corners")
    check(helper.make_node("AffineGrid", ["t", "s"], ["g"], align_corners=align), {"t": theta},
          {"s": np.array(size, np.int64)}, opset=20, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 2, 3, 1), (2, 1, 1, 3)])
def test_upsample_nearest(scales):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    check(helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest"), {"x": x},
          {"s": np.array(scales, np.float32)}, opset=9)


def test_upsample7_attribute_scales():
    """Upsample-7 (scales as an attribute, which onnx.reference does not take) vs numpy's repeat."""
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    want = np.repeat(np.repeat(x, 2, axis=2), 3, axis=3)
    got, _ = run_node(helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0]),
                      {"x": x}, opset=7, expected=[want])
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 1.5, 2.5)])
def test_upsample_linear_vs_onnxruntime(scales):
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    check(helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear"), {"x": x},
          {"s": np.array(scales, np.float32)}, opset=9, rtol=1e-5, atol=1e-5, oracle="onnxruntime")


def test_affine_grid_float64():
    """float64 theta gives a float64 grid (onnx.reference returns float32 whatever theta is: its
    values, computed in float64, are the oracle here, cast back)."""
    if not device_info().has_fp64:
        pytest.skip("the device has no fp64")
    node = helper.make_node("AffineGrid", ["t", "s"], ["g"])
    feeds, consts = {"t": RNG.standard_normal((2, 3, 4))}, {"s": np.array([2, 1, 3, 4, 5], np.int64)}
    want = reference(node, {"t": feeds["t"]}, consts, 20)[0].astype(np.float64)
    got, _ = run_node(node, feeds, consts, opset=20, expected=[want])
    assert got[0].dtype == np.float64
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)


def test_output_dtype_mismatch_raises():
    """An output declared with another dtype than the kernel writes is refused, naming the node
    (the kernel would overrun its buffer)."""
    from clglow.errors import InvalidModel

    try:
        from .run_launches import lower_ctx
    except ImportError:
        from run_launches import lower_ctx  # type: ignore
    node = helper.make_node("AffineGrid", ["t", "s"], ["g"], name="ag")
    op, ctx = lower_ctx(node, {"t": np.zeros((1, 2, 3), np.float32)}, {"s": np.array([1, 1, 2, 2], np.int64)},
                        {"g": ((1, 2, 2, 2), np.float64)}, opset=20)
    with pytest.raises(InvalidModel, match="ag"):
        op.lower(ctx)
