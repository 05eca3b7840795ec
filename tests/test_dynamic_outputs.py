"""Outputs and intermediate values whose size is only known after a node ran (issue 21, part 2):
NonZero, NonMaxSuppression, Unique, TopK with a data k, Compress, Loop scan outputs. The engine
runs such a graph in stages (shapes.specialize stops after the node, runtime/engine.Engine plans
the rest for the real shapes); every output comes back with its real shape, and get_outputs()
shows the symbolic dim. Detection post-processing in the shape torchvision exports it (SSD and
Faster R-CNN heads: boxes decode, TopK on scores, NonMaxSuppression, Gather of the kept boxes,
Concat) is built here with onnx.helper and checked against onnxruntime: same boxes, scores,
labels. Before the fix the nodes after the first data-dependent node were dropped and the
output read failed with "invalid literal for int() with base 10: 'Concatboxes_dim_0'".
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name: str, a, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, dtype=dtype), name)


def _check(model: onnx.ModelProto, feeds: dict, sess: clglow.InferenceSession | None = None) -> list:
    """clglow's outputs equal onnxruntime's: shapes, dtypes, values (exact for integers)."""
    ref = models.ort_run(model, feeds)
    sess = sess or clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    assert len(got) == len(ref)
    for g, r, o in zip(got, ref, model.graph.output):
        assert g.shape == r.shape, (o.name, g.shape, r.shape)
        assert g.dtype == r.dtype, o.name
        if r.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=o.name)
        else:
            np.testing.assert_array_equal(g, r, err_msg=o.name)
    return got


# --- SSD-style post-processing -------------------------------------------------------------------------
def _anchors(a: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xy = rng.random((a, 2)).astype(np.float32) * 0.8
    wh = 0.05 + rng.random((a, 2)).astype(np.float32) * 0.2
    return np.concatenate([xy, xy + wh], 1)


def ssd_postprocess(a: int = 64, classes: int = 3, max_per_class: int = 5, pre_nms: int = 32) -> onnx.ModelProto:
    """boxes = anchors + 0.1 * deltas; scores = Sigmoid(logits); the best `pre_nms` anchors by
    their top class score (TopK with k = Min(pre_nms, A) from Shape); NonMaxSuppression per class;
    the kept boxes gathered, their scores gathered (GatherND), Concat -> dets [N, 5], labels [N]."""
    nodes = [
        helper.make_node("Mul", ["deltas", "var"], ["dv"]),
        helper.make_node("Add", ["anchors", "dv"], ["boxes"]),                 # [1, A, 4]
        helper.make_node("Sigmoid", ["logits"], ["scores"]),                   # [1, A, C]
        helper.make_node("ReduceMax", ["scores"], ["best"], axes=[2], keepdims=0),  # [1, A]
        helper.make_node("Shape", ["best"], ["bshape"]),
        helper.make_node("Slice", ["bshape", "one1", "two1"], ["na"]),
        helper.make_node("Min", ["na", "prek"], ["k"]),
        helper.make_node("TopK", ["best", "k"], ["topv", "topi"], axis=1),    # [1, K]
        helper.make_node("Squeeze", ["topi", "ax0"], ["topi1"]),               # [K]
        helper.make_node("Gather", ["boxes", "topi1"], ["cboxes"], axis=1),    # [1, K, 4]
        helper.make_node("Gather", ["scores", "topi1"], ["cscores"], axis=1),  # [1, K, C]
        helper.make_node("Transpose", ["cscores"], ["st"], perm=[0, 2, 1]),    # [1, C, K]
        helper.make_node("NonMaxSuppression", ["cboxes", "st", "maxo", "iou", "sthr"], ["sel"]),  # [N, 3]
        helper.make_node("Gather", ["sel", "two"], ["bidx"], axis=1),          # [N]
        helper.make_node("Gather", ["sel", "one"], ["labels"], axis=1),        # [N]
        helper.make_node("Squeeze", ["cboxes", "ax0"], ["cb2"]),                # [K, 4]
        helper.make_node("Gather", ["cb2", "bidx"], ["kept"], axis=0),         # [N, 4]
        helper.make_node("GatherND", ["st", "sel"], ["ksc"]),                  # [N]
        helper.make_node("Unsqueeze", ["ksc", "ax1"], ["ksc1"]),
        helper.make_node("Concat", ["kept", "ksc1"], ["dets"], axis=1),        # [N, 5]
    ]
    inits = [_c("var", 0.1), _c("anchors", _anchors(a)[None]), _c("maxo", [max_per_class], np.int64),
             _c("iou", [0.5]), _c("sthr", [0.3]), _c("two", 2, np.int64), _c("one", 1, np.int64),
             _c("ax0", [0], np.int64), _c("ax1", [1], np.int64), _c("one1", [1], np.int64),
             _c("two1", [2], np.int64), _c("prek", [pre_nms], np.int64)]
    return _model(nodes, [_vi("deltas", T.FLOAT, ["batch", a, 4]), _vi("logits", T.FLOAT, ["batch", a, classes])],
                  [_vi("dets", T.FLOAT, ["Concatboxes_dim_0", 5]), _vi("labels", T.INT64, ["Concatboxes_dim_0"])],
                  inits)


def _ssd_feeds(a: int = 64, classes: int = 3, seed: int = 0, shift: float = 0.0) -> dict:
    rng = np.random.default_rng(seed)
    return {"deltas": rng.standard_normal((1, a, 4)).astype(np.float32),
            "logits": (rng.standard_normal((1, a, classes)) + shift).astype(np.float32)}


def test_ssd_postprocess_matches_onnxruntime():
    model = ssd_postprocess()
    sess = clglow.InferenceSession(model.SerializeToString())
    assert [o.shape for o in sess.get_outputs()] == [["Concatboxes_dim_0", 5], ["Concatboxes_dim_0"]]
    counts = set()
    for seed, shift in ((0, 0.0), (0, -2.0), (1, -3.0), (2, -8.0)):  # 15, 13, 1, 0 detections
        dets, labels = _check(model, _ssd_feeds(seed=seed, shift=shift), sess)
        counts.add(dets.shape[0])
    assert counts == {15, 13, 1, 0}  # the number of detections followed the data


def test_ssd_postprocess_gpu_family(monkeypatch):
    monkeypatch.setenv("CLGLOW_TARGET", "gpu")
    _check(ssd_postprocess(), _ssd_feeds(seed=4))


# --- Faster R-CNN-style head ---------------------------------------------------------------------------
def rcnn_head(a: int = 48, c: int = 4, fs: int = 16, classes: int = 5) -> onnx.ModelProto:
    """Region proposals above a threshold: k = count of objectness > 0 (TopK with a data k),
    their boxes decoded, NonMaxSuppression over them, RoiAlign of the kept ones on a feature map,
    a Flatten -> Gemm box head, per-proposal class scores (Softmax), labels (ArgMax)."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["img", "wf"], ["feat"], pads=[1, 1, 1, 1]),      # [1, c, fs, fs]
        helper.make_node("Relu", ["feat"], ["featr"]),
        helper.make_node("Greater", ["obj", "zerof"], ["pos"]),                    # [A]
        helper.make_node("Cast", ["pos"], ["posi"], to=T.INT64),
        helper.make_node("ReduceSum", ["posi"], ["k"], keepdims=1),                 # [1]: data
        helper.make_node("TopK", ["obj", "k"], ["topv", "topi"], axis=0),           # [K]
        helper.make_node("Gather", ["props", "topi"], ["pb"], axis=0),              # [K, 4]
        helper.make_node("Mul", ["pb", "scale"], ["pbs"]),                          # image coords
        helper.make_node("Unsqueeze", ["pbs", "ax0"], ["pb1"]),
        helper.make_node("Unsqueeze", ["topv", "ax0"], ["tv1"]),
        helper.make_node("Unsqueeze", ["tv1", "ax0"], ["tv2"]),                     # [1, 1, K]
        helper.make_node("NonMaxSuppression", ["pb1", "tv2", "maxo", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["keep"], axis=1),               # [N]
        helper.make_node("Gather", ["pbs", "keep"], ["rois"], axis=0),              # [N, 4]
        helper.make_node("Shape", ["keep"], ["nshape"]),
        helper.make_node("ConstantOfShape", ["nshape"], ["bidx"], value=numpy_helper.from_array(np.zeros(1, np.int64))),
        helper.make_node("RoiAlign", ["featr", "rois", "bidx"], ["pooled"], output_height=4, output_width=4,
                         sampling_ratio=2, spatial_scale=1.0),                      # [N, c, 4, 4]
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wh", "bh"], ["logits"]),                 # [N, classes]
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("ArgMax", ["probs"], ["labels"], axis=1, keepdims=0),
    ]
    inits = [_c("wf", rng.standard_normal((c, 3, 3, 3)) * 0.3), _c("zerof", 0.0), _c("props", _anchors(a, 2)),
             _c("scale", float(fs - 1)), _c("ax0", [0], np.int64), _c("maxo", [10], np.int64), _c("iou", [0.4]),
             _c("two", 2, np.int64), _c("wh", rng.standard_normal((c * 16, classes)) * 0.2),
             _c("bh", rng.standard_normal(classes) * 0.1)]
    return _model(nodes, [_vi("img", T.FLOAT, [1, 3, fs, fs]), _vi("obj", T.FLOAT, [a])],
                  [_vi("rois", T.FLOAT, ["N", 4]), _vi("probs", T.FLOAT, ["N", classes]),
                   _vi("labels", T.INT64, ["N"])], inits, opset=16)


