"""A cold start's prewarm (Engine.prewarm, executor.prewarm): while the GEMM tuner measures, the
session lowers the model once to start its programs, and the plan built after tuning reuses the
weights packed then. Oracle: onnx.reference; the tuner is slowed down so that the session sees
it still running, as it does from empty caches."""
from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

pytest.importorskip("pyopencl")

import clglow  # noqa: E402
from clglow.lower import base as lower_base  # noqa: E402
from clglow.runtime import device as device_mod  # noqa: E402
from clglow.runtime import executor  # noqa: E402


def _model():
    """Conv 3x3 (Winograd-sized) -> Relu -> 1x1 conv -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.default_rng(4)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1, n) for n, s in
            (("w1", (24, 16, 3, 3)), ("b1", (24,)), ("w2", (32, 24, 1, 1)), ("wf", (10, 32)), ("bf", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "prewarm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 48, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def slow_tuner(monkeypatch):
    """The session's tuning thread runs long enough for the session to prewarm beside it."""
    real = device_mod.Device.ensure_tuned

    def slow(self, *args, **kwargs):
        time.sleep(0.5)
        real(self, *args, **kwargs)

    monkeypatch.setattr(device_mod.Device, "ensure_tuned", slow)


def _counting_derived(monkeypatch) -> dict:
    """key -> how many times LowerCtx.derived computed it (not served from the memo)."""
    counts: dict = {}
    real = lower_base.LowerCtx.derived

    def derived(self, i, tag, fn):
        def counted(w):
            key = (self.node.name, tag)
            counts[key] = counts.get(key, 0) + 1
            return fn(w)
        return real(self, i, tag, counted)

    monkeypatch.setattr(lower_base.LowerCtx, "derived", derived)
    return counts


def test_prewarm_then_plan_reuses_packed_weights(slow_tuner, monkeypatch):
    calls = []
    real_prewarm = executor.prewarm
    monkeypatch.setattr("clglow.runtime.engine.prewarm",
                        lambda *a, **k: (calls.append(1), real_prewarm(*a, **k))[1])
    counts = _counting_derived(monkeypatch)
    model = _model()
    sess = clglow.InferenceSession(model)
    assert calls == [1]  # prewarmed once, beside the tuner
    assert sess._engine._prewarmed is None  # handed to the first plan, then dropped
    assert counts and all(n == 1 for n in counts.values()), counts  # each weight packed once
    x = np.random.default_rng(5).standard_normal((1, 16, 48, 48)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_prewarm_failure_leaves_the_session_working(slow_tuner, monkeypatch):
    """A lowering that fails while prewarming is left to the real plan (which succeeds here)."""
    real = executor._lower_node
    state = {"failed": False}

    def flaky(*a, **k):
        if not state["failed"]:
            state["failed"] = True
            raise RuntimeError("injected")
        return real(*a, **k)

    monkeypatch.setattr(executor, "_lower_node", flaky)
    model = _model()
    sess = clglow.InferenceSession(model)
    assert state["failed"]
    x = np.random.default_rng(6).standard_normal((1, 16, 48, 48)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
