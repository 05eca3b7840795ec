"""passes/refine_shapes.py: shapes inferred again after folding (a mask Expand whose target a
Where over Shape computes, as GPT-2 exports it) so the fusions see static shapes (the mask
becomes the FusedMatMul's bias); symbolic input dims stay symbolic; a refined dim never
contradicts a known one; results against onnxruntime."""
from __future__ import annotations

import os
import sys

import numpy as np
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.frontend.onnx_model import import_model
from clglow.passes.refine_shapes import _merge, refine_shapes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(3)


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _mask_model(q_shape):
    """scores = q @ k + Expand(mask, Where(Equal(Shape(k0), -1), 1, Shape(k0)))."""
    s = q_shape
    nodes = [helper.make_node("Shape", ["k0"], ["ks"]),
             helper.make_node("Equal", ["ks", "neg1"], ["eq"]),
             helper.make_node("Where", ["eq", "ones", "ks"], ["tgt"]),
             helper.make_node("Expand", ["mask", "tgt"], ["m"]),
             helper.make_node("MatMul", ["q", "k"], ["qk"]),
             helper.make_node("Add", ["qk", "m"], ["y"])]
    inits = [_i64("neg1", -1), _i64("ones", [1] * len(s)),
             numpy_helper.from_array(RNG.standard_normal((1,) * (len(s) - 1) + (9,)).astype(np.float32), "mask")]
    ins = [helper.make_tensor_value_info("q", T.FLOAT, list(s)),
           helper.make_tensor_value_info("k", T.FLOAT, list(s[:-2]) + [s[-1], 9]),
           helper.make_tensor_value_info("k0", T.FLOAT, [1] * (len(s) - 1) + [9])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", T.FLOAT, ["a", "b", "c", "d"])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_mask_becomes_static_and_fuses():
    m = _mask_model((1, 4, 1, 16))
    g = import_model(m)
    assert any(not isinstance(d, int) for d in (g.values["m"].shape or (None,))), "onnx inferred it already"
    r = refine_shapes(g)
    assert r.values["m"].shape == (1, 1, 1, 9) and r.const("tgt") is not None
    feeds = {"q": RNG.standard_normal((1, 4, 1, 16)).astype(np.float32),
             "k": RNG.standard_normal((1, 4, 16, 9)).astype(np.float32),
             "k0": np.zeros((1, 1, 1, 9), np.float32)}
    sess = clglow.InferenceSession(m.SerializeToString())
    assert "FusedMatMul" in [n.op_type for n in sess.graph.nodes] and "Add" not in [n.op_type for n in sess.graph.nodes]
    np.testing.assert_allclose(sess.run(None, feeds)[0], models.ort_run(m, feeds)[0], rtol=1e-5, atol=1e-5)


def test_symbolic_inputs_stay_symbolic():
    x = helper.make_tensor_value_info("x", T.FLOAT, ["n", 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Reshape", ["r", "s"], ["y"])]
    out = helper.make_tensor_value_info("y", T.FLOAT, ["n", 8])
    g = import_model(helper.make_model(helper.make_graph(nodes, "g", [x], [out]),
                                       opset_imports=[helper.make_opsetid("", 17)]))
    r = refine_shapes(g)
    assert [n.op_type for n in r.nodes] == ["Relu", "Shape", "Reshape"]  # Shape of a symbolic tensor stays
    assert r.values["r"].shape[1] == 8 and not isinstance(r.values["r"].shape[0], int)


def test_merge_never_contradicts():
    assert _merge((1, "a", 3), (1, 2, 3)) == (1, 2, 3)
    assert _merge((1, "a", 3), (1, 2, 4)) is None   # conflict: the old shape stays
    assert _merge((1, 2), (1, 2, 3)) is None        # rank differs
    assert _merge((1, 2), (1, 2)) is None           # nothing new
    assert _merge(None, (5,)) == (5,)
