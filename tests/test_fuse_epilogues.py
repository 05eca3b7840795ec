"""Epilogue fusion (passes/fuse_matmul.py, passes/fuse_conv.py): a MatMul's scale, per-column
bias (constant or live, e.g. an attention mask), residual and activation become one
clglow.FusedMatMul launch; Swish (x * Sigmoid(x)), HardSwish and Gelu become the epilogue
activation of convolutions (GEMM and depthwise paths) and MatMuls; what is not fused; results
against onnxruntime; a forged FusedMatMul in a user's model is refused."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.errors import ClglowError

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(5)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def _c(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _check(model, feeds, n_fused, n_nodes=None):
    sess = clglow.InferenceSession(model.SerializeToString())
    fused = [n for n in sess.graph.nodes if n.op_type == "FusedMatMul"]
    assert len(fused) == n_fused, [n.op_type for n in sess.graph.nodes]
    if n_nodes is not None:
        assert len(sess.graph.nodes) == n_nodes, [n.op_type for n in sess.graph.nodes]
    got = sess.run(None, feeds)
    want = models.ort_run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    return fused


def _run(model, feeds):
    """Run against onnxruntime; the optimised graph's (op, activation) list."""
    sess = clglow.InferenceSession(model.SerializeToString())
    for g, w in zip(sess.run(None, feeds), models.ort_run(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    return [(n.op_type, n.attrs.get("activation")) for n in sess.graph.nodes]


@pytest.mark.parametrize("m", [7, 64, 130])  # few rows (A read strided) and many (A packed at run time)
def test_linear_bias_residual_relu_is_one_node(m):
    """x @ W + b + r -> Relu, a transformer's output projection with an activation."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Add", ["r", "a"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    feeds = {"x": RNG.standard_normal((2, m, 40)).astype(np.float32),
             "r": RNG.standard_normal((2, m, 72)).astype(np.float32)}
    (f,) = _check(_model(nodes, [_vi("x", [2, m, 40]), _vi("r", [2, m, 72])], [_vi("y", [2, m, 72])],
                         [_c("w", 40, 72), _c("b", 72)]), feeds, 1, 1)
    assert f.inputs[2] == "b" and f.inputs[3] == "r" and f.attrs["activation"] == "Relu"


def test_attention_scores_scale_and_live_mask():
    """q @ k^T * scale + mask[1, 1, 1, S] (computed from an input at run time): alpha and a live
    per-column bias, over a batch of heads."""
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["t"]),
             helper.make_node("Mul", ["mask", "neg"], ["madd"]), helper.make_node("Add", ["t", "madd"], ["y"])]
    scale = numpy_helper.from_array(np.array(0.125, np.float32), "scale")
    neg = numpy_helper.from_array(np.array(-1e4, np.float32), "neg")
    feeds = {"q": RNG.standard_normal((1, 4, 48, 64)).astype(np.float32),
             "k": RNG.standard_normal((1, 4, 64, 48)).astype(np.float32),
             "mask": (RNG.random((1, 1, 1, 48)) > 0.7).astype(np.float32)}
    (f,) = _check(_model(nodes, [_vi("q", [1, 4, 48, 64]), _vi("k", [1, 4, 64, 48]), _vi("mask", [1, 1, 1, 48])],
                         [_vi("y", [1, 4, 48, 48])], [scale, neg]), feeds, 1)
    assert f.attrs["alpha"] == pytest.approx(0.125) and f.inputs[2] == "madd"


def test_what_is_not_fused():
    """A MatMul whose result is also used elsewhere or is a graph output, a per-row vector, an
    Add that broadcasts the output larger, a Mul by a tensor, a Mul after the Add: left alone."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m1"]), helper.make_node("Add", ["m1", "b"], ["y1"]),
             helper.make_node("Neg", ["m1"], ["y2"]),                       # m1 used twice
             helper.make_node("MatMul", ["x", "w"], ["m2"]), helper.make_node("Add", ["m2", "rowv"], ["y3"]),  # per row
             helper.make_node("MatMul", ["x", "w"], ["m3"]), helper.make_node("Add", ["m3", "big"], ["y4"]),   # grows
             helper.make_node("MatMul", ["x", "w"], ["m4"]), helper.make_node("Mul", ["m4", "x2"], ["y5"]),    # tensor Mul
             helper.make_node("MatMul", ["x", "w"], ["y6"])]                # graph output
    inits = [_c("w", 24, 40), _c("b", 40), _c("rowv", 16, 1), _c("big", 3, 16, 40)]
    feeds = {"x": RNG.standard_normal((16, 24)).astype(np.float32),
             "x2": RNG.standard_normal((16, 40)).astype(np.float32)}
    outs = [_vi("y1", [16, 40]), _vi("y2", [16, 40]), _vi("y3", [16, 40]), _vi("y4", [3, 16, 40]),
            _vi("y5", [16, 40]), _vi("y6", [16, 40])]
    _check(_model(nodes, [_vi("x", [16, 24]), _vi("x2", [16, 40])], outs, inits), feeds, 0)


