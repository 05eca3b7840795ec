"""Engine.plan's shortcut for a run at the last run's input shapes (runtime.engine: no plan key
built): the same plan while shapes and the target stay, another plan when a shape changes, and
a new plan when the target changes under it (the GEMM tuner finishing: its tiles are part of
what a plan was lowered for). Results against numpy throughout."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T, helper, numpy_helper

import clglow


def _session() -> tuple:
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["m", 64])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["m", 64])], [numpy_helper.from_array(w, "w")])
    return clglow.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])), w


def _run(sess, w: np.ndarray, m: int, seed: int):
    x = np.random.default_rng(seed).standard_normal((m, 64)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w, rtol=1e-4, atol=1e-4)
    return sess._engine.last_plan


def test_same_shapes_reuse_the_plan_and_new_shapes_plan_again():
    sess, w = _session()
    p3 = _run(sess, w, 3, 1)
    assert _run(sess, w, 3, 2) is p3
    p5 = _run(sess, w, 5, 3)
    assert p5 is not p3
    assert _run(sess, w, 3, 4) is p3  # from the plan cache, through the full key
    sess.release()


def test_a_target_change_is_not_missed():
    sess, w = _session()
    engine = sess._engine
    before = engine.target
    p = _run(sess, w, 4, 5)
    mr, vw, nv, local = before.gemm_tiles or (12, 16, 2, (1, 1, 1))
    other = (8 if mr != 8 else 4, vw, nv, local)
    try:
        sess.device.set_gemm_tiles(other, before.family)
        assert engine.target is not before
        q = _run(sess, w, 4, 6)
        assert q is not p and _run(sess, w, 4, 7) is q
    finally:
        sess.device.set_gemm_tiles(before.gemm_tiles, before.family)
    assert _run(sess, w, 4, 8) is p  # the first tiles again: the first plan
    sess.release()
