"""The run gate (runtime.executor._Run.gate): a run's first command waits for a user event that
is set once binding.GATE_LAUNCHES kernels are enqueued (or at the end of a shorter run, or
where the host must wait), so the device starts with a backlog instead of waking per launch.

Checked through the kernels' profiling timestamps (the device's clock: a kernel starts after
the gate's launch was queued), against numpy, and after a run that fails half-way (the gate
must still open, or every later command on the queue would wait for it forever)."""
from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest
from onnx import TensorProto, helper, numpy_helper

import clglow
from clglow.errors import DeviceError
from clglow.runtime import executor
from clglow.runtime.binding import GATE_LAUNCHES, KernelStep


def _chain(n: int, seed: int = 0) -> tuple:
    """(model, weights): y = tanh(...tanh(x @ W0)... @ W(n-1)), one launch per MatMul."""
    rng = np.random.default_rng(seed)
    ws = [(rng.standard_normal((8, 8)) / 3).astype(np.float32) for _ in range(n)]
    nodes, inits, prev = [], [], "x"
    for i, w in enumerate(ws):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i}" if i < n - 1 else "y"])]
        prev = f"t{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), ws


def _want(x: np.ndarray, ws: list) -> np.ndarray:
    y = x.astype(np.float64)
    for w in ws:
        y = np.tanh(y @ w)
    return y


def _launch_steps(sess) -> list:
    plan = sess._engine.last_plan
    return [i for i, st in enumerate(plan.steps) if isinstance(st, KernelStep)]


@pytest.mark.parametrize("n", [6, GATE_LAUNCHES + 12])
def test_device_starts_after_the_gate_launch_is_queued(n):
    model, ws = _chain(n)
    sess = clglow.InferenceSession(model, clglow.SessionOptions(enable_profiling=True))
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], _want(x, ws), rtol=1e-4, atol=1e-5)
    launches = _launch_steps(sess)
    plan = sess._engine.last_plan
    if len(launches) > GATE_LAUNCHES:
        assert plan.gate_opens_at == launches[GATE_LAUNCHES - 1]
        gate = GATE_LAUNCHES - 1
    else:
        assert plan.gate_opens_at == -1
        gate = len(launches) - 1
    events = [ev for *_, ev in sess._engine.records[-1].kernel_events]
    assert len(events) == len(launches) > 1
    # no kernel ran before the gate's launch was enqueued: the device waited for the backlog
    assert events[0].profile.start >= events[gate].profile.queued
    sess.release()


def test_a_run_failing_half_way_still_opens_the_gate(monkeypatch):
    """The 5th launch of a run fails: the error names the node, and the next run computes the
    right result (the failed run's commands behind the gate were let go, not left waiting)."""
    model, ws = _chain(10, seed=2)
    sess = clglow.InferenceSession(model)
    x = np.random.default_rng(3).standard_normal((1, 8)).astype(np.float32)
    sess.run(None, {"x": x})
    real = cl.enqueue_nd_range_kernel
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise cl.Error("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(executor.cl, "enqueue_nd_range_kernel", flaky)
    with pytest.raises(DeviceError, match="for node"):
        sess.run(None, {"x": x})
    monkeypatch.setattr(executor.cl, "enqueue_nd_range_kernel", real)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _want(x, ws), rtol=1e-4, atol=1e-5)
    sess.device.queue.finish()  # nothing on the queue waits for an unset gate
    sess.release()


def test_a_host_node_reading_an_input_between_gated_launches(monkeypatch):
    """Det on the host (its kernel unregistered) reads a graph input and a device value in the
    middle of the run: the gate opens there, before the host waits, and the result is right."""
    from clglow.lower import REGISTRY

    monkeypatch.delitem(REGISTRY, ("", "Det"))
    nodes = [helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Det", ["r"], ["d"]),
             helper.make_node("Det", ["c"], ["e"]), helper.make_node("Add", ["d", "e"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["y"])]
    g = helper.make_graph(nodes, "host_between", [helper.make_tensor_value_info("c", TensorProto.FLOAT, [3, 3]),
                                                  helper.make_tensor_value_info("k", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    sess = clglow.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    rng = np.random.default_rng(5)
    for _ in range(3):
        c = rng.standard_normal((3, 3)).astype(np.float32)
        k = rng.standard_normal(4).astype(np.float32)
        want = (np.linalg.det(np.maximum(c, 0)) + np.linalg.det(c)) * k
        np.testing.assert_allclose(sess.run(None, {"c": c, "k": k})[0], want, rtol=1e-4, atol=1e-5)
    assert "c" in sess._engine.last_plan.host_inputs
    sess.release()


def test_run_timeline_accounts_for_every_launch():
    """profiler.run_timeline (clglow profile's per-run line): the launches per run, kernel time
    within the device span, and a lead that includes the gated enqueueing."""
    from clglow.runtime.profiler import run_timeline

    model, _ = _chain(GATE_LAUNCHES + 4, seed=4)
    sess = clglow.InferenceSession(model, clglow.SessionOptions(enable_profiling=True))
    x = np.ones((1, 8), np.float32)
    sess.run(None, {"x": x})
    sess._engine.records.clear()
    for _ in range(3):
        sess.run(None, {"x": x})
    tl = run_timeline(sess._engine.records)
    assert tl["launches"] == len(_launch_steps(sess))
    assert 0 < tl["busy"] <= tl["span"] and tl["lead"] >= 0
    assert run_timeline([]) == {}
    sess.release()
