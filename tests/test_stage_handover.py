"""Values cross between run stages on the device (runtime.engine, executor.DeviceValue): the next
stage's kernels read the previous stage's buffers (bound directly where the plan may re-point an
input, else copied buffer to buffer); only the counts and the graph's outputs come to the host.
Counted by wrapping pyopencl.enqueue_copy; results equal onnx.reference."""
from __future__ import annotations

import numpy as np
import onnx
import pyopencl as cl
import pytest
from onnx import TensorProto as T, helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.runtime.executor import live_buffers


def _two_nonzeros() -> onnx.ModelProto:
    """Three stages: NonZero(x); the gather of x's nonzeros, a second NonZero over them; a Gather
    of those with x's maximum (x crosses the middle stage)."""
    i64 = helper.make_tensor("zero", T.INT64, [1], [0])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["vals"]),
             helper.make_node("Greater", ["vals", "thr"], ["m"]),
             helper.make_node("NonZero", ["m"], ["nz2"]),
             helper.make_node("Squeeze", ["nz2", "zero"], ["k"]),
             helper.make_node("Gather", ["vals", "k"], ["big"]),
             helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
             helper.make_node("Sub", ["big", "mx"], ["y"])]
    thr = helper.make_tensor("thr", T.FLOAT, [], [0.5])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [6, 9])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n"]),
                           helper.make_tensor_value_info("vals", T.FLOAT, ["m"])], [thr, i64])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m


class _Copies:
    """pyopencl.enqueue_copy wrapped: (direction, bytes) of every copy while counting."""

    def __init__(self) -> None:
        self.real = cl.enqueue_copy
        self.log: list = []

    def __call__(self, queue, dest, src, **kw):
        host = lambda a: not isinstance(a, cl.MemoryObjectHolder)  # noqa: E731
        kind = "read" if host(dest) else "upload" if host(src) else "device"
        self.log.append((kind, np.asarray(dest).nbytes if host(dest) else np.asarray(src).nbytes if host(src)
                         else kw.get("byte_count")))
        return self.real(queue, dest, src, **kw)

    def of(self, kind: str) -> list:
        return [n for k, n in self.log if k == kind]


@pytest.mark.parametrize("target", [None, "gpu"])
def test_values_stay_on_the_device_between_stages(target, monkeypatch):
    model = _two_nonzeros()
    before = live_buffers()
    sess = clglow.InferenceSession(model.SerializeToString(),
                                   sess_options=clglow.SessionOptions(host_fallback=False, target=target))
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(3)
    for p in (0.6, 0.0, 1.0, 0.6):
        x = (rng.standard_normal((6, 9)) * (rng.random((6, 9)) < p)).astype(np.float32)
        sess.run(None, {"x": x})  # the plans for these shapes built (weights uploaded) before counting
        copies = _Copies()
        monkeypatch.setattr(cl, "enqueue_copy", copies)
        got = sess.run(None, {"x": x})
        monkeypatch.setattr(cl, "enqueue_copy", copies.real)
        for g, w in zip(got, ref.run(None, {"x": x})):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        assert all(pl.where == "opencl" for pl in sess.placement), sess.explain()
        # x uploaded once at most (zero copy: not at all); the crossing values never come back:
        # the reads are the two counts (int64) and the two outputs
        assert len(copies.of("upload")) <= 1, copies.log
        # the last stage hands `vals` back as an output: copied into its own buffer there, once;
        # every other value is read where the stage before left it
        assert len(copies.of("device")) <= 1, copies.log
        reads = copies.of("read")
        assert len(reads) <= 4 and sum(reads) <= 2 * 8 + got[0].nbytes + got[1].nbytes, copies.log
    plan, stages = sess._engine.last_plan, 1
    while plan.stop is not None and plan.next_stages:
        plan, stages = next(iter(plan.next_stages.values())), stages + 1
    assert stages == 3
    # the stages' buffers (those handed over among them) live with their plans, released with the session
    sess.release()
    assert live_buffers() == before
