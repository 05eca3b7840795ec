"""Zero copy (runtime.planning.zero_copy_binds, runtime.binding.rebind): on a target whose
policy allows it (Target.zero_copy: CL_MEM_USE_HOST_PTR buffers are host memory, as on pocl,
under the CPU family) and with PlanOptions.zero_copy on, kernels that read a graph input with
unaligned loads read the caller's array where it lies instead of a copy, and outputs are written
straight into the arrays a run returns.

Inputs are placed at addresses only 4-byte aligned on purpose (a numpy array is 16-byte aligned
at best; the kernels' aligned loads would fault there). Oracles: numpy, onnx.reference."""
from __future__ import annotations

import gc

import numpy as np
import onnx
import pyopencl as cl
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import clglow


def _misaligned(arr: np.ndarray, at: int = 4) -> np.ndarray:
    """A copy of `arr` whose data starts `at` bytes past a 64-byte boundary."""
    raw = np.empty(arr.nbytes + 128, np.uint8)
    start = (at - raw.ctypes.data) % 64
    out = raw[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    assert out.ctypes.data % 64 == at
    return out


def _matmul(m: int, k: int, n: int) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "mm",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, n])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _expect_bound(sess: clglow.InferenceSession, names: set) -> None:
    """Where the plan was made with zero copy on, exactly `names` (inputs and outputs) are bound
    to host arrays; elsewhere none are."""
    plan = sess._engine.last_plan
    assert plan.zero_copy == (plan.target.zero_copy and sess._engine.options.zero_copy)
    want = names if plan.zero_copy else set()
    assert set(plan.host_binds) == want
    assert plan.bound_to_host == want


@pytest.mark.parametrize("m,k,n", [
    (40, 1024, 96),  # rows 4 KiB apart: A packed by pack_rows; B (3 column tiles) read in place by the GEMM
    (30, 200, 40),  # A read in place by the GEMM (strided rows); B (ragged, narrow) packed by pack_b
])
def test_matmul_reads_both_inputs_in_place(m, k, n):
    sess = clglow.InferenceSession(_matmul(m, k, n).SerializeToString())
    rng = np.random.default_rng([m, k, n])
    for at in (4, 36):  # two runs, new arrays at other offsets: each run reads its own arrays
        a = _misaligned(rng.standard_normal((m, k), dtype=np.float32), at)
        b = _misaligned(rng.standard_normal((k, n), dtype=np.float32), at + 8)
        (y,) = sess.run(None, {"A": a, "B": b})
        np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-4)
        _expect_bound(sess, {"A", "B", "Y"})


