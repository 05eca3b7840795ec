"""QLinearMatMul with float16 scales (opset 21) on OpenCL: the scales are read as float32 copies;
exact against a numpy reference of the spec's arithmetic (host fallback off)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper

import clglow

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("qtype", [T.UINT8, T.INT8])
def test_qlinear_matmul_with_float16_scales(qtype, monkeypatch):
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    np_t = np.uint8 if qtype == T.UINT8 else np.int8
    lo, hi = (0, 256) if qtype == T.UINT8 else (-128, 128)
    names = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
    shapes = {"a": [2, 5, 7], "b": [7, 3]}
    inputs = [helper.make_tensor_value_info(n, T.FLOAT16 if n.endswith("scale") else qtype, shapes.get(n, []))
              for n in names]
    g = helper.make_graph([helper.make_node("QLinearMatMul", names, ["y"])], "qlmm16", inputs,
                          [helper.make_tensor_value_info("y", qtype, [2, 5, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {"a": RNG.integers(lo, hi, (2, 5, 7)).astype(np_t), "b": RNG.integers(lo, hi, (7, 3)).astype(np_t),
             "a_scale": np.array(0.0213, np.float16), "b_scale": np.array(0.0117, np.float16),
             "y_scale": np.array(0.25, np.float16), "a_zp": np.array(lo + 3, np_t), "b_zp": np.array(lo + 9, np_t),
             "y_zp": np.array(lo + 100, np_t)}
    sess = clglow.InferenceSession(m.SerializeToString())
    (got,) = sess.run(None, feeds)
    acc = ((feeds["a"].astype(np.int64) - int(feeds["a_zp"])) @ (feeds["b"].astype(np.int64) - int(feeds["b_zp"])))
    scale = np.float32(feeds["a_scale"]) * np.float32(feeds["b_scale"]) / np.float32(feeds["y_scale"])
    want = np.clip(np.rint(acc.astype(np.float32) * scale) + int(feeds["y_zp"]), lo, hi - 1).astype(np_t)
    np.testing.assert_array_equal(got, want)
    assert {p.where for p in sess.placement} == {"opencl"}
