"""RoiAlign, Col2Im, DeformConv, MaxUnpool, CenterCropPad, ReverseSequence, AffineGrid and
Upsample through a session with host fallback off (lower/roialign.py, col2im.py,
deform_conv.py, spatial.py): placed on OpenCL, shape-deciding graph inputs specialised per
plan (several values in one session), results vs onnx.reference; the GPU kernel family too.
What the kernels do not do falls back to the host, reported; bad shapes raise naming the node.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto as T, helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.errors import ClglowError, UnsupportedOperator

TARGETS = [None, "gpu"]
RNG = np.random.default_rng(3)


def _model(node: onnx.NodeProto, inputs: list, opset: int, rank: int = 4) -> onnx.ModelProto:
    """A one-node model; its output has input 0's element type and `rank` symbolic dims."""
    out = helper.make_tensor_value_info(node.output[0], inputs[0][1], [f"d{i}" for i in range(rank)])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs], [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _check(model: onnx.ModelProto, feeds_list: list, target, rtol: float = 1e-5) -> None:
    sess = clglow.InferenceSession(model.SerializeToString(),
                                   sess_options=clglow.SessionOptions(host_fallback=False, target=target))
    ref = ReferenceEvaluator(model)
    op = model.graph.node[0].op_type
    for feeds in feeds_list:
        got, want = sess.run(None, feeds)[0], ref.run(None, feeds)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        assert [p.where for p in sess.placement if p.op_type == op] == ["opencl"], sess.explain()


@pytest.mark.parametrize("target", TARGETS)
def test_center_crop_pad_shapes_per_plan(target):
    m = _model(helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[0, 2]),
               [("x", T.FLOAT, [6, 4, 5]), ("s", T.INT64, [2])], 18, 3)
    x = RNG.standard_normal((6, 4, 5)).astype(np.float32)
    _check(m, [{"x": x, "s": np.array(s, np.int64)} for s in ((3, 8), (9, 2), (6, 5))], target)


@pytest.mark.parametrize("target", TARGETS)
def test_col2im_and_upsample_shape_inputs(target):
    m = _model(helper.make_node("Col2Im", ["x", "i", "b"], ["y"], strides=[2, 1]),
               [("x", T.FLOAT, [1, 8, 6]), ("i", T.INT64, [2]), ("b", T.INT64, [2])], 18)
    x = RNG.standard_normal((1, 8, 6)).astype(np.float32)
    _check(m, [{"x": x, "i": np.array(i, np.int64), "b": np.array(b, np.int64)}
               for i, b in (((5, 4), (2, 2)), ((6, 5), (1, 4)))], target)
    m = _model(helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest"),
               [("x", T.FLOAT, [1, 2, 3, 3]), ("s", T.FLOAT, [4])], 9)
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    _check(m, [{"x": x, "s": np.array(s, np.float32)} for s in ((1, 1, 2, 2), (1, 2, 1, 3))], target)


@pytest.mark.parametrize("target", TARGETS)
def test_roi_align_reverse_sequence_affine_grid(target):
    m = _model(helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=3, output_width=2, mode="max",
                                spatial_scale=0.5),
               [("x", T.FLOAT, [2, 3, 8, 9]), ("r", T.FLOAT, [4, 4]), ("b", T.INT64, [4])], 16)
    rois = np.array([[0, 0, 9, 9], [2, 3, 15, 12], [-3, 1, 4, 20], [5, 5, 5, 5]], np.float32)
    _check(m, [{"x": RNG.standard_normal((2, 3, 8, 9)).astype(np.float32), "r": rois,
                "b": np.array([1, 0, 1, 0], np.int64)}], target, rtol=1e-4)
    m = _model(helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0),
               [("x", T.INT32, [3, 5, 2]), ("l", T.INT64, [3])], 10, 3)
    _check(m, [{"x": np.arange(30, dtype=np.int32).reshape(3, 5, 2), "l": np.array([5, 0, 3], np.int64)}], target)
    m = _model(helper.make_node("AffineGrid", ["t", "s"], ["g"], align_corners=1),
               [("t", T.FLOAT, [2, 3, 4]), ("s", T.INT64, [5])], 20, 5)
    _check(m, [{"t": RNG.standard_normal((2, 3, 4)).astype(np.float32), "s": np.array([2, 1, 3, 4, 5], np.int64)}],
           target)


