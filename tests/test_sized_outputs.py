"""Device ops whose outputs are sized at run time (lower/select.py, runtime/planning.SizedEnd):
NonZero, Compress and NonMaxSuppression run on OpenCL with host fallback off, their outputs
planned at an upper bound and read back at the real size from a count the device computed.
Every case is checked against onnx.reference (NMS: and against an SSD-style graph run by
onnxruntime), including empty results, everything selected and tied scores; the GPU kernel
family (target="gpu") too.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import clglow

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)

TARGETS = [None, "gpu"]


def _model(nodes, inputs, outputs, inits=(), opset: int = 13) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _session(model: onnx.ModelProto, target=None) -> clglow.InferenceSession:
    return clglow.InferenceSession(model.SerializeToString(),
                                   sess_options=clglow.SessionOptions(host_fallback=False, target=target))


def _check(model: onnx.ModelProto, feeds_list: list, op: str, target=None) -> None:
    """Every feed run by one session equals onnx.reference exactly, `op` placed on OpenCL."""
    sess = _session(model, target)
    ref = ReferenceEvaluator(model)
    for feeds in feeds_list:
        got = sess.run(None, feeds)
        want = ref.run(None, feeds)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.shape, w.shape)
            np.testing.assert_array_equal(g, w)
        assert all(p.where == "opencl" for p in sess.placement if p.op_type == op), sess.explain()


# --- NonZero ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,shape", [(np.float32, (3, 4, 5)), (np.int32, (2000,)), (np.bool_, (7, 300)),
                                         (np.int64, (1, 1, 1, 3))])
def test_nonzero_matches_reference(dtype, shape, target):
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], [helper.make_tensor_value_info("x", elem, shape)],
                   [helper.make_tensor_value_info("y", T.INT64, [len(shape), "n"])])
    rng = np.random.default_rng(1)
    feeds = []
    for p in (0.0, 0.01, 0.5, 1.0):  # none, few, half, all selected
        x = (rng.random(shape) < p) * rng.integers(1, 5, shape)
        if dtype == np.float32:
            x = x * rng.standard_normal(shape)
            x[x == 0] = -0.0 if p > 0.4 else 0.0  # -0.0 is zero
        feeds.append({"x": x.astype(dtype)})
    _check(model, feeds, "NonZero", target)


def test_nonzero_feeds_the_rest_of_the_graph():
    """The count is a sync point, not an end: GatherND of the nonzeros runs after it at the real size."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["vals"]), helper.make_node("Neg", ["vals"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [6, 9])],
                   [helper.make_tensor_value_info("y", T.FLOAT, ["n"])])
    rng = np.random.default_rng(2)
    feeds = [{"x": (rng.standard_normal((6, 9)) * (rng.random((6, 9)) < p)).astype(np.float32)}
             for p in (0.0, 0.3, 1.0)]
    _check(model, feeds, "NonZero")


# --- Compress ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis,clen", [(None, 24), (None, 10), (0, 2), (1, 3), (-1, 2), (2, 1)])
def test_compress_matches_reference(axis, clen, target):
    shape = (2, 3, 4)
    attrs = {} if axis is None else {"axis": axis}
    model = _model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", T.FLOAT, shape),
                    helper.make_tensor_value_info("c", T.BOOL, [clen])],
                   [helper.make_tensor_value_info("y", T.FLOAT, ["n"] if axis is None else [None] * 3)], opset=11)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    feeds = [{"x": x, "c": np.zeros(clen, bool)}, {"x": x, "c": np.ones(clen, bool)},
             {"x": x, "c": rng.random(clen) < 0.5}]
    _check(model, feeds, "Compress", target)


# --- NonMaxSuppression ---------------------------------------------------------------------------------
def _nms_model(center: int, b: int, c: int, n: int, consts: bool) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("boxes", T.FLOAT, [b, n, 4]),
              helper.make_tensor_value_info("scores", T.FLOAT, [b, c, n])]
    inits = []
    params = [("max", T.INT64, [1]), ("iou", T.FLOAT, [1]), ("sthr", T.FLOAT, [1])]
    if not consts:
        inputs += [helper.make_tensor_value_info(k, e, s) for k, e, s in params]
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "sthr"], ["sel"],
                            center_point_box=center)
    return _model([node], inputs, [helper.make_tensor_value_info("sel", T.INT64, ["k", 3])], inits, opset=11)


