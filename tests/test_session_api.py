"""The onnxruntime-shaped API: description, validation errors, async runs, queued runs with events."""
from __future__ import annotations

import threading

import numpy as np
import onnx
import pyopencl as cl
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.errors import InvalidArgument


def _model(batch="N") -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 4])
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("Sigmoid", ["s"], ["z"])]
    g = helper.make_graph(nodes, "api", [x, b], [y, z])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def sess():
    return clglow.InferenceSession(_model().SerializeToString())


def _feeds(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


def test_describe(sess):
    ins, outs = sess.get_inputs(), sess.get_outputs()
    assert [(a.name, a.shape, a.type) for a in ins] == [("x", ["N", 4], "tensor(float)"), ("b", [4], "tensor(float)")]
    assert [a.name for a in outs] == ["y", "z"]


def test_run_matches_reference(sess):
    feeds = _feeds()
    ref = ReferenceEvaluator(_model()).run(None, feeds)
    got = sess.run(None, feeds)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    (z,) = sess.run(["z"], feeds)
    np.testing.assert_allclose(z, ref[1], rtol=1e-5, atol=1e-6)


def test_dynamic_batch(sess):
    for n in (1, 2, 7):
        feeds = _feeds(n, seed=n)
        ref = ReferenceEvaluator(_model()).run(None, feeds)
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("feeds, fragment", [
    ({"x": np.zeros((2, 4), np.float32)}, "missing input"),
    ({"x": np.zeros((2, 4), np.float32), "b": np.zeros(4, np.float32), "q": np.zeros(1)}, "unknown input"),
    ({"x": np.zeros((2, 4), np.float64), "b": np.zeros(4, np.float32)}, r"expected tensor\(float\)"),
    ({"x": np.zeros((2, 4, 1), np.float32), "b": np.zeros(4, np.float32)}, "expected rank 2"),
    ({"x": np.zeros((2, 5), np.float32), "b": np.zeros(4, np.float32)}, "dimension 1 must be 4"),
])
def test_bad_inputs_name_the_tensor(sess, feeds, fragment):
    with pytest.raises(InvalidArgument, match=fragment):
        sess.run(None, feeds)
    # the session stays usable
    assert sess.run(None, _feeds())[0].shape == (3, 4)


def test_unknown_output_name(sess):
    with pytest.raises(InvalidArgument, match="unknown output"):
        sess.run(["nope"], _feeds())


def test_run_async_future_and_callback(sess):
    feeds = _feeds()
    ref = ReferenceEvaluator(_model()).run(None, feeds)
    done = threading.Event()
    seen = {}

    def cb(results, user_data, err):
        seen["results"], seen["user"], seen["err"] = results, user_data, err
        done.set()

    fut = sess.run_async(None, feeds, cb, "token")
    out = fut.result(timeout=60)
    assert done.wait(60)
    assert seen["user"] == "token" and seen["err"] == ""
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen["results"][1], ref[1], rtol=1e-5, atol=1e-6)


def test_enqueue_is_gated_by_user_event(sess):
    feeds = _feeds()
    ref = ReferenceEvaluator(_model()).run(None, feeds)
    gate = cl.UserEvent(sess.device.context)
    y = np.full((3, 4), np.nan, np.float32)
    zbuf = cl.Buffer(sess.device.context, cl.mem_flags.READ_WRITE, 3 * 4 * 4)
    h = sess.enqueue(feeds, {"y": y, "z": zbuf}, wait_for=[gate])
    assert not h.done()
    gate.set_status(cl.command_execution_status.COMPLETE)
    h.wait()
    np.testing.assert_allclose(y, ref[0], rtol=1e-5, atol=1e-6)
    z = np.empty((3, 4), np.float32)
    cl.enqueue_copy(sess.device.queue, z, zbuf, is_blocking=True)
    np.testing.assert_allclose(z, ref[1], rtol=1e-5, atol=1e-6)


def test_enqueue_gate_orders_device_buffer_reads(sess):
    """With a device-buffer input and a gate, nothing reads the input before the gate opens: data
    written into the caller's buffer after enqueue (from another queue) is what the run sees."""
    feeds = _feeds()
    ref = ReferenceEvaluator(_model()).run(None, feeds)
    ctx = sess.device.context
    xbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=np.full((3, 4), np.nan, np.float32))
    gate = cl.UserEvent(ctx)
    y, z = np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)
    h = sess.enqueue({"x": (xbuf, np.float32, (3, 4)), "b": feeds["b"]}, {"y": y, "z": z}, wait_for=[gate])
    other = cl.CommandQueue(ctx)
    cl.enqueue_copy(other, xbuf, feeds["x"], is_blocking=True)
    gate.set_status(cl.command_execution_status.COMPLETE)
    h.wait()
    np.testing.assert_allclose(y, ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, ref[1], rtol=1e-5, atol=1e-6)


def test_enqueue_device_buffer_input(sess):
    feeds = _feeds()
    ref = ReferenceEvaluator(_model()).run(None, feeds)
    ctx, q = sess.device.context, sess.device.queue
    xbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=feeds["x"])
    y, z = np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)
    sess.enqueue({"x": (xbuf, np.float32, (3, 4)), "b": feeds["b"]}, {"y": y, "z": z}).wait()
    np.testing.assert_allclose(y, ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, ref[1], rtol=1e-5, atol=1e-6)


def test_placement_report(sess):
    text = sess.explain()
    assert "nodes on OpenCL" in text
    assert {p.where for p in sess.placement} == {"opencl"}


def test_host_fallback_and_disabled_fallback():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    # Hardmax has no OpenCL kernel in the core set: it falls back to the host, reported with a reason
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Hardmax", ["r"], ["h"]),
                           helper.make_node("Relu", ["h"], ["y"])], "fb", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    s = clglow.InferenceSession(m)
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)}
    np.testing.assert_allclose(s.run(None, feeds)[0], ReferenceEvaluator(m).run(None, feeds)[0])
    hosts = [p for p in s.placement if p.where == "host"]
    if hosts:
        assert hosts[0].op_type == "Hardmax" and hosts[0].reason
        with pytest.raises(clglow.UnsupportedOperator, match="Hardmax"):
            clglow.InferenceSession(m, clglow.SessionOptions(host_fallback=False))
