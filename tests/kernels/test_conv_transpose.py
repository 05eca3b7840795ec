"""ConvTranspose kernel vs onnx.reference: strides, pads, dilations, groups, output_padding, auto_pad, 1-3-D."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check as check_expected, lower  # noqa: E402
    from .run_launches import check, reference  # noqa: E402
except ImportError:
    from harness import check as check_expected, lower  # type: ignore  # noqa: E402
    from run_launches import check, reference  # type: ignore  # noqa: E402

RNG = np.random.default_rng(29)


CASES = [
    ((1, 2, 5), (2, 3, 3), dict(strides=[2])),
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 1], pads=[1, 0, 0, 1])),
    ((1, 2, 4, 4), (2, 3, 2, 2), dict(strides=[2, 2], output_padding=[1, 1])),
    ((1, 2, 4, 4), (2, 2, 3, 3), dict(dilations=[2, 2])),
    ((1, 2, 3, 3), (2, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 1, 3, 3, 3), (1, 2, 2, 2, 2), dict(strides=[2, 2, 2])),
    ((2, 24, 9, 13), (24, 20, 2, 2), dict(strides=[2, 2])),   # a decoder's 2x upsampling: GEMM in place
    ((1, 6, 5, 6), (6, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=2)),  # grouped, overlapping taps
]


@pytest.mark.parametrize("xs,ws,attrs", CASES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("w_const", [False, True], ids=["w_live", "w_const"])
def test_conv_transpose(xs, ws, attrs, bias, w_const):
    """Live weights take the gather kernel; constant ones a GEMM over the input channels then
    the gather of each output's taps (COLS)."""
    feeds = {"x": RNG.standard_normal(xs).astype(np.float32), "w": RNG.standard_normal(ws).astype(np.float32)}
    ins = ["x", "w"]
    if bias:
        feeds["b"] = RNG.standard_normal(ws[1] * attrs.get("group", 1)).astype(np.float32)
        ins.append("b")
    node = helper.make_node("ConvTranspose", ins, ["y"], **attrs)
    if attrs.get("group", 1) > 1:  # onnx.reference's grouped ConvTranspose fails: onnxruntime
        consts = {"w": feeds.pop("w")} if w_const else {}
        check(node, feeds, consts, opset=11, rtol=1e-4, atol=1e-4, oracle="onnxruntime")
        return
    consts = {"w": feeds.pop("w")} if w_const else {}
    names = [l.kernel for l in lower(node, feeds, consts,
                                     {"y": (reference(node, feeds, consts, 11)[0].shape, np.float32)}, opset=11)]
    assert ("gemm" in names) == w_const, names
    check(node, feeds, consts, opset=11, rtol=1e-4, atol=1e-4)


def test_conv_transpose_groups():
    """onnx.reference's grouped ConvTranspose fails: the expected output is built per group."""
    x = RNG.standard_normal((1, 4, 4, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 1, 2, 2)).astype(np.float32)
    parts = [reference(helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2]),
                       {"x": x[:, 2 * g:2 * g + 2], "w": w[2 * g:2 * g + 2]}, {}, 11)[0] for g in range(2)]
    check_expected(helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], group=2), {"x": x, "w": w},
                   opset=11, expected=[np.concatenate(parts, axis=1)])