def test_rcnn_head_matches_onnxruntime():
    model = rcnn_head()
    sess = clglow.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    sizes = set()
    for shift in (0.0, 1.0, -1.5):
        feeds = {"img": rng.standard_normal((1, 3, 16, 16)).astype(np.float32),
                 "obj": (rng.standard_normal(48) + shift).astype(np.float32)}
        rois, _, _ = _check(model, feeds, sess)
        sizes.add(rois.shape[0])
    assert len(sizes) >= 2


# --- NonZero, Unique, Compress, Loop ---------------------------------------------------------------------
def test_nonzero_gather_chain():
    """NonZero -> Transpose -> GatherND -> elementwise -> ReduceSum: every node after NonZero runs
    at the real count, and the count itself is an output."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["nzt"]), helper.make_node("GatherND", ["x", "nzt"], ["v"]),
             helper.make_node("Mul", ["v", "v"], ["v2"]), helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0),
             helper.make_node("Shape", ["v"], ["n"])]
    model = _model(nodes, [_vi("x", T.FLOAT, [6, 7])],
                   [_vi("nz", T.INT64, [2, "nnz"]), _vi("v2", T.FLOAT, ["nnz"]), _vi("s", T.FLOAT, []),
                    _vi("n", T.INT64, [1])], [_c("thr", 0.5)])
    sess = clglow.InferenceSession(model.SerializeToString())
    assert sess.get_outputs()[0].shape == [2, "nnz"]
    for seed in range(3):
        _check(model, {"x": np.random.default_rng(seed).standard_normal((6, 7)).astype(np.float32)}, sess)
    _check(model, {"x": np.zeros((6, 7), np.float32)}, sess)  # nothing above the threshold


def test_unique_and_compress():
    nodes = [helper.make_node("Unique", ["ids"], ["u", "ui", "inv", "cnt"], sorted=1),
             helper.make_node("Cast", ["u"], ["uf"], to=T.FLOAT),
             helper.make_node("Mul", ["uf", "half"], ["uh"]),
             helper.make_node("Greater", ["x", "zero"], ["cond"]),
             helper.make_node("Compress", ["x", "cond"], ["cx"], axis=0),
             helper.make_node("Neg", ["cx"], ["y"])]
    model = _model(nodes, [_vi("ids", T.INT64, [20]), _vi("x", T.FLOAT, [12])],
                   [_vi("uh", T.FLOAT, ["n_unique"]), _vi("inv", T.INT64, [20]), _vi("cnt", T.INT64, ["n_unique"]),
                    _vi("y", T.FLOAT, ["n_kept"])], [_c("half", 0.5), _c("zero", 0.0)])
    sess = clglow.InferenceSession(model.SerializeToString())
    for seed in range(2):
        rng = np.random.default_rng(seed)
        _check(model, {"ids": rng.integers(0, 8 + 4 * seed, 20).astype(np.int64),
                       "x": rng.standard_normal(12).astype(np.float32)}, sess)


def test_loop_scan_output():
    """A Loop whose trip count is data (an input) and whose scan output stacks one row per
    iteration; the stacked rows feed device nodes after it; every node on OpenCL."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "acc_out"], ["row"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", T.INT64, []), _vi("cond_in", T.BOOL, []), _vi("acc_in", T.FLOAT, [3])],
        [_vi("cond_out", T.BOOL, []), _vi("acc_out", T.FLOAT, [3]), _vi("row", T.FLOAT, [3])])
    nodes = [helper.make_node("Loop", ["trips", "cond", "x"], ["acc", "rows"], body=body),
             helper.make_node("Sigmoid", ["rows"], ["srows"]),
             helper.make_node("ReduceSum", ["srows", "ax0"], ["total"], keepdims=0)]
    model = _model(nodes, [_vi("trips", T.INT64, []), _vi("x", T.FLOAT, [3])],
                   [_vi("acc", T.FLOAT, [3]), _vi("srows", T.FLOAT, ["iters", 3]), _vi("total", T.FLOAT, [3])],
                   [helper.make_tensor("cond", T.BOOL, [], [True]), _c("ax0", [0], np.int64),
                    helper.make_tensor("step", T.FLOAT, [3], [0.1, 0.2, 0.3])], opset=13)
    sess = clglow.InferenceSession(model.SerializeToString())
    assert sess.get_outputs()[1].shape == ["iters", 3]
    x = np.array([0.5, -1.0, 0.25], np.float32)
    for trips in (4, 1, 7):
        _check(model, {"trips": np.array(trips, np.int64), "x": x}, sess)
        # the trip count is a plan constant (engine.SHAPE_INPUTS): staging unrolls the Loop
        assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()


