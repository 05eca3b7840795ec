"""The zoo's detection check (benchmarks/zoo/detection.py) on a small SSD-shaped graph built
here: a head (MatMul) -> Softmax -> max score -> threshold -> NonZero -> gathers of boxes and
scores. The cut at the first Softmax, the post-processing run by clglow from onnxruntime's head
outputs, and that the check fails when the post-processing is wrong (never a blanket pass)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T, helper, numpy_helper

import clglow

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # benchmarks/ is not installed
    sys.path.insert(0, str(REPO))

from benchmarks.zoo import detection, measure  # noqa: E402


def _model(path: Path) -> str:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w")
    wb = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "wb")
    thr = numpy_helper.from_array(np.array(0.45, np.float32), "thr")
    nodes = [helper.make_node("MatMul", ["feat", "w"], ["logits"]),
             helper.make_node("MatMul", ["feat", "wb"], ["raw_boxes"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
             helper.make_node("ReduceMax", ["probs"], ["best"], axes=[1], keepdims=0),
             helper.make_node("Greater", ["best", "thr"], ["keep"]),
             helper.make_node("NonZero", ["keep"], ["nz"]),
             helper.make_node("Reshape", ["nz", "minus1"], ["idx"]),
             helper.make_node("Gather", ["raw_boxes", "idx"], ["boxes"], axis=0),
             helper.make_node("Gather", ["best", "idx"], ["scores"], axis=0)]
    m1 = numpy_helper.from_array(np.array([-1], np.int64), "minus1")
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("feat", T.FLOAT, [64, 8])],
                          [helper.make_tensor_value_info("boxes", T.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("scores", T.FLOAT, ["n"])], [w, wb, thr, m1])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return str(path)


def _ort(b: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(b, measure.ort_options(), providers=["CPUExecutionProvider"])


def test_cut_post_processing_and_verdicts(tmp_path: Path) -> None:
    path = _model(tmp_path / "det.onnx")
    feeds = {"feat": np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)}
    keep, cut = detection.cut_at_softmax(onnx.load(path))
    assert cut == ["probs", "raw_boxes"] and keep[0].op_type == "ReduceMax"
    ref = _ort(open(path, "rb").read()).run(None, feeds)
    assert 3 < len(ref[1]) < 64
    # the whole model's rows 2 and 3 swapped (as near-tie scores do): the check still passes,
    # saying where the whole model's detections start to differ
    got = [np.concatenate([r[:2], r[3:4], r[2:3], r[4:]]) for r in ref]
    rel, ok, note = detection.check(path, feeds, ref, got, _ort, clglow.InferenceSession, measure.compare,
                                    measure.TOLERANCE)
    assert ok and rel <= measure.TOLERANCE, note
    assert "detection check" in note and "first 2 of" in note, note

    class Wrong:  # a post-processing that loses the last detection
        def __init__(self, b: bytes) -> None:
            self.sess = clglow.InferenceSession(b)

        def run(self, names, feeds):
            return [o[:-1] for o in self.sess.run(names, feeds)]

    rel, ok, note = detection.check(path, feeds, ref, got, _ort, Wrong, measure.compare, measure.TOLERANCE)
    assert not ok and "MISMATCH" in note, note


def test_first_difference() -> None:
    a = [np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]), np.array([1, 2, 3])]
    assert detection.first_difference(a, a, 1e-3) is None
    b = [a[0] + np.array([[0.0, 0.0], [0.0, 1e-4], [0.0, 0.0]]), np.array([1, 2, 4])]
    assert detection.first_difference(b, a, 1e-3) == 2  # row 1 within tolerance, row 2's label differs
    assert detection.first_difference([x[:2] for x in a], a, 1e-3) == 2  # fewer detections