def _boxes(rng, b: int, n: int, center: int) -> np.ndarray:
    xy = rng.random((b, n, 2)) * 10
    wh = rng.random((b, n, 2)) * 4
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    corners = np.concatenate([xy, xy + wh], -1)
    swap = rng.random((b, n)) < 0.3  # corners in either order
    corners[swap] = corners[swap][:, [2, 3, 0, 1]]
    return corners.astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_reference(center, target):
    b, c, n = 2, 3, 70
    model = _nms_model(center, b, c, n, consts=False)
    rng = np.random.default_rng(4 + center)
    feeds = []
    for limit, iou, sthr in ((5, 0.5, 0.2), (100, 0.3, 0.0), (0, 0.5, 0.0), (10, 0.5, 2.0), (100, 1.0, -1.0),
                             (3, 0.0, 0.5)):
        scores = rng.random((b, c, n)).astype(np.float32)
        scores[:, :, ::7] = scores[:, :, 3:4]  # ties: the lower box index first
        boxes = _boxes(rng, b, n, center)
        boxes[:, 5] = boxes[:, 6]  # identical boxes
        feeds.append({"boxes": boxes, "scores": scores, "max": np.array([limit], np.int64),
                      "iou": np.array([iou], np.float32), "sthr": np.array([sthr], np.float32)})
    _check(model, feeds, "NonMaxSuppression", target)


def test_nms_without_optional_inputs_selects_nothing():
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"])
    model = _model([node], [helper.make_tensor_value_info("boxes", T.FLOAT, [1, 8, 4]),
                            helper.make_tensor_value_info("scores", T.FLOAT, [1, 2, 8])],
                   [helper.make_tensor_value_info("sel", T.INT64, ["k", 3])], opset=11)
    rng = np.random.default_rng(6)
    # max_output_boxes_per_class defaults to 0 (the spec; onnx.reference cannot run without it)
    out = _session(model).run(None, {"boxes": _boxes(rng, 1, 8, 0), "scores": rng.random((1, 2, 8)).astype(np.float32)})
    assert out[0].dtype == np.int64 and out[0].shape == (0, 3)


def _c(name: str, a, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, dtype=dtype), name)


