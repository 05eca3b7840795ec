"""passes/identity.py: an inference-mode Dropout whose mask is read (and a training-mode one of
constant ratio 0) passes x through and its mask is folded into a constant of x's shape, so the
model runs with no Dropout left and nothing on the host; results against onnxruntime."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)


@pytest.mark.parametrize("training,ratio,y_is_output", [(None, 0.3, True), (False, 0.5, False), (True, 0.0, False)])
def test_mask_folded(training, ratio, y_is_output, monkeypatch):
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    inits = [numpy_helper.from_array(np.array(ratio, np.float32), "r")]
    ins = ["x", "r"]
    if training is not None:
        inits.append(numpy_helper.from_array(np.array(training), "t"))
        ins.append("t")
    nodes = [helper.make_node("Dropout", ins, ["d", "m"]), helper.make_node("Not", ["m"], ["nm"])]
    outputs = [helper.make_tensor_value_info("nm", T.BOOL, [2, 3, 5])]
    if y_is_output:
        outputs.insert(0, helper.make_tensor_value_info("d", T.FLOAT, [2, 3, 5]))
    else:
        nodes.append(helper.make_node("Relu", ["d"], ["y"]))
        outputs.insert(0, helper.make_tensor_value_info("y", T.FLOAT, [2, 3, 5]))
    g = helper.make_graph(nodes, "drop", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 5])], outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 3, 5)).astype(np.float32)}
    sess = clglow.InferenceSession(m.SerializeToString())
    assert "Dropout" not in [n.op_type for n in sess.graph.nodes]
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
