"""RoiAlign, Col2Im and DeformConv kernels vs onnx.reference over their attributes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
import clglow.lower.col2im  # noqa: E402,F401  (registration)
import clglow.lower.deform_conv  # noqa: E402,F401
import clglow.lower.roialign  # noqa: E402,F401

try:  # tests/kernels may or may not be a package
    from .run_launches import check, device_info  # noqa: E402
except ImportError:
    from run_launches import check, device_info  # type: ignore  # noqa: E402

RNG = np.random.default_rng(5)


def _rois(r: int, h: int, w: int) -> np.ndarray:
    """Random boxes (x1, y1, x2, y2), some reaching past the map, one degenerate."""
    x1, y1 = RNG.uniform(-2, w - 2, r), RNG.uniform(-2, h - 2, r)
    boxes = np.stack([x1, y1, x1 + RNG.uniform(0.2, w, r), y1 + RNG.uniform(0.2, h, r)], 1)
    boxes[0, 2:] = boxes[0, :2]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling,scale,out_hw", [(0, 1.0, (3, 3)), (2, 0.5, (5, 4)), (0, 0.25, (2, 6)),
                                                   (3, 0.5, (4, 4))])
def test_roi_align(mode, ctm, sampling, scale, out_hw):
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = _rois(5, int(10 / scale), int(12 / scale))
    bidx = np.array([0, 1, 1, 0, 1], np.int64)
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                            output_height=out_hw[0], output_width=out_hw[1], sampling_ratio=sampling,
                            spatial_scale=scale)
    check(node, {"x": x, "r": rois, "b": bidx}, opset=16, rtol=1e-4, atol=1e-5)


def test_roi_align_opset10_default_transform():
    """RoiAlign-10 has no coordinate_transformation_mode: no half-pixel offset. onnx.reference
    applies opset 16's default (half_pixel) to it, so onnxruntime is the oracle here."""
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2)
    check(node, {"x": x, "r": _rois(3, 8, 8), "b": np.zeros(3, np.int64)}, opset=10, rtol=1e-4, atol=1e-5,
          oracle="onnxruntime")


