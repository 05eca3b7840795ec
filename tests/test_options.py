"""Options in one place: every plan switch is a SessionOptions field over its CLGLOW_* default,
validated, and the session's plans follow it (oracles: numpy and onnx.reference)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.config import PlanOptions


def _conv3x3(c: int = 64, hw: int = 56, seed: int = 0):
    """A stride-1 3x3 conv with enough channels and tiles for Winograd on the CPU family."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "B")
    g = helper.make_graph([helper.make_node("Conv", ["X", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["Y"])], "conv3x3",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, c, hw, hw])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _matmul(m: int = 64, k: int = 96, n: int = 80):
    g = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "mm",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, n])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _kernels(sess) -> set:
    return {st.kernel_name for st in sess._engine.last_plan.steps if hasattr(st, "kernel_name")}


def _check_conv(sess, model, seed: int = 1) -> None:
    x = np.random.default_rng(seed).standard_normal(tuple(sess.get_inputs()[0].shape)).astype(np.float32)
    (y,) = sess.run(None, {"X": x})
    (ref,) = ReferenceEvaluator(model).run(None, {"X": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_target_option_forces_the_gpu_family(monkeypatch):
    monkeypatch.delenv("CLGLOW_TARGET", raising=False)
    model = _matmul()
    sess = clglow.InferenceSession(model, clglow.SessionOptions(target="gpu"))
    assert sess._engine.target.family == "gpu"
    assert not sess._engine.target.zero_copy and not sess._engine.target.sub_batching
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 80)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"A": a, "B": b})[0], a @ b, rtol=1e-4, atol=1e-4)
    # the GPU family's GEMM works in two-dimensional work-groups
    gemm = [st for st in sess._engine.last_plan.steps if getattr(st, "kernel_name", "") == "gemm"]
    assert gemm and all(st.lsize is not None and st.lsize[1] > 1 for st in gemm)


def test_environment_gives_the_default_and_the_option_wins(monkeypatch):
    monkeypatch.setenv("CLGLOW_TARGET", "gpu")
    assert clglow.InferenceSession(_matmul())._engine.target.family == "gpu"
    own = clglow.InferenceSession(_matmul(), clglow.SessionOptions(target="cpu"))
    assert own._engine.target.family == "cpu"
    assert PlanOptions.from_env().target == "gpu" and PlanOptions.from_env(target="cpu").target == "cpu"


def test_winograd_switch_per_session(monkeypatch, device):
    monkeypatch.delenv("CLGLOW_WINOGRAD", raising=False)
    monkeypatch.delenv("CLGLOW_TARGET", raising=False)
    if not device.target().is_cpu_family:
        pytest.skip("Winograd is a CPU-family path")
    model = _conv3x3()
    on = clglow.InferenceSession(model)
    off = clglow.InferenceSession(model, clglow.SessionOptions(winograd=False))
    assert any(k.startswith("wino") for k in _kernels(on))
    assert not any(k.startswith("wino") for k in _kernels(off))
    _check_conv(on, model)
    _check_conv(off, model)
    monkeypatch.setenv("CLGLOW_WINOGRAD", "0")  # the environment's default, overridden by the option
    assert not any(k.startswith("wino") for k in _kernels(clglow.InferenceSession(model)))
    forced = clglow.InferenceSession(model, clglow.SessionOptions(winograd=True))
    assert any(k.startswith("wino") for k in _kernels(forced))


def test_zero_copy_switch_reaches_the_plan(monkeypatch):
    monkeypatch.delenv("CLGLOW_ZERO_COPY", raising=False)
    sess = clglow.InferenceSession(_matmul(), clglow.SessionOptions(zero_copy=False))
    assert sess._engine.options.zero_copy is False
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 80)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"A": a, "B": b})[0], a @ b, rtol=1e-4, atol=1e-4)
    assert not sess._engine.last_plan.host_binds


def test_max_tensor_bytes_option():
    model = _conv3x3(c=16, hw=8)
    with pytest.raises(clglow.InvalidModel, match="exceeds the cap"):
        clglow.InferenceSession(model, clglow.SessionOptions(max_tensor_bytes=1024))
    clglow.InferenceSession(model, clglow.SessionOptions(max_tensor_bytes=1 << 20))


@pytest.mark.parametrize("field, value", [("target", "tpu"), ("winograd", "yes"), ("zero_copy", 2),
                                          ("sub_batch_bytes", -1), ("sub_batch_bytes", 1.5), ("tune", "no")])
def test_bad_option_values_are_refused(field, value):
    with pytest.raises(clglow.InvalidArgument, match=field):
        clglow.InferenceSession(_matmul(), clglow.SessionOptions(**{field: value}))


def test_bad_target_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv("CLGLOW_TARGET", "tpu")
    with pytest.raises(clglow.InvalidArgument, match="cpu, gpu"):
        clglow.InferenceSession(_matmul())
    monkeypatch.delenv("CLGLOW_TARGET")
    clglow.InferenceSession(_matmul())  # the process is still usable