def test_mul_after_add_is_not_alpha():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Mul", ["a", "two"], ["y"])]
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    feeds = {"x": RNG.standard_normal((20, 12)).astype(np.float32)}
    (f,) = _check(_model(nodes, [_vi("x", [20, 12])], [_vi("y", [20, 40])], [_c("w", 12, 40), _c("b", 40), two]),
                  feeds, 1, 2)
    assert f.attrs["alpha"] == 1.0


def test_forged_fused_matmul_is_refused():
    """A model may name clglow's internal op: a bias that is not a per-column vector is an error
    naming the node, and the session stays usable."""
    node = helper.make_node("FusedMatMul", ["x", "w", "b", ""], ["y"], domain="clglow", name="forged")
    g = helper.make_graph([node], "g", [_vi("x", [4, 8]), _vi("w", [8, 6]), _vi("b", [4, 6])], [_vi("y", [4, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("clglow", 1)])
    feeds = {"x": np.ones((4, 8), np.float32), "w": np.ones((8, 6), np.float32), "b": np.ones((4, 6), np.float32)}
    with pytest.raises(ClglowError, match="forged"):
        clglow.InferenceSession(m.SerializeToString()).run(None, feeds)
    ok = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [4, 8]), _vi("w", [8, 6])],
                [_vi("y", [4, 6])])
    out = clglow.InferenceSession(ok.SerializeToString()).run(None, {"x": feeds["x"], "w": feeds["w"]})[0]
    np.testing.assert_allclose(out, np.full((4, 6), 8.0))


def _gelu_nodes(x, y, form):
    """GELU as exporters write it (erf form), three ways, or the opset-20 op."""
    if form == "op":
        return [helper.make_node("Gelu", [x], [y])]
    if form == "div":
        return [helper.make_node("Div", [x, "sqrt2"], ["g_d"]), helper.make_node("Erf", ["g_d"], ["g_e"]),
                helper.make_node("Add", ["g_e", "one"], ["g_a"]), helper.make_node("Mul", [x, "g_a"], ["g_m"]),
                helper.make_node("Mul", ["g_m", "half"], [y])]
    if form == "mul":
        return [helper.make_node("Mul", ["rsqrt2", x], ["g_d"]), helper.make_node("Erf", ["g_d"], ["g_e"]),
                helper.make_node("Add", ["one", "g_e"], ["g_a"]), helper.make_node("Mul", ["g_a", x], ["g_m"]),
                helper.make_node("Mul", ["half", "g_m"], [y])]
    return [helper.make_node("Div", [x, "sqrt2"], ["g_d"]), helper.make_node("Erf", ["g_d"], ["g_e"]),
            helper.make_node("Add", ["g_e", "one"], ["g_a"]), helper.make_node("Mul", [x, "half"], ["g_h"]),
            helper.make_node("Mul", ["g_h", "g_a"], [y])]


@pytest.mark.parametrize("form", ["div", "mul", "half_first", "op"])
def test_gelu_after_bias_is_the_epilogue_activation(form):
    """A transformer's first FFN layer, x @ W + b -> GELU: one launch, GELU from erf.h in the
    epilogue (vectorised), against onnxruntime's exact GELU."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", 2 ** 0.5), ("rsqrt2", 2 ** -0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["h"])]
    nodes += _gelu_nodes("h", "y", form)
    x = RNG.standard_normal((3, 37, 48)).astype(np.float32)
    model = _model(nodes, [_vi("x", [3, 37, 48])], [_vi("y", [3, 37, 80])],
                   [_c("w", 48, 80), _c("b", 80)] + consts, opset=20)
    (f,) = _check(model, {"x": x}, 1, 1)
    assert f.attrs["activation"] == "Gelu"


def test_gelu_lookalikes_are_not_fused():
    """Wrong constants (a tanh-approximation scale, 0.6 instead of 0.5) or a GELU input used
    elsewhere: the MatMul keeps its bias, the rest stays elementwise."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", 1.5), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["h"])]
    nodes += _gelu_nodes("h", "y", "div")
    x = RNG.standard_normal((5, 16)).astype(np.float32)
    (f,) = _check(_model(nodes, [_vi("x", [5, 16])], [_vi("y", [5, 8])], [_c("w", 16, 8), _c("b", 8)] + consts),
                  {"x": x}, 1)
    assert f.attrs["activation"] == ""


def _swish(x, y):
    return [helper.make_node("Sigmoid", [x], [x + "_s"]), helper.make_node("Mul", [x, x + "_s"], [y])]