@pytest.mark.parametrize("image,block,kw", [
    ((5, 5), (1, 5), {}),
    ((6, 6), (2, 2), {"dilations": [1, 5]}),
    ((5, 5), (2, 2), {"pads": [0, 1, 0, 1]}),
    ((5, 5), (2, 2), {"strides": [2, 2]}),
    ((6, 7), (3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((3, 4, 5), (1, 2, 3), {}),
    ((4, 5, 3), (2, 2, 1), {"strides": [2, 1, 1], "pads": [1, 0, 0, 1, 1, 0]}),
    ((9,), (3,), {"strides": [2], "dilations": [2], "pads": [1, 2]}),
])
def test_col2im(image, block, kw):
    nd = len(image)
    st, dil = kw.get("strides", [1] * nd), kw.get("dilations", [1] * nd)
    pads = kw.get("pads", [0] * (2 * nd))
    cols = [(image[d] + pads[d] + pads[nd + d] - dil[d] * (block[d] - 1) - 1) // st[d] + 1 for d in range(nd)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(cols)))).astype(np.float32)
    check(helper.make_node("Col2Im", ["x", "i", "b"], ["y"], **kw), {"x": x},
          {"i": np.array(image, np.int64), "b": np.array(block, np.int64)}, opset=18, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw,ic,oc,og,mask,bias", [
    ({}, 2, 3, 1, False, False),
    ({"pads": [1, 1, 1, 1]}, 2, 2, 1, True, True),
    ({"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}, 4, 2, 2, True, False),
    ({"group": 2}, 4, 6, 2, False, True),
    ({"group": 2, "offset_group": 4, "pads": [0, 1, 0, 1]}, 4, 2, 4, True, True),
])
def test_deform_conv(kw, ic, oc, og, mask, bias):
    kw = dict(kw)
    kw.setdefault("offset_group", og)
    g = kw.get("group", 1)
    n, ih, iw, kh, kwd = 2, 6, 7, 2, 3
    st, dil, pads = kw.get("strides", [1, 1]), kw.get("dilations", [1, 1]), kw.get("pads", [0, 0, 0, 0])
    oh = (ih + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // st[0] + 1
    ow = (iw + pads[1] + pads[3] - ((kwd - 1) * dil[1] + 1)) // st[1] + 1
    feeds = {"x": RNG.standard_normal((n, ic, ih, iw)).astype(np.float32),
             "w": RNG.standard_normal((oc, ic // g, kh, kwd)).astype(np.float32),
             "o": (RNG.standard_normal((n, og * kh * kwd * 2, oh, ow)) * 1.5).astype(np.float32)}
    inputs = ["x", "w", "o", "", ""]
    if bias:
        feeds["b"] = RNG.standard_normal(oc).astype(np.float32)
        inputs[3] = "b"
    if mask:
        feeds["m"] = RNG.random((n, og * kh * kwd, oh, ow)).astype(np.float32)
        inputs[4] = "m"
    while inputs[-1] == "":
        inputs.pop()
    check(helper.make_node("DeformConv", inputs, ["y"], kernel_shape=[kh, kwd], **kw), feeds, opset=19,
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw,const_w,dtype", [(12, True, np.float32), (12, False, np.float32), (5, True, np.float32),
                                              (5, False, np.float64)])
def test_deform_conv_paths(hw, const_w, dtype):
    """The GEMM's operand paths: constant weights packed at plan time or read in place, columns
    read in place (144 positions) or packed (25); float64 through deform_conv.cl's own product."""
    if dtype == np.float64 and not device_info().has_fp64:
        pytest.skip("the device has no fp64")
    x = RNG.standard_normal((2, 4, hw, hw)).astype(dtype)
    w = RNG.standard_normal((6, 2, 3, 3)).astype(dtype)
    feeds = {"x": x, "o": RNG.standard_normal((2, 18, hw, hw)).astype(dtype),
             "b": RNG.standard_normal(6).astype(dtype)}
    consts = {"w": w} if const_w else {}
    if not const_w:
        feeds["w"] = w
    check(helper.make_node("DeformConv", ["x", "w", "o", "b"], ["y"], kernel_shape=[3, 3], pads=[1] * 4, group=2),
          feeds, consts, opset=19, rtol=1e-4, atol=1e-4)


def test_deform_conv_far_offsets():
    """Offsets far outside the image (taps read 0) and exactly on pixel edges (integer positions)."""
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    off = np.round(RNG.standard_normal((1, 8, 4, 5)) * 30).astype(np.float32)
    off[0, :4] = np.round(off[0, :4] / 30)  # some integer offsets that stay inside
    check(helper.make_node("DeformConv", ["x", "w", "o"], ["y"], kernel_shape=[2, 2]),
          {"x": x, "w": RNG.standard_normal((3, 2, 2, 2)).astype(np.float32), "o": off}, opset=19,
          rtol=1e-4, atol=1e-4)


def test_float64_kernels():
    """RoiAlign, Col2Im (2-D and 3-D) in float64 where the device has cl_khr_fp64."""
    if not device_info().has_fp64:
        pytest.skip("the device has no fp64")
    x = RNG.standard_normal((1, 2, 9, 9))
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=3, output_width=3, mode="max")
    check(node, {"x": x, "r": _rois(4, 9, 9).astype(np.float64), "b": np.zeros(4, np.int64)}, opset=16,
          rtol=1e-10, atol=1e-10)
    for image, block in (((4, 5), (2, 2)), ((3, 3, 4), (2, 1, 2))):
        cols = int(np.prod([i - b + 1 for i, b in zip(image, block)]))
        x = RNG.standard_normal((1, 2 * int(np.prod(block)), cols))
        check(helper.make_node("Col2Im", ["x", "i", "b"], ["y"]), {"x": x},
              {"i": np.array(image, np.int64), "b": np.array(block, np.int64)}, opset=18, rtol=1e-12, atol=1e-12)
