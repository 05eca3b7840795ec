"""Loss kernels (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) vs onnx.reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight,ignore", [(False, None), (True, None), (True, 1), (False, 2)])
def test_loss(op, reduction, weight, ignore):
    x = RNG.standard_normal((3, 5, 2, 2)).astype(np.float32)
    t = RNG.integers(0, 5, (3, 2, 2)).astype(np.int64)
    feeds = {"x": x, "t": t}
    ins = ["x", "t"]
    if weight:
        feeds["w"] = RNG.random(5).astype(np.float32)
        ins.append("w")
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    outs = ["y", "lp"] if op == "SoftmaxCrossEntropyLoss" else ["y"]
    check(helper.make_node(op, ins, outs, **attrs), feeds, opset=13, rtol=1e-5, atol=1e-5)