def test_symbolic_output_dims_are_named():
    """An output whose dim shape inference cannot name gets a generated name, not None."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"])]
    model = _model(nodes, [_vi("x", T.FLOAT, [4, 4])], [_vi("nz", T.INT64, [None, None])])
    sess = clglow.InferenceSession(model.SerializeToString())
    shape = sess.get_outputs()[0].shape
    assert shape[0] == 2 and isinstance(shape[1], str) and shape[1]
    _check(model, {"x": np.eye(4, dtype=np.float32)}, sess)


def test_dynamic_outputs_without_host_fallback_are_refused_clearly(monkeypatch):
    """With CLGLOW_HOST_FALLBACK=0 a node with no kernel is a clglow error naming it."""
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    model = ssd_postprocess()
    try:
        _check(model, _ssd_feeds(seed=5))
    except clglow.ClglowError as e:
        assert "host fallback is disabled" in str(e)


def test_if_branches_of_different_sizes():
    """torchvision's post-processing guards empty detections with If: the branch taken decides
    the size (a NonZero gather, or an empty constant); the nodes after it run at that size."""
    then_g = helper.make_graph([helper.make_node("NonZero", ["m"], ["nz"]),
                                helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
                                helper.make_node("Gather", ["x", "idx"], ["out"])],
                               "then", [], [_vi("out", T.FLOAT, ["k"])])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["out2"],
                                                 value=helper.make_tensor("e", T.FLOAT, [0], []))],
                               "else", [], [_vi("out2", T.FLOAT, [0])])
    nodes = [helper.make_node("Greater", ["x", "zero"], ["m"]), helper.make_node("Cast", ["m"], ["mi"], to=T.INT64),
             helper.make_node("ReduceSum", ["mi"], ["cnt"], keepdims=0),
             helper.make_node("Greater", ["cnt", "zeroi"], ["any"]),
             helper.make_node("If", ["any"], ["sel"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Mul", ["sel", "sel"], ["y"])]
    model = _model(nodes, [_vi("x", T.FLOAT, [10])], [_vi("y", T.FLOAT, ["n"])],
                   [_c("zero", 0.0), _c("zeroi", 0, np.int64), _c("ax0", [0], np.int64)])
    sess = clglow.InferenceSession(model.SerializeToString())
    for x in (np.random.default_rng(0).standard_normal(10).astype(np.float32), -np.ones(10, np.float32)):
        _check(model, {"x": x}, sess)