def _conv_model() -> tuple:
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((8, 3, 7, 7)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y1"], pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("Conv", ["x", "w2"], ["y2"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w3"], ["y3"])]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 20, 20])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, shape) for y, shape in
                           (("y1", [2, 8, 10, 10]), ("y2", [2, 8, 20, 20]), ("y3", [2, 4, 20, 20]))],
                          [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_convolutions_read_the_image_in_place():
    """A 7x7 stride-2 stem, a 3x3 and a 1x1 conv on one misaligned image (their im2col / phase
    image / pointwise producers all read it unaligned) match onnx.reference."""
    model = _conv_model()
    x = _misaligned(np.random.default_rng(4).standard_normal((2, 3, 20, 20)).astype(np.float32), 20)
    want = ReferenceEvaluator(model).run(None, {"x": np.array(x)})
    sess = clglow.InferenceSession(model.SerializeToString())
    for got, ref in zip(sess.run(None, {"x": x}), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    _expect_bound(sess, {"x", "y1", "y2", "y3"})


def test_tensors_that_are_copied():
    """Copied, not bound: an input handed back as an output (as is and through a Reshape view,
    so neither the input nor that output), and an input an elementwise kernel reads with aligned
    vector loads (its output is bound)."""
    nodes = [helper.make_node("Identity", ["a"], ["a_out"]),
             helper.make_node("Reshape", ["b", "shape"], ["b_view"]),
             helper.make_node("Relu", ["c"], ["c_relu"]),
             helper.make_node("MatMul", ["a", "b"], ["ab"])]
    g = helper.make_graph(nodes, "edges",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [8, 16]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [16, 32]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [64])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in
                           (("a_out", [8, 16]), ("b_view", [32, 16]), ("c_relu", [64]), ("ab", [8, 32]))],
                          [numpy_helper.from_array(np.array([32, 16], np.int64), "shape")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(5)
    feeds = {"a": rng.standard_normal((8, 16), dtype=np.float32),
             "b": rng.standard_normal((16, 32), dtype=np.float32),
             "c": rng.standard_normal(64, dtype=np.float32)}
    sess = clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    for g_, ref in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(g_, ref, rtol=1e-4, atol=1e-4)
    _expect_bound(sess, {"c_relu", "ab"})


def test_device_buffer_and_host_array_inputs_alternate(device):
    """A cl.Buffer input (copied on the device) after runs that bound the kernels to a caller's
    array, and back: each run reads the input it was given."""
    sess = clglow.InferenceSession(_matmul(16, 64, 32).SerializeToString())
    rng = np.random.default_rng(6)
    a1, b1 = rng.standard_normal((16, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
    a2, b2 = rng.standard_normal((16, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
    np.testing.assert_allclose(sess.run(None, {"A": _misaligned(a1), "B": b1})[0], a1 @ b1, rtol=1e-4, atol=1e-4)
    ctx = sess.device.context
    abuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a2)
    out = np.empty((16, 32), np.float32)
    h = sess.enqueue({"A": (abuf, np.float32, (16, 64)), "B": b2}, {"Y": out})
    h.wait()
    np.testing.assert_allclose(out, a2 @ b2, rtol=1e-4, atol=1e-4)
    # the kernels read A's device copy again and write Y's device buffer (copied into `out`)
    assert not {"A", "Y"} & sess._engine.last_plan.bound_to_host
    np.testing.assert_allclose(sess.run(None, {"A": a1, "B": b2})[0], a1 @ b2, rtol=1e-4, atol=1e-4)
    _expect_bound(sess, {"A", "B", "Y"})


def test_read_only_and_strided_inputs():
    sess = clglow.InferenceSession(_matmul(24, 48, 64).SerializeToString())
    rng = np.random.default_rng(7)
    a = rng.standard_normal((24, 48), dtype=np.float32)
    a.flags.writeable = False
    bt = rng.standard_normal((64, 48), dtype=np.float32)
    (y,) = sess.run(None, {"A": a, "B": bt.T})  # B transposed: a contiguous copy is what is bound
    np.testing.assert_allclose(y, a @ bt.T, rtol=1e-4, atol=1e-4)


def test_zero_copy_off(monkeypatch):
    monkeypatch.setenv("CLGLOW_ZERO_COPY", "0")
    sess = clglow.InferenceSession(_matmul(40, 1024, 96).SerializeToString())
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((40, 1024), dtype=np.float32), rng.standard_normal((1024, 96), dtype=np.float32)
    np.testing.assert_allclose(sess.run(None, {"A": _misaligned(a), "B": b})[0], a @ b, rtol=1e-4, atol=1e-4)
    assert sess._engine.last_plan.host_binds == {} and not sess._engine.last_plan.zero_copy


def _plan_for(sess: clglow.InferenceSession, target, options, feeds: dict):
    """A plan of the session's graph built for `target` and `options` (executor.build_plan), and
    one run of it (executor.execute): the policies are the plan's, whatever the session's are."""
    from clglow.runtime import executor
    from clglow.shapes import specialize

    eng = sess._engine
    spec, stop = specialize(eng.graph, {k: (v.dtype, v.shape) for k, v in feeds.items()})
    plan = executor.build_plan(spec, stop, eng.graph.outputs, sess.device, eng.weights, target, options)
    try:
        outs, pending = executor.execute(plan, sess.device, eng.queue, feeds)
        cl.wait_for_events(pending)
        return plan, {k: np.array(v) for k, v in outs.items()}
    finally:
        plan.release()


@pytest.mark.parametrize("how", ["option", "gpu family"])
def test_copies_where_the_options_or_the_target_say_so(how):
    """Zero copy off through PlanOptions, or under the GPU family's policy on this same device:
    every input copied in, every output copied out, the results the same."""
    from clglow.config import PlanOptions

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["S"]), helper.make_node("Relu", ["S"], ["Y"])], "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [64, 32]) for n in ("A", "B")],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [64, 32])]), opset_imports=[helper.make_opsetid("", 13)])
    sess = clglow.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(14)
    feeds = {n: rng.standard_normal((64, 32), dtype=np.float32) for n in ("A", "B")}
    own = sess.device.info
    target, options = (own, PlanOptions(zero_copy=False)) if how == "option" else (own.with_family("gpu"),
                                                                                      PlanOptions())
    plan, outs = _plan_for(sess, target, options, feeds)
    assert plan.host_binds == {} and not plan.zero_copy and not plan.bound_to_host
    np.testing.assert_allclose(outs["Y"], np.maximum(feeds["A"] + feeds["B"], 0), rtol=1e-6, atol=1e-6)
    if own.zero_copy:  # the same device under its own policy binds them
        plan, outs = _plan_for(sess, own, PlanOptions(), feeds)
        assert plan.zero_copy and "Y" in plan.host_binds
        np.testing.assert_allclose(outs["Y"], np.maximum(feeds["A"] + feeds["B"], 0), rtol=1e-6, atol=1e-6)


def test_queued_runs_keep_their_arrays_alive():
    """run_async and a gated enqueue with arrays nobody else holds: the run keeps them until its
    kernels are done. The gated run reads the input as it is when the gate opens (ONNXIFI's
    input fence: the host may still write the input until then)."""
    sess = clglow.InferenceSession(_matmul(64, 1024, 128).SerializeToString())
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((64, 1024), dtype=np.float32), rng.standard_normal((1024, 128), dtype=np.float32)
    fut = sess.run_async(None, {"A": _misaligned(a), "B": _misaligned(b, 12)})
    gc.collect()
    np.testing.assert_allclose(fut.result()[0], a @ b, rtol=1e-4, atol=1e-4)

    gate = cl.UserEvent(sess.device.context)
    a_in = _misaligned(a)
    out = np.empty((64, 128), np.float32)
    h = sess.enqueue({"A": a_in, "B": _misaligned(b, 8)}, {"Y": out}, wait_for=[gate])
    gc.collect()
    a_in *= 2.0  # written before the gate opens: the run reads these values
    gate.set_status(cl.command_execution_status.COMPLETE)
    h.wait()
    np.testing.assert_allclose(out, (2.0 * a) @ b, rtol=1e-4, atol=1e-4)


def test_each_run_returns_arrays_of_its_own():
    """Outputs written in place: a run does not overwrite what an earlier run returned; every
    array starts at the device's buffer alignment (kernels store aligned vectors)."""
    sess = clglow.InferenceSession(_matmul(32, 64, 48).SerializeToString())
    rng = np.random.default_rng(10)
    runs = [(rng.standard_normal((32, 64), dtype=np.float32), rng.standard_normal((64, 48), dtype=np.float32))
            for _ in range(3)]
    outs = [sess.run(None, {"A": a, "B": b})[0] for a, b in runs]
    for (a, b), y in zip(runs, outs):
        np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-4)
        if sess._engine.last_plan.zero_copy:  # written in place: aligned like a device buffer
            assert y.ctypes.data % sess._engine.last_plan.target.base_align == 0
    _expect_bound(sess, {"A", "B", "Y"})


def test_outputs_sharing_a_buffer_and_bool_outputs():
    """Two outputs on one buffer (a tensor and its Reshape view) are copied out as two arrays;
    an output another kernel also reads is bound (its reader reads the host array), and a bool
    output comes back as bool."""
    nodes = [helper.make_node("MatMul", ["A", "B"], ["Y"]),
             helper.make_node("Reshape", ["Y", "shape"], ["Y_flat"]),
             helper.make_node("MatMul", ["A", "C"], ["Z"]),
             helper.make_node("Relu", ["Z"], ["Z_relu"]),
             helper.make_node("Greater", ["Z", "zero"], ["Z_pos"])]
    g = helper.make_graph(nodes, "shared",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [8, 16]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, [16, 32]),
                           helper.make_tensor_value_info("C", TensorProto.FLOAT, [16, 32])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8, 32]),
                           helper.make_tensor_value_info("Y_flat", TensorProto.FLOAT, [256]),
                           helper.make_tensor_value_info("Z", TensorProto.FLOAT, [8, 32]),
                           helper.make_tensor_value_info("Z_relu", TensorProto.FLOAT, [8, 32]),
                           helper.make_tensor_value_info("Z_pos", TensorProto.BOOL, [8, 32])],
                          [numpy_helper.from_array(np.array([256], np.int64), "shape"),
                           numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(11)
    feeds = {n: rng.standard_normal(s, dtype=np.float32) for n, s in (("A", (8, 16)), ("B", (16, 32)), ("C", (16, 32)))}
    sess = clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, feeds)
    for g_, ref in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        assert g_.dtype == ref.dtype
        np.testing.assert_allclose(g_, ref, rtol=1e-4, atol=1e-4)
    y, y_flat = got[0], got[1]
    y_flat[:] = 0.0  # two arrays, not one memory
    assert np.abs(y).max() > 0
    bound = set(sess._engine.last_plan.host_binds)
    assert bound == ({"A", "B", "C", "Z", "Z_relu", "Z_pos"} if sess._engine.last_plan.zero_copy else set())