def test_ssd_style_graph_matches_onnxruntime():
    """boxes decoded -> NonMaxSuppression (constant thresholds) -> Gather of the kept boxes and
    GatherND of their scores, with host fallback off: same detections as onnxruntime."""
    a, classes = 200, 4
    nodes = [helper.make_node("Mul", ["deltas", "var"], ["dv"]), helper.make_node("Add", ["anchors", "dv"], ["boxes"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxo", "iou", "sthr"], ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["bidx"], axis=1),
             helper.make_node("Gather", ["sel", "one"], ["labels"], axis=1),
             helper.make_node("Squeeze", ["boxes", "ax0"], ["b2"]),
             helper.make_node("Gather", ["b2", "bidx"], ["kept"], axis=0),
             helper.make_node("GatherND", ["scores", "sel"], ["ksc"])]
    rng = np.random.default_rng(7)
    anchors = _boxes(rng, 1, a, 0)
    inits = [_c("var", 0.1), _c("anchors", anchors), _c("maxo", [20], np.int64), _c("iou", [0.45]),
             _c("sthr", [0.6]), _c("two", 2, np.int64), _c("one", 1, np.int64), _c("ax0", [0], np.int64)]
    model = _model(nodes, [helper.make_tensor_value_info("deltas", T.FLOAT, [1, a, 4]),
                           helper.make_tensor_value_info("logits", T.FLOAT, [1, classes, a])],
                   [helper.make_tensor_value_info("kept", T.FLOAT, ["n", 4]),
                    helper.make_tensor_value_info("labels", T.INT64, ["n"]),
                    helper.make_tensor_value_info("ksc", T.FLOAT, ["n"])], inits)
    sess = _session(model)
    for shift in (0.0, -20.0):  # -20: no score above the threshold, nothing kept
        feeds = {"deltas": rng.standard_normal((1, a, 4)).astype(np.float32),
                 "logits": (rng.standard_normal((1, classes, a)) + shift).astype(np.float32)}
        got = sess.run(None, feeds)
        want = models.ort_run(model, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert all(p.where == "opencl" for p in sess.placement), sess.explain()


# --- Unique ------------------------------------------------------------------------------------------
def _unique_spec(x: np.ndarray, axis, sort: int) -> list:
    """The ONNX spec's four outputs from numpy.unique: sorted=0 orders the distinct values by first
    occurrence (onnx.reference agrees for 1-D inputs and axis 0; elsewhere it takes along axis 0)."""
    y, idx, inv, cnt = np.unique(x, True, True, True, axis=axis)
    inv = inv.reshape(-1)
    if not sort:
        order = np.argsort(idx)
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        idx, cnt, inv = idx[order], cnt[order], place[inv]
        y = np.take(x.reshape(-1) if axis is None else x, idx, axis=0 if axis is None else axis)
    return [y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


def _unique_model(shape, elem, axis, sort: int, outputs: int = 4) -> onnx.ModelProto:
    attrs = {"sorted": sort} if axis is None else {"sorted": sort, "axis": axis}
    names = ["y", "indices", "inverse", "counts"][:outputs]
    rank = 1 if axis is None else len(shape)
    outs = [helper.make_tensor_value_info("y", elem, [None] * rank)] + \
        [helper.make_tensor_value_info(n, T.INT64, [None]) for n in names[1:]]
    return _model([helper.make_node("Unique", ["x"], names, **attrs)],
                  [helper.make_tensor_value_info("x", elem, shape)], outs, opset=11)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,shape,axis", [(np.float32, (40,), None), (np.int64, (6, 7), None),
                                              (np.float32, (5, 4), 0), (np.int32, (3, 6, 2), 1),
                                              (np.float32, (2, 3, 5), -1), (np.bool_, (9,), None)])
@pytest.mark.parametrize("sort", [1, 0])
def test_unique_matches_the_spec_and_reference(dtype, shape, axis, sort, target):
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _unique_model(shape, elem, axis, sort)
    sess = _session(model, target)
    rng = np.random.default_rng(8)
    cases = [rng.integers(0, 3, shape), np.zeros(shape), rng.integers(0, 1000, shape)]  # ties, one value, few ties
    for x in cases:
        x = x.astype(dtype)
        got = sess.run(None, {"x": x})
        want = _unique_spec(x, axis, sort)
        if sort or axis == 0 or (axis is None and len(shape) == 1):
            ref = ReferenceEvaluator(model).run(None, {"x": x})
            for r, w in zip(ref, want):
                np.testing.assert_array_equal(r, w)  # the oracle agrees with onnx.reference here
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.shape, w.shape)
            np.testing.assert_array_equal(g, w)
    assert all(p.where == "opencl" for p in sess.placement), sess.explain()


def test_unique_nan_and_signed_zero_and_fewer_outputs():
    """NaNs are one value after the numbers (numpy.unique's equal_nan); -0.0 equals 0.0 and the
    first occurrence's bits are kept; two outputs only."""
    x = np.array([np.nan, 1.0, -0.0, np.nan, 0.0, -2.0, 1.0], np.float32)
    model = _unique_model(x.shape, T.FLOAT, None, 1, outputs=2)
    got = _session(model).run(None, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g.tobytes() == w.tobytes()


def test_unique_of_an_empty_tensor():
    model = _unique_model((0,), T.FLOAT, None, 1)
    got = _session(model).run(None, {"x": np.zeros(0, np.float32)})
    assert [g.shape for g in got] == [(0,)] * 4


def test_if_with_a_condition_known_after_staging_is_inlined():
    """torchvision's batched NMS is guarded by If(boxes.numel() == 0): once staging knows the
    boxes' shape the condition is a constant, the branch taken runs in place of the If (its
    NonMaxSuppression on OpenCL) and the result equals onnxruntime's, for both branches."""
    else_g = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxo", "iou"], ["sel"]),
         helper.make_node("Gather", ["sel", "two"], ["keep"], axis=1)], "nms", [],
        [helper.make_tensor_value_info("keep", T.INT64, ["k"])])
    then_g = helper.make_graph([helper.make_node("Constant", [], ["none"],
                                                 value=helper.make_tensor("e", T.INT64, [0], []))], "empty", [],
                               [helper.make_tensor_value_info("none", T.INT64, [0])])
    nodes = [helper.make_node("NonZero", ["m"], ["nz"]), helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
             helper.make_node("Gather", ["allboxes", "idx"], ["b"], axis=0),
             helper.make_node("Gather", ["allscores", "idx"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["boxes"]),
             helper.make_node("Unsqueeze", ["s", "ax00"], ["scores"]),
             helper.make_node("Size", ["s"], ["n"]), helper.make_node("Equal", ["n", "zero"], ["empty"]),
             helper.make_node("If", ["empty"], ["kept"], then_branch=then_g, else_branch=else_g)]
    inits = [_c("maxo", [100], np.int64), _c("iou", [0.5]), _c("two", 2, np.int64), _c("ax0", [0], np.int64),
             _c("ax00", [0, 1], np.int64), _c("zero", 0, np.int64)]
    model = _model(nodes, [helper.make_tensor_value_info("m", T.BOOL, [50]),
                           helper.make_tensor_value_info("allboxes", T.FLOAT, [50, 4]),
                           helper.make_tensor_value_info("allscores", T.FLOAT, [50])],
                   [helper.make_tensor_value_info("kept", T.INT64, ["k"])], inits)
    sess = clglow.InferenceSession(model.SerializeToString())  # (the loaded graph's If needs host fallback)
    rng = np.random.default_rng(9)
    boxes = _boxes(rng, 1, 50, 0)[0]
    for p in (0.5, 0.0):
        feeds = {"m": rng.random(50) < p, "allboxes": boxes, "allscores": rng.random(50).astype(np.float32)}
        got = sess.run(None, feeds)[0]
        np.testing.assert_array_equal(got, models.ort_run(model, feeds)[0])
        if p:
            ops = {pl.op_type: pl.where for pl in sess.placement}
            assert "If" not in ops and ops["NonMaxSuppression"] == "opencl", sess.explain()


def test_many_boxes_per_class_run_the_sorted_device_nms():
    """From NMS_SORTED_FROM boxes a class the device sorts the candidates once and tests each kept
    box's x neighbours only (nms_sorted), with host fallback on or off: same result as onnx.reference."""
    from clglow.lower.select import NMS_SORTED_FROM

    n = NMS_SORTED_FROM * 4 + 1
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxo", "iou", "sthr"], ["sel"])
    model = _model([node], [helper.make_tensor_value_info("boxes", T.FLOAT, [1, n, 4]),
                            helper.make_tensor_value_info("scores", T.FLOAT, [1, 1, n])],
                   [helper.make_tensor_value_info("sel", T.INT64, ["k", 3])],
                   [_c("maxo", [50], np.int64), _c("iou", [0.5]), _c("sthr", [0.9])], opset=11)
    rng = np.random.default_rng(10)
    feeds = {"boxes": _boxes(rng, 1, n, 0), "scores": rng.random((1, 1, n)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    for fallback in (True, False):
        sess = clglow.InferenceSession(model.SerializeToString(),
                                       sess_options=clglow.SessionOptions(host_fallback=fallback))
        np.testing.assert_array_equal(sess.run(None, feeds)[0], want)
        assert [p.where for p in sess.placement if p.op_type == "NonMaxSuppression"] == ["opencl"]


def test_independent_data_dependent_nodes_share_one_stage():
    """Two independent NonZero -> GatherND chains (ssdlite320 has 90): one stage runs both
    NonZeros (two counts read with one wait), the next both gathers; results as onnx.reference."""
    nodes, outs = [], []
    for k in "ab":
        nodes += [helper.make_node("Greater", [k, "zero"], [f"m{k}"]),
                  helper.make_node("NonZero", [f"m{k}"], [f"nz{k}"]),
                  helper.make_node("Transpose", [f"nz{k}"], [f"i{k}"], perm=[1, 0]),
                  helper.make_node("GatherND", [k, f"i{k}"], [f"y{k}"])]
        outs.append(helper.make_tensor_value_info(f"y{k}", T.FLOAT, ["n"]))
    model = _model(nodes, [helper.make_tensor_value_info(k, T.FLOAT, [5, 6]) for k in "ab"], outs, [_c("zero", 0.0)])
    rng = np.random.default_rng(11)
    feeds = {"a": rng.standard_normal((5, 6)).astype(np.float32), "b": -np.ones((5, 6), np.float32)}
    _check(model, [feeds], "NonZero")
    sess = _session(model)
    sess.run(None, feeds)
    plan, stages = sess._engine.last_plan, 1
    while plan.stop is not None and plan.next_stages:
        plan, stages = next(iter(plan.next_stages.values())), stages + 1
    assert stages == 2


@pytest.mark.parametrize("budget", [0, None])
def test_host_nms_both_paths_match_reference(budget, monkeypatch):
    """runtime/nms.py: the overlaps found up front (within PAIR_BUDGET) and box by box (beyond
    it, budget 0 here) select what onnx.reference does, ties and swapped corners included."""
    from clglow.runtime import nms

    if budget is not None:
        monkeypatch.setattr(nms, "PAIR_BUDGET", budget)
    rng = np.random.default_rng(12)
    for center in (0, 1):
        boxes = _boxes(rng, 2, 300, center)
        scores = np.round(rng.random((2, 3, 300)) * 8).astype(np.float32) / 8  # many ties
        args = (np.array([40], np.int64), np.array([0.4], np.float32), np.array([0.2], np.float32))
        model = _nms_model(center, 2, 3, 300, consts=False)
        want = ReferenceEvaluator(model).run(None, {"boxes": boxes, "scores": scores, "max": args[0], "iou": args[1],
                                                    "sthr": args[2]})[0]
        np.testing.assert_array_equal(nms.non_max_suppression(boxes, scores, *args, center_point_box=center), want)


def test_empty_inputs():
    """No element at all: the counts are 0 without any counting launch (NonZero, Compress, NMS)."""
    x = np.zeros((0, 3), np.float32)
    nz = _model([helper.make_node("NonZero", ["x"], ["y"])], [helper.make_tensor_value_info("x", T.FLOAT, [0, 3])],
                [helper.make_tensor_value_info("y", T.INT64, [2, "n"])])
    _check(nz, [{"x": x}], "NonZero")
    cp = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=1)],
                [helper.make_tensor_value_info("x", T.FLOAT, [0, 3]), helper.make_tensor_value_info("c", T.BOOL, [3])],
                [helper.make_tensor_value_info("y", T.FLOAT, [None, None])], opset=11)
    _check(cp, [{"x": x, "c": np.array([1, 0, 1], bool)}], "Compress")
    nms = _nms_model(0, 1, 2, 0, consts=False)
    _check(nms, [{"boxes": np.zeros((1, 0, 4), np.float32), "scores": np.zeros((1, 2, 0), np.float32),
                  "max": np.array([5], np.int64), "iou": np.array([0.5], np.float32),
                  "sthr": np.array([0.0], np.float32)}], "NonMaxSuppression")


