"""The gemv row of CONV_PATHS (lower/conv_gemv.py, kernels_cl/conv_gemv.cl): 1x1 convs of 1x1
maps (SE blocks' FCs, a head after global pooling) vs onnx.reference, with the fused epilogue."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:
    from .harness import check, lower
    from .run_launches import reference
except ImportError:  # pragma: no cover - run as a plain directory
    from harness import check, lower  # type: ignore
    from run_launches import reference  # type: ignore

from clglow.lower import conv as conv_mod
from clglow.lower.common import ConvGeometry, Epilogue
from clglow.target import Target

RNG = np.random.default_rng(5)
CPU = Target(family="cpu")  # the CPU family's path choices (the gemv row), whatever device runs them


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("n_img,cin,cout,bias", [(1, 576, 1024, True), (1, 16, 8, True), (3, 7, 33, False),
                                                 (2, 1, 17, True), (1, 40, 1, True)])
def test_gemv_conv(n_img, cin, cout, bias):
    x, w = rand(n_img, cin, 1, 1), rand(cout, cin, 1, 1)
    consts = {"w": w, **({"b": rand(cout)} if bias else {})}
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"])
    check(node, {"x": x}, consts, device=CPU)
    launches = lower(node, {"x": x}, consts, {"y": ((n_img, cout, 1, 1), np.float32)}, device=CPU)
    assert [la.kernel for la in launches] == ["conv_gemv"]


def _hard_sigmoid(v, a=0.2, b=0.5):
    return np.clip(v * a + b, 0, 1)


@pytest.mark.parametrize("act,fn", [("Relu", lambda v: np.maximum(v, 0)), ("HardSigmoid", _hard_sigmoid),
                                    ("HardSwish", lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
                                    ("Sigmoid", lambda v: 1 / (1 + np.exp(-v)))])
@pytest.mark.parametrize("residual", [False, True])
def test_gemv_fused(act, fn, residual):
    x, w, b = rand(2, 24, 1, 1), rand(20, 24, 1, 1), rand(20)
    y = reference(helper.make_node("Conv", ["x", "w", "b"], ["y"]), {"x": x}, {"w": w, "b": b}, 17)[0]
    feeds = {"x": x}
    if residual:
        feeds["z"] = rand(*y.shape)
        y = y + feeds["z"]
    alpha, beta = (0.2, 0.5) if act == "HardSigmoid" else (0.0, 0.0)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z" if residual else ""], ["y"], domain="clglow",
                            activation=act, alpha=alpha, beta=beta)
    check(node, feeds, {"w": w, "b": b}, expected=[fn(y).astype(np.float32)], device=CPU)


def test_gemv_not_taken():
    """Live weights, grouped convs, larger maps and the GPU family keep the other paths."""
    geom = ConvGeometry(1, 1, 1, 1, 1, 1, cin=8, cout=8)
    case = conv_mod.ConvCase(Target(family="cpu"), conv_mod.PlanOptions(), geom, Epilogue(""), True)
    assert conv_mod.choose_path(case).name == "gemv"
    for c in (conv_mod.ConvCase(Target(family="cpu"), conv_mod.PlanOptions(), geom, Epilogue(""), False),
              conv_mod.ConvCase(Target(family="gpu"), conv_mod.PlanOptions(), geom, Epilogue(""), True),
              conv_mod.ConvCase(Target(family="cpu"), conv_mod.PlanOptions(),
                                ConvGeometry(1, 1, 1, 1, 1, 1, cin=8, cout=8, groups=2), Epilogue(""), True),
              conv_mod.ConvCase(Target(family="cpu"), conv_mod.PlanOptions(),
                                ConvGeometry(2, 2, 2, 2, 1, 1, cin=8, cout=8), Epilogue(""), True)):
        assert conv_mod.choose_path(c).name != "gemv"
