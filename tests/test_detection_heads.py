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


def _ort(model, feeds: dict) -> list:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _topk_of_count_model(n: int, cap: int) -> object:
    """TopK of the scores above 0.5 along the row, k = min(cap, how many there are): a k only the
    device knows (computed from the data in the same stage), so TopK's outputs are sized at run
    time; Gather of the indices' rows of a second tensor after it."""
    T = TensorProto
    nodes = [helper.make_node("Greater", ["scores", "half"], ["above"]),
             helper.make_node("Cast", ["above"], ["above_i"], to=T.INT64),
             helper.make_node("ReduceSum", ["above_i"], ["count"], keepdims=1),  # [1]
             helper.make_node("Min", ["count", "cap"], ["k"]),
             helper.make_node("TopK", ["scores", "k"], ["top", "idx"], axis=0),
             helper.make_node("Gather", ["boxes", "idx"], ["picked"], axis=0)]
    g = helper.make_graph(nodes, "topk_count", [helper.make_tensor_value_info("scores", T.FLOAT, [n]),
                                                 helper.make_tensor_value_info("boxes", T.FLOAT, [n, 4])],
                          [helper.make_tensor_value_info("top", T.FLOAT, ["k"]),
                           helper.make_tensor_value_info("idx", T.INT64, ["k"]),
                           helper.make_tensor_value_info("picked", T.FLOAT, ["k", 4])],
                          [helper.make_tensor("half", T.FLOAT, [], [0.5]), helper.make_tensor("cap", T.INT64, [1], [cap])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("n,cap", [(50, 10), (3234, 300), (700, 700)])
def test_topk_with_a_k_from_data_runs_on_the_device(n, cap):
    """TopK whose k is computed from the data: sized at run time on OpenCL (host fallback off),
    equal to onnxruntime, ties (scores rounded to a few values) in index order."""
    model = _topk_of_count_model(n, cap)
    rng = np.random.default_rng(n)
    feeds = {"scores": np.round(rng.random(n, dtype=np.float32) * 8) / 8,
             "boxes": rng.random((n, 4), dtype=np.float32)}
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    got = sess.run(None, feeds)
    for g_, want in zip(got, _ort(model, feeds)):
        np.testing.assert_array_equal(g_, want)
    assert all(p.where == "opencl" for p in sess.placement)
