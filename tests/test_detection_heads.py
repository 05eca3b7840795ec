"""Detection post-processing as torchvision exports it, on the device: per-class score
threshold (Greater -> NonZero -> GatherND), TopK with k computed from the data (min(count, k)),
batched NMS with the per-class offsets trick, Gather of the kept rows; and the plan edges such a
graph reaches (a folded constant handed back as an output under zero copy).

Oracles: onnxruntime (exact: the same float32 arithmetic selects the same boxes in the same
order, ties included) and numpy."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import clglow


def test_folded_constant_output_under_zero_copy():
    """An output folded to a constant that a kernel also reads (ConstantOfShape of a static
    shape: torchvision's per-class labels) is handed back as the constant, and the kernel reads
    it: zero copy once bound the output's array (never written) in place of the constant's buffer."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1],
                                                                                         [5.0])),
             helper.make_node("Mul", ["x", "c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [64])])
    sess = clglow.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    x = np.arange(64, dtype=np.float32)
    for _ in range(2):
        y, c = sess.run(None, {"x": x})
        np.testing.assert_array_equal(c, np.full(64, 5, np.float32))
        np.testing.assert_array_equal(y, x * 5)
