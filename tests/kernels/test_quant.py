"""QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear kernels vs onnx.reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("zdt", [np.uint8, np.int8, np.int16, np.uint16])
@pytest.mark.parametrize("kind", ["tensor", "axis", "blocked"])
def test_quantize_dequantize(zdt, kind):
    x = (RNG.standard_normal((2, 4, 6)) * 50).astype(np.float32)
    attrs: dict = {}
    if kind == "tensor":
        s, z = np.array(0.7, np.float32), np.array(3, zdt)
    elif kind == "axis":
        s, z = (RNG.random(4) + 0.2).astype(np.float32), RNG.integers(0, 5, 4).astype(zdt)
    else:
        attrs = {"axis": 2, "block_size": 4}
        s, z = (RNG.random((2, 4, 2)) + 0.2).astype(np.float32), RNG.integers(0, 5, (2, 4, 2)).astype(zdt)
    check(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs), {"x": x, "s": s, "z": z}, opset=21)
    q = RNG.integers(0, 100, x.shape).astype(zdt)
    check(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs), {"q": q, "s": s, "z": z},
          opset=21, rtol=1e-6, atol=1e-6)


def test_dynamic_quantize():
    x = (RNG.standard_normal((3, 7)) * 4).astype(np.float32)
    check(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), {"x": x}, opset=11)


@pytest.mark.parametrize("zdt", [np.uint8, np.int8, np.int16, np.uint16, None])
def test_constant_per_tensor_parameters(zdt):
    """Constant per-tensor scale and zero point: the kernels that take them by value (QDQ models'
    activations). Ties (x/s = k + 0.5) round half to even and values far out of range saturate."""
    s = np.array(0.5, np.float32)
    ties = np.arange(-600, 600, dtype=np.float32) * 0.25  # x / s = k/2: every other one a tie
    big = np.array([1e6, -1e6, 7e5, -7e5, 0.0], np.float32)  # (onnx.reference casts to int before it saturates)
    x = np.concatenate([ties, big, (RNG.standard_normal(301) * 300).astype(np.float32)])
    consts = {"s": s} if zdt is None else {"s": s, "z": np.array(7 if zdt in (np.uint8, np.uint16) else -3, zdt)}
    inputs = ["x"] + list(consts)
    check(helper.make_node("QuantizeLinear", inputs, ["y"]), {"x": x}, consts, opset=21)
    qdt = np.uint8 if zdt is None else zdt
    info = np.iinfo(qdt)
    q = RNG.integers(info.min, int(info.max) + 1, 999).astype(qdt)
    check(helper.make_node("DequantizeLinear", ["q"] + inputs[1:], ["y"]), {"q": q}, consts, opset=21,
          rtol=1e-6, atol=1e-6)