@pytest.mark.parametrize("target", TARGETS)
def test_deform_conv_and_max_unpool(target):
    m = _model(helper.make_node("DeformConv", ["x", "w", "o", "b", "m"], ["y"], kernel_shape=[3, 3], pads=[1] * 4,
                                offset_group=2),
               [("x", T.FLOAT, [1, 4, 5, 5]), ("w", T.FLOAT, [3, 4, 3, 3]), ("o", T.FLOAT, [1, 36, 5, 5]),
                ("b", T.FLOAT, [3]), ("m", T.FLOAT, [1, 18, 5, 5])], 19)
    feeds = {"x": RNG.standard_normal((1, 4, 5, 5)), "w": RNG.standard_normal((3, 4, 3, 3)),
             "o": RNG.standard_normal((1, 36, 5, 5)), "b": RNG.standard_normal(3), "m": RNG.random((1, 18, 5, 5))}
    _check(m, [{k: v.astype(np.float32) for k, v in feeds.items()}], target, rtol=1e-4)
    m = _model(helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
               [("x", T.FLOAT, [1, 1, 2, 2]), ("i", T.INT64, [1, 1, 2, 2])], 11)
    _check(m, [{"x": np.array([[[[1, 2], [3, 4]]]], np.float32), "i": np.array([[[[0, 3], [9, 14]]]], np.int64)}],
           target)


@pytest.mark.parametrize("target", TARGETS)
def test_max_unpool_with_a_constant_output_shape(target):
    """MaxUnpool's output_shape as an initializer (larger than the inferred shape, as the node
    suite's export case): the shape rule reads it, so the node plans on OpenCL, not ending a stage."""
    m = _model(helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
               [("x", T.FLOAT, [1, 1, 2, 2]), ("i", T.INT64, [1, 1, 2, 2])], 11)
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 1, 5, 5], np.int64), "s"))
    _check(m, [{"x": np.array([[[[1, 2], [3, 4]]]], np.float32), "i": np.array([[[[0, 3], [9, 14]]]], np.int64)}],
           target)


def test_refused_forms_fall_back_reported():
    """A 1-D DeformConv (the kernel does 2-D) runs on the host, said in the placement; with host
    fallback off the session refuses it naming the op."""
    m = _model(helper.make_node("DeformConv", ["x", "w", "o"], ["y"], kernel_shape=[2]),
               [("x", T.FLOAT, [1, 1, 5]), ("w", T.FLOAT, [1, 1, 2]), ("o", T.FLOAT, [1, 2, 4])], 19, 3)
    sess = clglow.InferenceSession(m.SerializeToString(), sess_options=clglow.SessionOptions(host_fallback=True))
    [p] = [p for p in sess.placement if p.op_type == "DeformConv"]
    assert p.where != "opencl" and "spatial dims" in p.reason
    with pytest.raises(UnsupportedOperator, match="DeformConv"):
        clglow.InferenceSession(m.SerializeToString(), sess_options=clglow.SessionOptions(host_fallback=False))


def test_bad_shapes_name_the_node():
    """RoiAlign's rois of the wrong width: a clglow error naming the node, not an assert."""
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2, name="roi1")
    m = _model(node, [("x", T.FLOAT, [1, 1, 4, 4]), ("r", T.FLOAT, [2, 5]), ("b", T.INT64, [2])], 16)
    with pytest.raises(ClglowError, match="roi1"):  # when the plan is made (at load: static shapes) or run
        sess = clglow.InferenceSession(m.SerializeToString(),
                                       sess_options=clglow.SessionOptions(host_fallback=False))
        sess.run(None, {"x": np.zeros((1, 1, 4, 4), np.float32), "r": np.zeros((2, 5), np.float32),
                        "b": np.zeros(2, np.int64)})