def _det_on_the_host(monkeypatch) -> None:
    """Det as a host-fallback node (it has an OpenCL kernel too): these tests need a host step."""
    from clglow.lower import REGISTRY

    monkeypatch.delitem(REGISTRY, ("", "Det"))


def test_a_run_ending_in_a_launch_waits_for_it_without_a_marker(monkeypatch):
    """Zero copy, the plan's last step a launch (A and B packed at run time, then the GEMM
    writing the returned array): the run waits for that launch's event (the queue is in order)
    instead of enqueueing a marker, and every output is complete when run() returns."""
    markers = []
    real = cl.enqueue_marker
    monkeypatch.setattr(cl, "enqueue_marker", lambda *a, **k: markers.append(1) or real(*a, **k))
    m, k, n = 64, 1024, 512  # rows 4 KiB and 2 KiB apart: both operands packed before the GEMM
    sess = clglow.InferenceSession(_matmul(m, k, n).SerializeToString())
    rng = np.random.default_rng(14)
    for _ in range(4):
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        y = sess.run(None, {"A": a, "B": b})[0]
        np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-3)  # checked at once: no sleep
    plan = sess._engine.last_plan
    assert plan.n_launches >= 2
    if plan.zero_copy:
        assert markers == []
    _expect_bound(sess, {"A", "B", "Y"})


