"""The host's vectorised NonMaxSuppression (runtime/nms.py) against onnx.reference's and
onnxruntime's: same boxes in the same order, at detection-model sizes that onnx.reference's
pairwise Python loop makes slow."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.runtime.nms import non_max_suppression


def _model(center_point_box: int, with_score: bool) -> onnx.ModelProto:
    inputs = ["boxes", "scores", "max_out", "iou"] + (["score_thr"] if with_score else [])
    node = helper.make_node("NonMaxSuppression", inputs, ["sel"], center_point_box=center_point_box)
    vis = [helper.make_tensor_value_info("boxes", T.FLOAT, ["b", "n", 4]),
           helper.make_tensor_value_info("scores", T.FLOAT, ["b", "c", "n"]),
           helper.make_tensor_value_info("max_out", T.INT64, [1]),
           helper.make_tensor_value_info("iou", T.FLOAT, [1])]
    if with_score:
        vis.append(helper.make_tensor_value_info("score_thr", T.FLOAT, [1]))
    g = helper.make_graph([node], "nms", vis, [helper.make_tensor_value_info("sel", T.INT64, ["k", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(rng, b: int, c: int, n: int, ties: bool, max_out: int, iou: float, thr):
    xy = rng.random((b, n, 2), dtype=np.float32) * 10
    wh = rng.random((b, n, 2), dtype=np.float32) * 4
    boxes = np.concatenate([xy, xy + wh], axis=2)
    boxes[:, ::7] = boxes[:, ::7][..., [2, 3, 0, 1]]  # some boxes with corners swapped
    scores = rng.random((b, c, n), dtype=np.float32)
    if ties:
        scores = np.round(scores * 8) / 8  # many equal scores: the box-index tie rule decides
    feeds = {"boxes": boxes, "scores": scores, "max_out": np.array([max_out], np.int64),
             "iou": np.array([iou], np.float32)}
    if thr is not None:
        feeds["score_thr"] = np.array([thr], np.float32)
    return feeds


CASES = [(1, 1, 50, False, 10, 0.5, None), (2, 3, 120, True, 30, 0.3, 0.2), (1, 2, 200, True, 1000, 0.0, None),
         (3, 1, 64, False, 5, 0.9, 0.6), (1, 1, 0, False, 4, 0.5, None), (1, 2, 40, True, 0, 0.5, 0.1)]


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("case", CASES)
def test_same_selection_as_onnx_reference(case, center):
    b, c, n, ties, max_out, iou, thr = case
    model = _model(center, thr is not None)
    feeds = _feeds(np.random.default_rng(list(case[:3])), b, c, n, ties, max_out, iou, thr)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = non_max_suppression(feeds["boxes"], feeds["scores"], feeds["max_out"], feeds["iou"],
                              feeds.get("score_thr"), center)
    np.testing.assert_array_equal(got.reshape(-1, 3), expected.reshape(-1, 3))


@pytest.mark.parametrize("center", [0, 1])
def test_odd_boxes(center):
    """Zero and negative extents, a NaN coordinate, boxes of very different sizes (NaN scores have no
    defined order: onnx.reference places them wherever its sort leaves them)."""
    rng = np.random.default_rng(11)
    feeds = _feeds(rng, 1, 2, 90, True, 50, 0.2, None)
    feeds["boxes"][0, 3:9, 2] = -feeds["boxes"][0, 3:9, 2]
    feeds["boxes"][0, 10:12] = feeds["boxes"][0, 10:12][:, [0, 1, 0, 1]]  # zero extent
    feeds["boxes"][0, 13, 1] = np.nan
    feeds["boxes"][0, 20:30] *= 50
    model = _model(center, False)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = non_max_suppression(feeds["boxes"], feeds["scores"], feeds["max_out"], feeds["iou"], None, center)
    np.testing.assert_array_equal(got.reshape(-1, 3), expected.reshape(-1, 3))


def test_a_session_runs_it_fast_and_matches_onnxruntime():
    """Detection-head size (4 classes x 3000 boxes, all above the threshold): a second or two on the
    host path (onnx.reference's loop took minutes on such inputs), same selection as onnxruntime."""
    import time

    ort = pytest.importorskip("onnxruntime")
    model = _model(0, True)
    feeds = _feeds(np.random.default_rng(5), 1, 4, 3000, False, 200, 0.5, 0.01)
    sess = clglow.InferenceSession(model)
    t0 = time.perf_counter()
    got = sess.run(None, feeds)[0]
    elapsed = time.perf_counter() - t0
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, expected)
    assert elapsed < 20, elapsed