@pytest.mark.parametrize("group", [1, 8], ids=["gemm", "depthwise"])
def test_conv_swish_is_one_node(group):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group)] + _swish("c", "y")
    x = RNG.standard_normal((1, 8, 20, 36)).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [1, 8, 20, 36])], [_vi("y", [1, 8, 20, 36])],
                      [_c("w", 8, 8 // group, 3, 3), _c("b", 8)]), {"x": x})
    assert ops == [("FusedConv", "Swish")]


def test_conv_hardswish_op():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("HardSwish", ["c"], ["y"])]
    x = (RNG.standard_normal((2, 6, 9, 40)) * 4).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [2, 6, 9, 40])], [_vi("y", [2, 12, 9, 40])], [_c("w", 12, 6, 1, 1)],
                      opset=14), {"x": x})
    assert ops == [("FusedConv", "HardSwish")]


def test_matmul_bias_swish():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
    nodes += _swish("h", "y")
    x = RNG.standard_normal((33, 20)).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [33, 20])], [_vi("y", [33, 48])], [_c("w", 20, 48), _c("b", 48)]), {"x": x})
    assert ops == [("FusedMatMul", "Swish")]


def test_sigmoid_used_elsewhere_is_not_swish():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"]), helper.make_node("Neg", ["s"], ["z"])]
    x = RNG.standard_normal((1, 4, 10, 10)).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [1, 4, 10, 10])], [_vi("y", [1, 4, 10, 10]), _vi("z", [1, 4, 10, 10])],
                      [_c("w", 4, 4, 1, 1)]), {"x": x})
    assert ("FusedConv", "Swish") not in ops


def _quick_gelu(x, y, c_first, sig_first):
    """x * Sigmoid(1.702 * x), CLIP's activation, with the operands of both Muls in either order."""
    scale = ["k", x] if c_first else [x, "k"]
    gate = [x + "_g", x] if sig_first else [x, x + "_g"]
    return [helper.make_node("Mul", scale, [x + "_k"]), helper.make_node("Sigmoid", [x + "_k"], [x + "_g"]),
            helper.make_node("Mul", gate, [y])]


_K = numpy_helper.from_array(np.array(1.702, np.float32), "k")


