"""Device faults become clean errors and leave every session usable; load/run/release cycles leak nothing."""
from __future__ import annotations

import gc
import resource

import numpy as np
import pyopencl as cl
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.errors import CompileError, DeviceError, OutOfDeviceMemory
from clglow.runtime import binding, executor


def _model(n: int = 8):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])
    w = helper.make_tensor("w", TensorProto.FLOAT, [n, 3], np.linspace(-1, 1, n * 3, dtype=np.float32))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "res", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 13)])


def _check(sess, model, seed=0):
    x = np.random.default_rng(seed).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def _real_driver_error(device) -> cl.Error:
    """A genuine OpenCL error from the driver: an allocation far beyond any device."""
    try:
        cl.Buffer(device.context, cl.mem_flags.READ_WRITE, 1 << 62)
    except cl.Error as e:
        return e
    pytest.skip("the driver accepted a 4 EiB buffer")


def test_allocation_failure_is_out_of_device_memory(monkeypatch):
    model = _model()
    bystander = clglow.InferenceSession(model)
    error = _real_driver_error(bystander.device)
    gc.collect()  # sessions of earlier tests left in reference cycles go now, not in the count below
    before = executor.live_buffers()
    real = binding.device_alloc
    calls = {"n": 0}

    def failing(context, nbytes, what, flags=cl.mem_flags.READ_WRITE):
        calls["n"] += 1
        if calls["n"] == 2:  # the driver refuses in the middle of building a plan

            def refuse(*a):
                raise error

            return binding.cl_call(f"allocating {what} ({nbytes} bytes)", refuse)
        return real(context, nbytes, what, flags)

    monkeypatch.setattr(binding, "device_alloc", failing)
    with pytest.raises(OutOfDeviceMemory, match="allocating"):
        clglow.InferenceSession(model)
    monkeypatch.setattr(binding, "device_alloc", real)
    gc.collect()
    assert executor.live_buffers() == before  # the failed plan gave back what it took
    _check(bystander, model)  # other sessions are unaffected
    _check(clglow.InferenceSession(model), model)  # and a new one works


def test_oversized_model_tensor_is_out_of_device_memory():
    with pytest.raises(OutOfDeviceMemory):
        binding.device_alloc(clglow.InferenceSession(_model()).device.context, 1 << 62, "a test buffer")


def test_enqueue_failure_is_device_error(monkeypatch):
    model = _model()
    sess = clglow.InferenceSession(model)
    real = cl.enqueue_nd_range_kernel

    def failing(queue, kernel, gsize, lsize, **kw):  # a launch the driver rejects (bad work-group size)
        return real(queue, kernel, (3,), (2,), **kw)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", failing)
    with pytest.raises(DeviceError, match="enqueueing"):
        sess.run(None, {"x": np.zeros((2, 8), np.float32)})
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", real)
    sess._engine.queue.finish()
    _check(sess, model, seed=1)


def test_build_failure_is_compile_error_and_session_survives(monkeypatch):
    model = _model()
    sess = clglow.InferenceSession(model)
    device = sess.device
    real = type(device).program

    def broken(self, name, options=()):
        return real(self, name, tuple(options) + ("-cl-clglow-injected-fault",))

    monkeypatch.setattr(type(device), "program", broken)
    with pytest.raises(CompileError) as ei:
        clglow.InferenceSession(_model(n=5))  # a new shape: its plan needs programs
    assert "clglow-injected-fault" in str(ei.value)
    monkeypatch.setattr(type(device), "program", real)
    _check(sess, model, seed=2)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_thousand_load_run_release_cycles_leak_nothing():
    model = _model().SerializeToString()
    x = np.ones((2, 8), np.float32)
    for _ in range(20):  # warm-up: programs built, allocator pools filled
        with clglow.InferenceSession(model) as s:
            s.run(None, {"x": x})
    gc.collect()
    buffers0, rss0 = executor.live_buffers(), _rss_mb()
    for _ in range(1000):
        with clglow.InferenceSession(model) as s:
            s.run(None, {"x": x})
    gc.collect()
    assert executor.live_buffers() == buffers0
    assert _rss_mb() - rss0 < 20, f"resident memory grew by {_rss_mb() - rss0:.1f} MB"


def test_sessions_release_on_garbage_collection():
    model = _model()
    gc.collect()
    before = executor.live_buffers()
    for _ in range(5):
        s = clglow.InferenceSession(model)
        s.run(None, {"x": np.ones((2, 8), np.float32)})
        del s
    gc.collect()
    assert executor.live_buffers() == before