def test_run_waits_for_outputs_written_in_place_after_a_host_step(monkeypatch):
    """A host-fallback node (Det) reads a device value with a blocking read in the middle of the
    run; the MatMul after it writes its output straight into the returned array. The run must
    wait for that kernel, not only for the reads it made (they were all done before it)."""
    _det_on_the_host(monkeypatch)
    nodes = [helper.make_node("Relu", ["C"], ["r"]),
             helper.make_node("Det", ["r"], ["d"]),
             helper.make_node("MatMul", ["A", "B"], ["Y"])]
    g = helper.make_graph(nodes, "host_then_device",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [512, 512]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, [512, 512]),
                           helper.make_tensor_value_info("C", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("d", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("Y", TensorProto.FLOAT, [512, 512])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = clglow.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(12)
    a = rng.standard_normal((512, 512), dtype=np.float32)
    b = rng.standard_normal((512, 512), dtype=np.float32)
    c = rng.standard_normal((3, 3), dtype=np.float32)
    want = a @ b
    for _ in range(10):
        d, y = sess.run(None, {"A": a, "B": b, "C": c})
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3)  # checked at once: no sleep
    np.testing.assert_allclose(d, np.linalg.det(np.maximum(c, 0)), rtol=1e-4, atol=1e-6)


def test_a_run_failing_after_kernels_were_enqueued(monkeypatch):
    """A host step that raises after a MatMul writing in place was enqueued: the error reaches
    the caller once those kernels are done with the run's arrays, and the session stays usable."""
    from clglow.runtime.host import HostKernel

    _det_on_the_host(monkeypatch)

    nodes = [helper.make_node("MatMul", ["A", "B"], ["Y"]),
             helper.make_node("Relu", ["C"], ["r"]),
             helper.make_node("Det", ["r"], ["d"])]
    g = helper.make_graph(nodes, "fails_late",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [512, 512]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, [512, 512]),
                           helper.make_tensor_value_info("C", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [512, 512]),
                           helper.make_tensor_value_info("d", TensorProto.FLOAT, [])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = clglow.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(13)
    feeds = {"A": rng.standard_normal((512, 512), dtype=np.float32),
             "B": rng.standard_normal((512, 512), dtype=np.float32),
             "C": rng.standard_normal((3, 3), dtype=np.float32)}
    sess.run(None, feeds)
    run = HostKernel.run

    def failing(self, arrays):
        raise RuntimeError("host step failed")

    monkeypatch.setattr(HostKernel, "run", failing)
    with pytest.raises(RuntimeError, match="host step failed"):
        sess.run(None, {k: v.copy() for k, v in feeds.items()})  # arrays only this run holds
    gc.collect()
    monkeypatch.setattr(HostKernel, "run", run)
    y, d = sess.run(None, feeds)
    np.testing.assert_allclose(y, feeds["A"] @ feeds["B"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(d, np.linalg.det(np.maximum(feeds["C"], 0)), rtol=1e-4, atol=1e-6)


def test_an_output_a_host_subgraph_reads_is_not_bound():
    """An output that a host node reads only through its subgraph (an If branch naming an outer
    value, as torchvision's batched NMS does) stays in its device buffer: bound to the returned
    array instead, the host node read the device buffer nothing had written, and that stale read
    replaced the returned array too (ssdlite320's detections)."""
    then_g = helper.make_graph([helper.make_node("Mul", ["y", "y"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [64, 33])])
    else_g = helper.make_graph([helper.make_node("Neg", ["y"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [64, 33])])
    nodes = [helper.make_node("Add", ["x", "x"], ["y"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "outer_read", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 33])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 33]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 33])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = clglow.InferenceSession(model)
    ref = ReferenceEvaluator(model)
    for seed in range(3):  # both branches; later runs reuse the plan and its buffers
        x = np.random.default_rng(seed).standard_normal((64, 33)).astype(np.float32) + (0.5 - seed % 2)
        for got, exp in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_allclose(got, exp, rtol=1e-6, atol=1e-6)