@pytest.mark.parametrize("dtype,shape,axis", [(np.float32, (70001,), None), (np.int32, (3, 5000, 2), 1)])
@pytest.mark.parametrize("sort", [1, 0])
def test_large_unique_on_the_device(dtype, shape, axis, sort):
    """Any size on the device (sorted there: select.cl unique_merge, 17 passes for 70001 entries),
    scalars with NaNs and -0.0 and slices along an axis, against numpy's unique."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _unique_model(shape, elem, axis, sort)
    x = np.random.default_rng(21).integers(-300, 300, shape).astype(dtype)
    if dtype == np.float32:
        x[::97] = np.nan
        x[5::101] = -0.0
    sess = clglow.InferenceSession(model.SerializeToString(),
                                   sess_options=clglow.SessionOptions(host_fallback=False))
    for g, w in zip(sess.run(None, {"x": x}), _unique_spec(x, axis, sort)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert all(p.where == "opencl" for p in sess.placement), sess.explain()


def test_large_unique_prefers_the_host_sort_unless_host_fallback_is_off():
    """Above UNIQUE_HOST_ENTRIES the host's sort is placed (numpy's is faster on a CPU device)."""
    from clglow.lower.select import UNIQUE_HOST_ENTRIES

    n = UNIQUE_HOST_ENTRIES + 1
    model = _unique_model((n,), T.INT64, None, 1)
    x = np.random.default_rng(13).integers(0, n // 3, n).astype(np.int64)
    want = _unique_spec(x, None, 1)
    for fallback, where in ((True, "host"), (False, "opencl")):
        sess = clglow.InferenceSession(model.SerializeToString(),
                                       sess_options=clglow.SessionOptions(host_fallback=fallback))
        for g, w in zip(sess.run(None, {"x": x}), want):
            np.testing.assert_array_equal(g, w)
        assert [p.where for p in sess.placement if p.op_type == "Unique"] == [where]
