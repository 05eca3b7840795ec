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
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = clglow.InferenceSession(model.SerializeToString())
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
                          [helper.make_tensor("half", T.FLOAT, [], [0.5]),
                           helper.make_tensor("cap", T.INT64, [1], [cap])])
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


def _nms_model(b: int, c: int, n: int, center: int, score_threshold: bool, limit: int) -> object:
    T = TensorProto
    ins = ["boxes", "scores", "maxo", "iou"] + (["sthr"] if score_threshold else [])
    inits = [helper.make_tensor("maxo", T.INT64, [1], [limit]), helper.make_tensor("iou", T.FLOAT, [1], [0.45])]
    if score_threshold:
        inits.append(helper.make_tensor("sthr", T.FLOAT, [1], [0.3]))
    g = helper.make_graph([helper.make_node("NonMaxSuppression", ins, ["sel"], center_point_box=center)], "nms",
                          [helper.make_tensor_value_info("boxes", T.FLOAT, [b, n, 4]),
                           helper.make_tensor_value_info("scores", T.FLOAT, [b, c, n])],
                          [helper.make_tensor_value_info("sel", T.INT64, ["k", 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])


def _clustered_boxes(rng, b: int, n: int, center: int) -> np.ndarray:
    """Boxes in 30 clusters far apart in x (as torchvision's per-class offsets place them), many
    overlapping within each; corners in either order, or centre + size."""
    cluster = rng.integers(0, 30, (b, n, 1)).astype(np.float32) * 400
    xy = rng.random((b, n, 2), dtype=np.float32) * 300
    wh = rng.random((b, n, 2), dtype=np.float32) * 90 + 1
    if center:
        return np.concatenate([xy[..., :1] + cluster, xy[..., 1:], wh], -1).astype(np.float32)
    y0, x0 = xy[..., :1], xy[..., 1:] + cluster
    y1, x1 = y0 + wh[..., :1], x0 + wh[..., 1:]
    return np.concatenate([y1, x0, y0, x1], -1).astype(np.float32)  # y corners swapped: min/max apply


@pytest.mark.parametrize("b,c,n,center,thr,limit", [(1, 1, 4000, 0, False, 10 ** 9), (2, 3, 1500, 1, True, 10 ** 9),
                                                    (1, 2, 2500, 0, True, 40)])
def test_sorted_nms_matches_onnxruntime(b, c, n, center, thr, limit):
    """The sorted device NMS (from NMS_SORTED_FROM boxes a class): same boxes in the same order as
    onnxruntime, with scores rounded to 1/64 (ties: lower box index first), both box formats, a
    score threshold and a per-class limit."""
    model = _nms_model(b, c, n, center, thr, limit)
    rng = np.random.default_rng(n + c)
    feeds = {"boxes": _clustered_boxes(rng, b, n, center),
             "scores": (np.round(rng.random((b, c, n)) * 64) / 64).astype(np.float32)}
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    np.testing.assert_array_equal(sess.run(None, feeds)[0], _ort(model, feeds)[0])


def _ssd_head(anchors: int, classes: int, per_class: int) -> object:
    """An SSD-style post-processing as torchvision exports it: per class, scores above 0.05 ->
    NonZero -> GatherND, TopK with k = min(per_class, count), their boxes gathered; the classes
    concatenated, offset apart by label * (max coordinate + 1), one NMS, the kept rows gathered."""
    T = TensorProto
    nodes = [helper.make_node("ReduceMax", ["boxes"], ["maxc"], keepdims=0),
             helper.make_node("Add", ["maxc", "one"], ["span"])]
    parts = {"b": [], "s": [], "l": []}
    for k in range(classes):
        p = f"c{k}_"
        nodes += [helper.make_node("Gather", ["scores", f"{p}i"], [f"{p}s"], axis=1),
                  helper.make_node("Greater", [f"{p}s", "thr"], [f"{p}m"]),
                  helper.make_node("NonZero", [f"{p}m"], [f"{p}nz"]),
                  helper.make_node("Transpose", [f"{p}nz"], [f"{p}nzt"], perm=[1, 0]),
                  helper.make_node("GatherND", [f"{p}s", f"{p}nzt"], [f"{p}sel"]),
                  helper.make_node("GatherND", ["boxes", f"{p}nzt"], [f"{p}box"]),
                  helper.make_node("Shape", [f"{p}sel"], [f"{p}n"]),
                  helper.make_node("Concat", [f"{p}n", "cap"], [f"{p}nc"], axis=0),
                  helper.make_node("ReduceMin", [f"{p}nc"], [f"{p}k"], keepdims=1),
                  helper.make_node("TopK", [f"{p}sel", f"{p}k"], [f"{p}top", f"{p}idx"], axis=0),
                  helper.make_node("Gather", [f"{p}box", f"{p}idx"], [f"{p}tb"], axis=0),
                  helper.make_node("Shape", [f"{p}top"], [f"{p}tn"]),
                  helper.make_node("ConstantOfShape", [f"{p}tn"], [f"{p}lab"],
                                   value=helper.make_tensor("v", T.INT64, [1], [k + 1]))]
        parts["b"].append(f"{p}tb"), parts["s"].append(f"{p}top"), parts["l"].append(f"{p}lab")
    nodes += [helper.make_node("Concat", parts["b"], ["allb"], axis=0),
              helper.make_node("Concat", parts["s"], ["alls"], axis=0),
              helper.make_node("Concat", parts["l"], ["alll"], axis=0),
              helper.make_node("Cast", ["alll"], ["lf"], to=T.FLOAT),
              helper.make_node("Mul", ["lf", "span"], ["off"]),
              helper.make_node("Unsqueeze", ["off", "ax1"], ["off2"]),
              helper.make_node("Add", ["allb", "off2"], ["nmsb"]),
              helper.make_node("Unsqueeze", ["nmsb", "ax0"], ["nmsb3"]),
              helper.make_node("Unsqueeze", ["alls", "ax01"], ["nmss3"]),
              helper.make_node("NonMaxSuppression", ["nmsb3", "nmss3", "big", "iou"], ["keep3"]),
              helper.make_node("Gather", ["keep3", "two"], ["keep"], axis=1),
              helper.make_node("Gather", ["allb", "keep"], ["det_boxes"], axis=0),
              helper.make_node("Gather", ["alls", "keep"], ["det_scores"], axis=0),
              helper.make_node("Gather", ["alll", "keep"], ["det_labels"], axis=0)]
    inits = [helper.make_tensor("one", T.FLOAT, [], [1.0]), helper.make_tensor("thr", T.FLOAT, [], [0.05]),
             helper.make_tensor("cap", T.INT64, [1], [per_class]), helper.make_tensor("ax0", T.INT64, [1], [0]),
             helper.make_tensor("ax1", T.INT64, [1], [1]), helper.make_tensor("ax01", T.INT64, [2], [0, 1]),
             helper.make_tensor("big", T.INT64, [1], [2 ** 62]), helper.make_tensor("iou", T.FLOAT, [1], [0.5]),
             helper.make_tensor("two", T.INT64, [], [2])]
    inits += [helper.make_tensor(f"c{k}_i", T.INT64, [], [k + 1]) for k in range(classes)]
    g = helper.make_graph(nodes, "ssd_head", [helper.make_tensor_value_info("boxes", T.FLOAT, [anchors, 4]),
                                               helper.make_tensor_value_info("scores", T.FLOAT,
                                                                             [anchors, classes + 1])],
                          [helper.make_tensor_value_info("det_boxes", T.FLOAT, ["d", 4]),
                           helper.make_tensor_value_info("det_scores", T.FLOAT, ["d"]),
                           helper.make_tensor_value_info("det_labels", T.INT64, ["d"])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("anchors,classes,per_class,levels", [(600, 3, 100, 16), (2000, 4, 300, 0)])
def test_ssd_head_on_the_device_matches_onnxruntime(anchors, classes, per_class, levels):
    """The whole head with host fallback off: every node on OpenCL; the same detections (boxes,
    scores, labels, in order) as onnxruntime, also with scores on a few levels (ties in TopK and
    NMS: lower index first in both)."""
    model = _ssd_head(anchors, classes, per_class)
    rng = np.random.default_rng(anchors)
    xy = rng.random((anchors, 2), dtype=np.float32) * 280
    boxes = np.concatenate([xy, xy + rng.random((anchors, 2), dtype=np.float32) * 60 + 1], 1)
    scores = rng.random((anchors, classes + 1), dtype=np.float32) * 0.3
    if levels:
        scores = np.round(scores * levels) / levels
    feeds = {"boxes": boxes.astype(np.float32), "scores": scores.astype(np.float32)}
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    got = sess.run(None, feeds)
    for g_, want in zip(got, _ort(model, feeds)):
        np.testing.assert_array_equal(g_, want)
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()


def _max_roi_pool_numpy(x: np.ndarray, rois: np.ndarray, pooled: tuple, scale: float) -> np.ndarray:
    """Caffe's ROI max pooling, as onnxruntime defines MaxRoiPool (rounding half away from zero)."""
    n, c, h, w = x.shape
    ph_n, pw_n = pooled
    out = np.zeros((len(rois), c, ph_n, pw_n), x.dtype)
    rnd = lambda v: int(np.sign(v) * np.floor(np.abs(v) + 0.5))  # noqa: E731
    for r, roi in enumerate(rois):
        b = int(roi[0])
        sw, sh, ew, eh = (rnd(np.float32(v) * np.float32(scale)) for v in roi[1:])
        rh, rw = max(eh - sh + 1, 1), max(ew - sw + 1, 1)
        bh, bw = np.float32(rh) / np.float32(ph_n), np.float32(rw) / np.float32(pw_n)
        for ph in range(ph_n):
            h0 = min(max(int(np.floor(np.float32(ph) * bh)) + sh, 0), h)
            h1 = min(max(int(np.ceil(np.float32(ph + 1) * bh)) + sh, 0), h)
            for pw in range(pw_n):
                w0 = min(max(int(np.floor(np.float32(pw) * bw)) + sw, 0), w)
                w1 = min(max(int(np.ceil(np.float32(pw + 1) * bw)) + sw, 0), w)
                if h1 > h0 and w1 > w0:
                    out[r, :, ph, pw] = x[b, :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


@pytest.mark.parametrize("pooled,scale", [((2, 2), 1.0), ((7, 5), 0.25)])
def test_max_roi_pool_matches_onnxruntime_and_numpy(pooled, scale):
    """MaxRoiPool on OpenCL (onnx.reference has no implementation): rois inside, across and
    outside the map, corners at .5 after scaling (rounding away from zero), tiny and reversed
    rois (at least 1 x 1), a second batch image."""
    T = TensorProto
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 24, 20)).astype(np.float32)
    rois = np.array([[0, 0, 0, 19, 23], [1, 2.5, 3.5, 10.5, 12.5], [1, -8, -6, 4, 3], [0, 15, 18, 40, 50],
                     [1, 6, 6, 6, 6], [0, 9, 9, 4, 3], [1, 30, 30, 40, 40]], np.float32)
    rois[:, 1:] /= np.float32(scale)  # corners in the image's scale: at .5 after spatial_scale
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=list(pooled), spatial_scale=scale)
    g = helper.make_graph([node], "mrp", [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape)),
                                          helper.make_tensor_value_info("rois", T.FLOAT, list(rois.shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, [len(rois), 3, *pooled])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    feeds = {"x": x, "rois": rois}
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    (got,) = sess.run(None, feeds)
    np.testing.assert_array_equal(got, _ort(model, feeds)[0])
    np.testing.assert_array_equal(got, _max_roi_pool_numpy(x, rois, pooled, scale))


def test_topk_with_a_k_from_data_past_the_axis_is_a_clear_error():
    """A k the device computes larger than the axis (the spec's error; onnxruntime fails too) is
    refused naming the node, not read past the outputs' buffers."""
    model = _topk_of_count_model(20, 10)
    for node in model.graph.node:  # k = count + 25: always more than the 20 entries
        if node.op_type == "Min":
            node.op_type, node.input[1] = "Add", "cap"
    model.graph.initializer[1].int64_data[:] = [25]
    feeds = {"scores": np.ones(20, np.float32), "boxes": np.zeros((20, 4), np.float32)}
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    with pytest.raises(clglow.errors.DeviceError, match="TopK"):
        sess.run(None, feeds)


def test_if_on_a_condition_from_data_runs_on_the_device():
    """An If whose condition a device node computes from the data (not from shapes): staging ends
    there, reads the one condition byte, and inlines the branch taken in the next stage; with host
    fallback off every node runs on OpenCL, each branch as onnxruntime computes it."""
    T = TensorProto
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, [16])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"]), helper.make_node("Mul", ["e", "x"], ["e2"])],
                               "else", [], [helper.make_tensor_value_info("e2", T.FLOAT, [16])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "if_data", [helper.make_tensor_value_info("x", T.FLOAT, [16])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [16])],
                          [helper.make_tensor("zero", T.FLOAT, [], [0.0])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    x = np.linspace(-1, 2, 16, dtype=np.float32)
    for feeds in ({"x": x}, {"x": -x}):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], _ort(model, feeds)[0])
        assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()


def test_nested_ifs_on_conditions_from_data_run_on_the_device():
    """An If whose then branch holds another If that reads the outer branch's own value (onnx's
    expanded AffineGrid nests them so): the branch taken is inlined with the inner If's reads
    renamed, and the inner If is inlined in turn once its condition is known; host fallback off,
    all four paths against onnxruntime."""
    T = TensorProto
    vi = helper.make_tensor_value_info
    inner_then = helper.make_graph([helper.make_node("Add", ["r", "x"], ["it"])], "inner_then", [],
                                   [vi("it", T.FLOAT, [8])])
    inner_else = helper.make_graph([helper.make_node("Mul", ["r", "r"], ["ie"])], "inner_else", [],
                                   [vi("ie", T.FLOAT, [8])])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                                helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                                helper.make_node("Greater", ["m", "one"], ["c2"]),
                                helper.make_node("If", ["c2"], ["t"], then_branch=inner_then, else_branch=inner_else)],
                               "then", [], [vi("t", T.FLOAT, [8])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, [8])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "nested_if", [vi("x", T.FLOAT, [8])], [vi("y", T.FLOAT, [8])],
                          [helper.make_tensor("zero", T.FLOAT, [], [0.0]), helper.make_tensor("one", T.FLOAT, [], [1.0])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    base = np.linspace(-0.5, 0.9, 8, dtype=np.float32)
    for x in (base, base * 3, -base, -base * 3):  # then/inner else, then/inner then, else, else
        feeds = {"x": x}
        np.testing.assert_allclose(sess.run(None, feeds)[0], _ort(model, feeds)[0], rtol=1e-6)
        assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
