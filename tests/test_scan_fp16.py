"""A float16 Scan unrolled on the device (passes/unroll_loop.py) whose body computes in float32:
its steps' values are typed by shapes.infer_node, which must not judge an op reading float16 and
float32 through different type constraints (CastLike's target_type, Pow's exponent) as half
storage of float32 (the ONNX suite's test_linear_attention_fp16_expanded: its CastLike back to
the float16 slice was typed float32, its scan output read back as garbage). Checked against
onnx.reference with host fallback off."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T, helper
from onnx.reference import ReferenceEvaluator

import clglow


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model() -> onnx.ModelProto:
    """acc (float32 state) += float(xs); ys = CastLike(acc * w, xs); zs = Pow(xs, e) with a
    float32 exponent: ys and zs are float16 per ONNX."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["xs"], ["xf"], to=T.FLOAT),
         helper.make_node("Add", ["acc_in", "xf"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "w"], ["yf"]),
         helper.make_node("CastLike", ["yf", "xs"], ["ys"]),
         helper.make_node("Pow", ["xs", "e"], ["zs"])], "body",
        [_vi("acc_in", T.FLOAT, [2, 3]), _vi("xs", T.FLOAT16, [2, 3])],
        [_vi("acc_out", T.FLOAT, [2, 3]), _vi("ys", T.FLOAT16, [2, 3]), _vi("zs", T.FLOAT16, [2, 3])])
    scan = helper.make_node("Scan", ["acc0", "x"], ["acc", "y", "z"], body=body, num_scan_inputs=1)
    g = helper.make_graph([scan], "scan_fp16", [_vi("acc0", T.FLOAT, [2, 3]), _vi("x", T.FLOAT16, [4, 2, 3])],
                          [_vi("acc", T.FLOAT, [2, 3]), _vi("y", T.FLOAT16, [4, 2, 3]),
                           _vi("z", T.FLOAT16, [4, 2, 3])],
                          [helper.make_tensor("w", T.FLOAT, [3], [0.5, -1.0, 2.0]),
                           helper.make_tensor("e", T.FLOAT, [], [2.0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_float16_scan_with_float32_body():
    model = _model()
    rng = np.random.default_rng(3)
    feeds = {"acc0": rng.standard_normal((2, 3)).astype(np.float32),
             "x": rng.uniform(0.5, 1.5, (4, 2, 3)).astype(np.float16)}
    ref = ReferenceEvaluator(model).run(None, feeds)
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=False))
    got = sess.run(None, feeds)
    for name, g, r in zip(["acc", "y", "z"], got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (name, g.dtype, g.shape)
        np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=2e-3, atol=1e-3, err_msg=name)
    assert "Scan" not in {p.op_type for p in sess.placement}, sess.explain()