@pytest.mark.parametrize("c_first,sig_first", [(False, False), (True, True), (True, False)])
def test_matmul_bias_quick_gelu(c_first, sig_first):
    """CLIP's MLP: x @ W + b then quick-GELU, one FusedMatMul whose Swish has alpha 1.702."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
    nodes += _quick_gelu("h", "y", c_first, sig_first)
    x = (RNG.standard_normal((2, 7, 20)) * 2).astype(np.float32)
    model = _model(nodes, [_vi("x", [2, 7, 20])], [_vi("y", [2, 7, 48])], [_c("w", 20, 48), _c("b", 48), _K])
    (f,) = _check(model, {"x": x}, 1, n_nodes=1)
    assert f.attrs["activation"] == "Swish" and abs(f.attrs["act_alpha"] - 1.702) < 1e-6


@pytest.mark.parametrize("group", [1, 8], ids=["gemm", "depthwise"])
def test_conv_quick_gelu_is_one_node(group):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group)]
    nodes += _quick_gelu("c", "y", False, True)
    x = (RNG.standard_normal((1, 8, 12, 20)) * 2).astype(np.float32)
    ops = _run(_model(nodes, [_vi("x", [1, 8, 12, 20])], [_vi("y", [1, 8, 12, 20])],
                      [_c("w", 8, 8 // group, 3, 3), _c("b", 8), _K]), {"x": x})
    assert ops == [("FusedConv", "Swish")]


@pytest.mark.parametrize("case", ["scale_used_elsewhere", "vector_scale", "zero_scale"])
def test_quick_gelu_not_fused(case):
    """The scaled input read elsewhere, a per-column scale (not a scalar) or a zero scale: the
    activation stays separate nodes (the MatMul may still take the bias)."""
    k = {"vector_scale": _c("k", 48), "zero_scale": numpy_helper.from_array(np.array(0.0, np.float32), "k")}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
    nodes += _quick_gelu("h", "y", False, False)
    outs = [_vi("y", [5, 48])]
    if case == "scale_used_elsewhere":
        nodes.append(helper.make_node("Neg", ["h_k"], ["z"]))
        outs.append(_vi("z", [5, 48]))
    x = RNG.standard_normal((5, 20)).astype(np.float32)
    model = _model(nodes, [_vi("x", [5, 20])], outs, [_c("w", 20, 48), _c("b", 48), k.get(case, _K)])
    ops = _run(model, {"x": x})
    assert ("FusedMatMul", "Swish") not in ops and ("FusedMatMul", "") in ops, ops


# --- Transposes folded into MatMul strides (passes/fuse_matmul.fold_transposes) ------------------------
def _attention(b, s, h, d, mask=True):
    """A BERT attention core: head split of q, k (to k^T) and v, scores, softmax, context,
    head merge."""
    hs = numpy_helper.from_array(np.array([b, s, h, d], np.int64), "heads")
    ms = numpy_helper.from_array(np.array([b, s, h * d], np.int64), "merged")
    scale = numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale")
    nodes = [helper.make_node("Reshape", ["q", "heads"], ["qh"]), helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["k", "heads"], ["kh"]), helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["v", "heads"], ["vh"]), helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["qt", "kt"], ["sc"]), helper.make_node("Mul", ["sc", "scale"], ["ss"])]
    if mask:
        nodes.append(helper.make_node("Add", ["ss", "m"], ["sm"]))
    nodes += [helper.make_node("Softmax", ["sm" if mask else "ss"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vt"], ["ctx"]), helper.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ct", "merged"], ["y"])]
    ins = [_vi("q", [b, s, h * d]), _vi("k", [b, s, h * d]), _vi("v", [b, s, h * d])] + ([_vi("m", [b, 1, 1, s])] if mask else [])
    model = _model(nodes, ins, [_vi("y", [b, s, h * d])], [hs, ms, scale])
    feeds = {n: RNG.standard_normal((b, s, h * d)).astype(np.float32) for n in "qkv"}
    if mask:
        feeds["m"] = np.where(RNG.random((b, 1, 1, s)) > 0.8, -1e4, 0).astype(np.float32)
    return model, feeds


@pytest.mark.parametrize("b,s,h,d", [(1, 128, 4, 64), (2, 37, 3, 16)])
def test_attention_transposes_become_strides(b, s, h, d):
    """Every head split and merge Transpose disappears into the MatMuls' strides (q and v read
    or packed through them, k^T packed, the context stored head-merged); results match."""
    model, feeds = _attention(b, s, h, d)
    sess = clglow.InferenceSession(model.SerializeToString())
    ops = [n.op_type for n in sess.graph.nodes]
    assert "Transpose" not in ops and ops.count("FusedMatMul") == 2, ops
    for g, w in zip(sess.run(None, feeds), models.ort_run(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_transposes_that_stay():
    """Kept: a Transpose whose result is used twice, one moving the last axis of the result, a
    result with a residual."""
    x = RNG.standard_normal((2, 3, 8, 5)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 8, 6)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2]),        # [2, 3, 5, 8]
             helper.make_node("MatMul", ["xt", "w"], ["mm"]),                          # [2, 3, 5, 6]
             helper.make_node("Transpose", ["mm"], ["y1"], perm=[0, 1, 3, 2]),         # last axis moves
             helper.make_node("Neg", ["xt"], ["y2"])]                                  # xt used twice
    model = _model(nodes, [_vi("x", [2, 3, 8, 5]), _vi("w", [2, 3, 8, 6])],
                   [_vi("y1", [2, 3, 6, 5]), _vi("y2", [2, 3, 5, 8])])
    ops = _run(model, {"x": x, "w": w})
    assert [o for o, _ in ops].count("Transpose") == 2, ops
    r = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["mm"]), helper.make_node("Add", ["mm", "r"], ["s"]),
             helper.make_node("Transpose", ["s"], ["y"], perm=[0, 2, 1, 3])]
    model = _model(nodes, [_vi("a", [2, 3, 5, 8]), _vi("w", [2, 3, 8, 6]), _vi("r", [2, 3, 5, 6])],
                   [_vi("y", [2, 5, 3, 6])])
    ops = _run(model, {"a": RNG.standard_normal((2, 3, 5, 8)).astype(np.float32), "w": w, "r": r})
    assert ("Transpose", None) in ops and ("FusedMatMul", "") in ops, ops


@pytest.mark.parametrize("attrs", [dict(perm_a=[0, 1, 5]), dict(perm_c=[0, 2, 1]), dict(perm_b=[0, 2, 1, 3])],
                         ids=["bad_perm", "moves_last_axis", "wrong_rank"])
def test_forged_permuted_matmul_is_refused(attrs):
    """A user's model naming clglow.FusedMatMul with bad view permutations: a clear error naming
    the node, never a crash."""
    node = helper.make_node("FusedMatMul", ["x", "w"], ["y"], domain="clglow", name="forged", **attrs)
    g = helper.make_graph([node], "g", [_vi("x", [2, 4, 8]), _vi("w", [2, 8, 6])], [_vi("y", [2, 4, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("clglow", 1)])
    feeds = {"x": np.ones((2, 4, 8), np.float32), "w": np.ones((2, 8, 6), np.float32)}
    with pytest.raises(ClglowError, match="forged"):
        clglow.InferenceSession(m.SerializeToString()).run(None, feeds)

