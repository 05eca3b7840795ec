"""QDQ fusion (clglow/passes/qdq.py): each pattern against onnxruntime's literal run.

For every pattern: the rewrite happens (the integer node is in the graph, the float op gone);
onnxruntime's own kernels running the rewritten graph (tests/quant/qdq_graphs.graph_model) and
clglow's session both agree with onnxruntime's literal run (ORT_DISABLE_ALL) within
max(onnxruntime's fused-vs-literal gap, 1 step), measured here per case; ops that only move
elements are exact. Where the integer node's device lowering is registered, the session loads
with CLGLOW_HOST_FALLBACK=0 and keeps the node (it runs on OpenCL).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import qdq_graphs as qg  # noqa: E402

from clglow import InferenceSession  # noqa: E402
from clglow.frontend.onnx_model import import_model  # noqa: E402
from clglow.ir import Node  # noqa: E402
from clglow.lower.base import lookup  # noqa: E402
from clglow.partition import DEVICE  # noqa: E402
from clglow.passes import pipeline  # noqa: E402
from clglow.passes.qdq import fuse_qdq  # noqa: E402

RNG_SEED = 7
X_SHAPE = [1, 4, 8, 8]


def feeds_for(shape: list, seed: int = RNG_SEED) -> dict:
    return {"x": np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)}


def rewritten(model: onnx.ModelProto):
    return fuse_qdq(import_model(model), require_kernel=False)


def op_types(g) -> list:
    return [n.op_type for n in g.nodes]


def check(model: onnx.ModelProto, feeds: dict, expect: set, absent: set, exact: bool = False):
    """The rewrite of `model` has the `expect` ops and none of `absent`; onnxruntime (on the
    rewritten graph) and clglow agree with onnxruntime's literal run within its own gap."""
    literal = qg.ort_outputs(model, feeds)[0]
    tol = 0 if exact else max(qg.ort_gap(model, feeds), 1)
    g = rewritten(model)
    ops = set(op_types(g))
    assert expect <= ops, op_types(g)
    assert not (absent & ops), op_types(g)
    for n in g.nodes:
        if n.op_type in expect:
            assert n.unfused, n.name  # the float nodes to fall back on
    if qg.ort_int8_exact():  # else onnxruntime's integer kernels are no reference here
        ours = qg.ort_outputs(qg.graph_model(g, model.opset_import[0].version), feeds)[0]
        assert ours.dtype == literal.dtype
        assert qg.steps(ours, literal) <= tol
    got = InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert got.dtype == literal.dtype and got.shape == literal.shape
    assert qg.steps(got, literal) <= tol
    return g


def conv_model(xdt, wdt, per_channel: bool, bias: str, act, opset: int = 13, symmetric: bool = False,
               ys=None) -> onnx.ModelProto:
    """Q/DQ(x) -> Conv(DQ(w), bias) -> act -> Q (or the float act output when `ys` is None)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32)
    bvals = (rng.standard_normal(6) * 0.2).astype(np.float32)
    b = qg.QDQBuilder(opset)
    xs, xz = qg.qparams_for(-1.0, 1.0, xdt, symmetric)
    x = b.qdq("x", xs, xz)
    wd = b.weight(w, wdt, per_channel, 0, symmetric=wdt == qg.I8)
    ins = [x, wd]
    if bias == "int32":
        ws = onnx.numpy_helper.to_array(next(t for t in b.inits if t.name == b.nodes[-1].input[1]))
        bscale = (xs * ws).astype(np.float32)
        bq = np.rint(bvals / bscale).astype(np.int32)
        ins.append(b.dq(b.init("bq", bq), bscale, np.zeros(bscale.shape, np.int32),
                        axis=0 if per_channel else None))
    elif bias == "float":
        ins.append(b.init("b", bvals))
    y = b.node("Conv", ins, pads=[1, 1, 1, 1])[0]
    if act == "Relu":
        y = b.node("Relu", [y])[0]
    elif act == "Clip":
        y = b.node("Clip", [y, b.init("lo", np.float32(-0.3)), b.init("hi", np.float32(0.6))])[0]
    out_type = TensorProto.FLOAT
    if ys is not None:
        y = b.q(y, *ys)
        out_type = helper.np_dtype_to_tensor_dtype(np.dtype(ys[1].dtype))
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                   [helper.make_tensor_value_info("y", out_type, None)])


def calibrated(build, feeds: dict, ydt, symmetric: bool = False) -> onnx.ModelProto:
    """`build(ys)` with output parameters fitted to the float output's range."""
    lo, hi = qg.float_range(build(None), feeds)
    return build(qg.qparams_for(lo, hi, ydt, symmetric))


CONV_CASES = [
    # x dtype, w dtype, per channel, bias, activation, opset, symmetric
    (qg.U8, qg.I8, False, "none", None, 13, False),
    (qg.U8, qg.I8, True, "int32", None, 13, False),
    (qg.U8, qg.I8, True, "int32", "Relu", 13, False),
    (qg.I8, qg.I8, True, "float", "Clip", 13, True),
    (qg.U8, qg.U8, False, "int32", "Relu", 10, False),
    (qg.I8, qg.I8, True, "int32", None, 21, True),
]


def test_onnxruntime_exact_on_7bit_weights():
    """The premise of the suite's onnxruntime comparisons (quant_models' reduce_range models,
    quant_oracle.ort_exact_weights): at the worst case of a 7-bit weight (255 * 64 and 255 * -64
    in every pair) onnxruntime's MatMulInteger is exact on this CPU, VNNI or not."""
    assert qg.ort_matmul_integer_exact(-64) and qg.ort_matmul_integer_exact(64)


@pytest.mark.parametrize("xdt,wdt,pc,bias,act,opset,sym", CONV_CASES)
def test_conv(xdt, wdt, pc, bias, act, opset, sym):
    feeds = feeds_for(X_SHAPE)
    model = calibrated(lambda ys: conv_model(xdt, wdt, pc, bias, act, opset, sym, ys), feeds, xdt, sym)
    g = check(model, feeds, {"QLinearConv"}, {"Conv", "Relu", "Clip"})
    conv = next(n for n in g.nodes if n.op_type == "QLinearConv")
    assert ("qclamp" in conv.attrs) == (act is not None)
    if bias != "none":
        assert g.values[conv.inputs[8]].dtype == np.int32
    # the weights stay 8-bit: no float DequantizeLinear of them is left
    assert "DequantizeLinear" not in op_types(g) or all(
        g.const(n.inputs[0]) is None for n in g.nodes if n.op_type == "DequantizeLinear")


def test_relu_clamp_is_zero_point():
    """Relu's bound is the output zero point (the float 0), Clip's bounds are Q(min), Q(max)."""
    feeds = feeds_for(X_SHAPE)
    model = calibrated(lambda ys: conv_model(qg.U8, qg.I8, True, "int32", "Clip", 13, False, ys), feeds, qg.U8)
    g = rewritten(model)
    conv = next(n for n in g.nodes if n.op_type == "QLinearConv")
    ys, yz = float(g.const(conv.inputs[6])), int(g.const(conv.inputs[7]))
    assert conv.attrs["qclamp"] == [int(np.clip(np.rint(-0.3 / ys) + yz, 0, 255)),
                                    int(np.clip(np.rint(0.6 / ys) + yz, 0, 255))]


def matmul_model(kind: str, per_channel: bool, ys=None, act=None) -> onnx.ModelProto:
    """Q/DQ(x [4, 16]) -> MatMul(DQ(w [16, 8])) [+ bias] / Gemm(transB, alpha, beta) -> act -> Q."""
    rng = np.random.default_rng(5)
    b = qg.QDQBuilder(13)
    xs, xz = qg.qparams_for(-1.0, 1.0, qg.U8, False)
    x = b.qdq("x", xs, xz)
    w = (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)
    bias = (rng.standard_normal(8) * 0.2).astype(np.float32)
    if kind == "gemm":
        wd = b.weight(np.ascontiguousarray(w.T), qg.I8, per_channel, 0)
        y = b.node("Gemm", [x, wd, b.init("b", bias)], transB=1, alpha=0.75, beta=1.5)[0]
    else:
        wd = b.weight(w, qg.I8, per_channel, 1)
        y = b.node("MatMul", [x, wd])[0]
        if kind == "matmul_bias":
            y = b.node("Add", [y, b.init("b", bias)])[0]
    if act == "Relu":
        y = b.node("Relu", [y])[0]
    out_type = TensorProto.FLOAT
    if ys is not None:
        y = b.q(y, *ys)
        out_type = TensorProto.UINT8
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                   [helper.make_tensor_value_info("y", out_type, None)])


@pytest.mark.parametrize("kind,pc,act,op", [("matmul", False, None, "QLinearMatMul"),
                                            ("matmul", True, "Relu", "QLinearMatMul"),
                                            ("matmul_bias", True, None, "QGemm"),
                                            ("gemm", False, None, "QGemm"),
                                            ("gemm", True, "Relu", "QGemm")])
def test_matmul_gemm(kind, pc, act, op):
    feeds = feeds_for([4, 16])
    model = calibrated(lambda ys: matmul_model(kind, pc, ys, act), feeds, qg.U8)
    check(model, feeds, {op}, {"MatMul", "Gemm", "Add", "Relu"})


def activation_matmul_model(ys=None) -> onnx.ModelProto:
    """Both MatMul operands are activations (attention scores): QLinearMatMul of two tensors."""
    b = qg.QDQBuilder(13)
    s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
    a = b.qdq("x", s, z)
    t = b.node("Transpose", ["x"], perm=[0, 2, 1])[0]
    bt = b.qdq(t, s, z)
    y = b.node("MatMul", [a, bt])[0]
    out_type = TensorProto.FLOAT
    if ys is not None:
        y = b.q(y, *ys)
        out_type = TensorProto.UINT8
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 8])],
                   [helper.make_tensor_value_info("y", out_type, None)])


def test_matmul_of_activations():
    feeds = feeds_for([2, 5, 8])
    model = calibrated(activation_matmul_model, feeds, qg.U8)
    check(model, feeds, {"QLinearMatMul"}, {"MatMul"})


def unary_model(op: str, shape: list, attrs: dict, extra: list = (), same: bool = True, dt=qg.U8,
                sym: bool = False) -> onnx.ModelProto:
    """Q/DQ(x) -> op -> Q with the input's parameters (or other ones when not `same`), the Q a
    graph output."""
    b = qg.QDQBuilder(13)
    s, z = qg.qparams_for(-1.0, 1.0, dt, sym)
    x = b.qdq("x", s, z)
    ins = [x] + [b.init("c", np.asarray(c)) if not isinstance(c, str) else c for c in extra]
    y = b.node(op, ins, **attrs)[0]
    ys, yz = (s, z) if same else qg.qparams_for(-0.7, 0.9, dt, sym)
    b.q(y, ys, yz)
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(dt), None)])


EXACT_CASES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, []),
    ("Reshape", {}, [np.array([1, 16, 16], np.int64)]),
    ("Transpose", {"perm": [0, 2, 3, 1]}, []),
    ("Flatten", {"axis": 1}, []),
    ("Squeeze", {}, [np.array([0], np.int64)]),
    ("Unsqueeze", {}, [np.array([1], np.int64)]),
    ("Resize", {"mode": "nearest"}, ["", np.array([1, 1, 2, 2], np.float32)]),
    ("Slice", {}, [np.array([1, 2], np.int64), np.array([3, 8], np.int64), np.array([1, 2], np.int64)]),
    ("Gather", {"axis": 1}, [np.array([3, 0, 2], np.int64)]),
    ("DepthToSpace", {"blocksize": 2}, []),
    ("Tile", {}, [np.array([1, 2, 1, 1], np.int64)]),
]


@pytest.mark.parametrize("op,attrs,extra", EXACT_CASES, ids=[c[0] for c in EXACT_CASES])
@pytest.mark.parametrize("dt", [qg.U8, qg.I8], ids=["uint8", "int8"])
def test_exact_ops(op, attrs, extra, dt):
    """Ops that only move or select elements run on the integer tensor: results exact."""
    feeds = feeds_for(X_SHAPE)
    model = unary_model(op, X_SHAPE, attrs, extra, dt=dt, sym=dt == qg.I8)
    g = check(model, feeds, {op}, {"DequantizeLinear"}, exact=True)
    node = next(n for n in g.nodes if n.op_type == op)
    assert g.values[node.inputs[0]].dtype == dt


@pytest.mark.parametrize("op,extra", [("Relu", []), ("Clip", [np.float32(-0.25), np.float32(0.5)])])
@pytest.mark.parametrize("dt", [qg.U8, qg.I8], ids=["uint8", "int8"])
def test_activation_between_qdq(op, extra, dt):
    """DQ -> Relu/Clip -> Q with equal parameters: an integer Clip, exact."""
    feeds = feeds_for(X_SHAPE)
    model = unary_model(op, X_SHAPE, {}, extra, dt=dt, sym=dt == qg.I8)
    g = check(model, feeds, {"Clip"}, {"DequantizeLinear", "Relu"}, exact=True)
    clip = next(n for n in g.nodes if n.op_type == "Clip")
    assert g.values[clip.inputs[0]].dtype == dt and g.const(clip.inputs[1]).dtype == dt


def test_exact_op_needs_equal_parameters():
    """Different output parameters: the op stays in float between the DQ and the Q."""
    model = unary_model("Transpose", X_SHAPE, {"perm": [0, 2, 3, 1]}, same=False)
    g = rewritten(model)
    assert "DequantizeLinear" in op_types(g) and "QuantizeLinear" in op_types(g)
    feeds = feeds_for(X_SHAPE)
    got = InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert qg.steps(got, qg.ort_outputs(model, feeds)[0]) <= 1


def test_linear_resize_not_rewritten():
    model = unary_model("Resize", X_SHAPE, {"mode": "linear"}, ["", np.array([1, 1, 2, 2], np.float32)])
    assert "Resize" in op_types(rewritten(model)) and "DequantizeLinear" in op_types(rewritten(model))


CONTRIB_CASES = [
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, "QLinearAveragePool"),
    ("GlobalAveragePool", {}, "QLinearGlobalAveragePool"),
    ("Sigmoid", {}, "QLinearSigmoid"),
    ("LeakyRelu", {"alpha": 0.2}, "QLinearLeakyRelu"),
    ("Softmax", {"axis": 1}, "QLinearSoftmax"),
]


@pytest.mark.parametrize("op,attrs,qop", CONTRIB_CASES, ids=[c[0] for c in CONTRIB_CASES])
def test_unary_contrib(op, attrs, qop):
    feeds = feeds_for(X_SHAPE)
    model = unary_model(op, X_SHAPE, attrs, same=False)
    check(model, feeds, {qop}, {op, "DequantizeLinear"})


def binary_model(op: str, n_inputs: int = 2, **attrs) -> onnx.ModelProto:
    """Q/DQ(x), Q/DQ(Sigmoid(x)) [, ...] -> Add / Mul / Concat -> Q with its own parameters."""
    b = qg.QDQBuilder(13)
    ins = []
    for i in range(n_inputs):
        src = "x" if i == 0 else b.node("Sigmoid" if i % 2 else "Neg", ["x"])[0]
        s, z = qg.qparams_for(-1.0 + 0.5 * (i == 1), 1.0, qg.U8, False)
        ins.append(b.qdq(src, s, z))
    y = b.node(op, ins, **attrs)[0]
    b.q(y, *qg.qparams_for(-1.6, 1.9, qg.U8, False))
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])


@pytest.mark.parametrize("op,n,attrs,qop", [("Add", 2, {}, "QLinearAdd"), ("Mul", 2, {}, "QLinearMul"),
                                            ("Concat", 3, {"axis": 1}, "QLinearConcat")])
def test_binary_and_concat(op, n, attrs, qop):
    feeds = feeds_for(X_SHAPE)
    check(binary_model(op, n, **attrs), feeds, {qop}, {op})


def shared_model() -> onnx.ModelProto:
    """One DQ feeding a Conv chain, a MaxPool chain and a float Sigmoid output; the Conv's Q is a
    graph output and also feeds another DQ."""
    b = qg.QDQBuilder(13)
    s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
    x = b.qdq("x", s, z)
    w = (np.random.default_rng(1).standard_normal((4, 4, 1, 1)) * 0.4).astype(np.float32)
    conv = b.node("Conv", [x, b.weight(w, qg.I8, True, 0)])[0]
    ys, yz = qg.qparams_for(-2.0, 2.0, qg.U8, False)
    cq = b.q(conv, ys, yz)
    pooled = b.q(b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])[0], s, z)
    sig = b.node("Sigmoid", [x])[0]
    tail = b.node("Relu", [b.dq(cq, ys, yz)])[0]
    outs = [cq, pooled, sig, tail]
    types = [TensorProto.UINT8, TensorProto.UINT8, TensorProto.FLOAT, TensorProto.FLOAT]
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                   [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types)])


def test_shared_dequantize_and_graph_output():
    model = shared_model()
    feeds = feeds_for(X_SHAPE)
    g = rewritten(model)
    ops = op_types(g)
    assert {"QLinearConv", "MaxPool"} <= set(ops) and "Conv" not in ops
    # the input's DQ stays for the Sigmoid; the Conv output's DQ for the Relu
    dqs = [n for n in g.nodes if n.op_type == "DequantizeLinear"]
    assert len(dqs) == 2
    literal = qg.ort_outputs(model, feeds)
    tol = max(qg.steps(qg.ort_outputs(model, feeds, True)[0], literal[0]), 1)
    got = InferenceSession(model.SerializeToString()).run(None, feeds)
    results = [got] + ([qg.ort_outputs(qg.graph_model(g, 13), feeds)] if qg.ort_int8_exact() else [])
    for res in results:
        assert qg.steps(res[0], literal[0]) <= tol
        assert qg.steps(res[1], literal[1]) == 0
        np.testing.assert_allclose(res[2], literal[2], rtol=1e-5, atol=1e-6)
        ys = float(qg.qparams_for(-2.0, 2.0, qg.U8, False)[0])
        np.testing.assert_allclose(res[3], literal[3], atol=tol * ys + 1e-6)


def test_not_rewritten():
    """A per-channel activation DQ, a float intermediate that is a graph output, a non-constant
    scale: left as they are."""
    feeds = feeds_for(X_SHAPE)
    base = calibrated(lambda ys: conv_model(qg.U8, qg.I8, True, "int32", "Relu", 13, False, ys), feeds, qg.U8)
    # the Conv's float output also a graph output
    m = onnx.ModelProto()
    m.CopyFrom(base)
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    m.graph.output.append(helper.make_tensor_value_info(conv.output[0], TensorProto.FLOAT, None))
    m = qg.with_output_shapes(m)
    assert "Conv" in op_types(rewritten(m)) and "QLinearConv" not in op_types(rewritten(m))
    # the output scale an input of the graph
    m2 = onnx.ModelProto()
    m2.CopyFrom(base)
    last = m2.graph.node[-1]
    m2.graph.input.append(helper.make_tensor_value_info("ys_in", TensorProto.FLOAT, []))
    last.input[1] = "ys_in"
    assert "QLinearConv" not in op_types(rewritten(m2))


def test_pass_runs_before_constant_folding():
    """The weights' DequantizeLinear must still be there when the pass runs."""
    order = [p.__name__ for p in pipeline.PIPELINE]
    assert order.index("fuse_qdq") < order.index("fold_constants")


def test_graph_without_qdq_is_untouched():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, X_SHAPE)])
    plain = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert fuse_qdq(plain) is plain


def test_qat_float_weights_folded_first():
    """Q(float weight) -> DQ (QAT exporters): the Q folds to an 8-bit constant, the DQ stays for
    the pattern."""
    feeds = feeds_for(X_SHAPE)
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32)

    def build(ys):
        b = qg.QDQBuilder(13)
        s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
        x = b.qdq("x", s, z)
        ws = np.float32(np.abs(w).max() / 127)
        wq = b.q(b.init("w", w), ws, np.int8(0))
        y = b.node("Conv", [x, b.dq(wq, ws, np.int8(0))], pads=[1, 1, 1, 1])[0]
        out = TensorProto.FLOAT
        if ys is not None:
            b.q(y, *ys)
            out = TensorProto.UINT8
        b.nodes[-1].output[0] = "y"
        return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                       [helper.make_tensor_value_info("y", out, None)])

    check(calibrated(build, feeds, qg.U8), feeds, {"QLinearConv"}, {"Conv"})


# --- on OpenCL once the integer lowerings are registered -----------------------------------------

def registered(op: str, domain: str = "") -> bool:
    return lookup(Node(op, op, [], [], {}, domain)) is not None


DEVICE_CASES = {
    "QLinearConv": lambda f: calibrated(lambda ys: conv_model(qg.U8, qg.I8, True, "int32", "Relu", 13, False, ys),
                                        f, qg.U8),
    "QLinearMatMul": lambda f: calibrated(lambda ys: matmul_model("matmul", True, ys, "Relu"), f, qg.U8),
    "QGemm": lambda f: calibrated(lambda ys: matmul_model("gemm", True, ys, "Relu"), f, qg.U8),
    "QLinearAdd": lambda f: binary_model("Add"),
    "QLinearGlobalAveragePool": lambda f: unary_model("GlobalAveragePool", X_SHAPE, {}, same=False),
}


@pytest.mark.parametrize("op", sorted(DEVICE_CASES))
def test_on_opencl(op, monkeypatch):
    """With CLGLOW_HOST_FALLBACK=0 the session keeps the integer node (so it runs on OpenCL)."""
    domain = "" if op in ("QLinearConv", "QLinearMatMul") else "com.microsoft"
    if not registered(op, domain):
        pytest.skip(f"no device lowering of {op} registered yet")
    shape = [4, 16] if op in ("QLinearMatMul", "QGemm") else X_SHAPE
    feeds = feeds_for(shape)
    model = DEVICE_CASES[op](feeds)
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    sess = InferenceSession(model.SerializeToString())
    assert op in [n.op_type for n in sess.graph.nodes]
    got = sess.run(None, feeds)[0]
    assert {p.where for p in sess.placement if p.op_type == op} == {DEVICE}  # the plan's placement
    literal = qg.ort_outputs(model, feeds)[0]
    assert qg.steps(got, literal) <= max(qg.ort_gap(model, feeds), 1)


def test_blocked_weights_not_rewritten():
    """Blocked quantization (opset 21 block_size) has no integer-node form: left as written."""
    b = qg.QDQBuilder(21)
    s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
    x = b.qdq("x", s, z)
    wq = np.random.default_rng(2).integers(-100, 100, size=(6, 4, 3, 3)).astype(np.int8)
    ws = np.full((6, 2, 3, 3), 0.01, np.float32)
    wd = b.node("DequantizeLinear", [b.init("wq", wq), b.init("ws", ws)], axis=1, block_size=2)[0]
    y = b.node("Conv", [x, wd])[0]
    b.q(y, *qg.qparams_for(-4.0, 4.0, qg.U8, False))
    b.nodes[-1].output[0] = "y"
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                    [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    ops = op_types(rewritten(model))
    assert "Conv" in ops and "QLinearConv" not in ops


def test_conv_transpose_stays_float():
    """No integer ConvTranspose exists (neither ai.onnx nor onnxruntime's contrib ops): the QDQ
    ConvTranspose runs as written, matching onnxruntime's literal run."""
    feeds = feeds_for(X_SHAPE)
    w = (np.random.default_rng(4).standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)

    def build(ys):
        b = qg.QDQBuilder(13)
        s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
        y = b.node("ConvTranspose", [b.qdq("x", s, z), b.weight(w, qg.I8, True, 1)], strides=[2, 2])[0]
        out = TensorProto.FLOAT
        if ys is not None:
            b.q(y, *ys)
            out = TensorProto.UINT8
        b.nodes[-1].output[0] = "y"
        return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                       [helper.make_tensor_value_info("y", out, None)])

    model = calibrated(build, feeds, qg.U8)
    assert "ConvTranspose" in op_types(rewritten(model))
    got = InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert qg.steps(got, qg.ort_outputs(model, feeds)[0]) <= 1


def test_refused_integer_node_runs_its_float_nodes(monkeypatch):
    """A rewritten node that the session's Target refuses runs as the nodes it replaced
    (Node.unfused), with the same results as the literal graph."""
    from clglow.lower.base import GENERIC_TARGET, REGISTRY

    if not registered("QLinearConv"):
        pytest.skip("no device lowering of QLinearConv registered yet")
    feeds = feeds_for(X_SHAPE)
    model = calibrated(lambda ys: conv_model(qg.U8, qg.I8, True, "int32", "Relu", 13, False, ys), feeds, qg.U8)
    op = REGISTRY[("", "QLinearConv")]
    real = op.supports
    monkeypatch.setattr(op, "supports", lambda node, graph, target: real(node, graph, target)
                        if target is GENERIC_TARGET else "refused by the test")
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    sess = InferenceSession(model.SerializeToString())
    ops = [n.op_type for n in sess.graph.nodes]
    assert "QLinearConv" not in ops and "Conv" in ops, ops
    got = sess.run(None, feeds)[0]
    assert qg.steps(got, qg.ort_outputs(model, feeds)[0]) <= 1


def se_model() -> onnx.ModelProto:
    """A squeeze-excite tail: one DequantizeLinear read by a GlobalAveragePool and by the Mul
    that scales it (both rewritten), so neither rewrite may take the DQ from the other's fallback."""
    b = qg.QDQBuilder(13)
    s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
    x = b.qdq("x", s, z)
    gs, gz = qg.qparams_for(-0.5, 0.5, qg.U8, False)
    pooled = b.dq(b.q(b.node("GlobalAveragePool", [x])[0], gs, gz), gs, gz)
    gate = b.qdq(b.node("Sigmoid", [pooled])[0], *qg.qparams_for(0.0, 1.0, qg.U8, False))
    b.q(b.node("Mul", [x, gate])[0], *qg.qparams_for(-1.0, 1.0, qg.U8, False))
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])


@pytest.mark.parametrize("refuse", ["QLinearGlobalAveragePool", "QLinearMul"])
def test_shared_dequantize_fallback_alone(refuse, monkeypatch):
    """One of two rewrites that shared a DequantizeLinear falls back on its own (its originals
    carry a private copy of the DQ): the model still runs, as the literal graph does."""
    from clglow.lower.base import GENERIC_TARGET, REGISTRY

    model = se_model()
    g = rewritten(model)
    assert {"QLinearGlobalAveragePool", "QLinearMul"} <= set(op_types(g))
    if not registered(refuse, "com.microsoft"):
        pytest.skip(f"no device lowering of {refuse} registered yet")
    op = REGISTRY[("com.microsoft", refuse)]
    real = op.supports
    monkeypatch.setattr(op, "supports", lambda node, graph, target: real(node, graph, target)
                        if target is GENERIC_TARGET else "refused by the test")
    feeds = feeds_for(X_SHAPE)
    sess = InferenceSession(model.SerializeToString())
    assert refuse not in [n.op_type for n in sess.graph.nodes]
    got = sess.run(None, feeds)[0]
    assert qg.steps(got, qg.ort_outputs(model, feeds)[0]) <= max(qg.ort_gap(model, feeds), 1)


def test_contrib_domain_quantize_nodes():
    """com.microsoft QuantizeLinear/DequantizeLinear (onnxruntime's UseQDQContribOps) fuse too."""
    feeds = feeds_for(X_SHAPE)
    model = calibrated(lambda ys: conv_model(qg.U8, qg.I8, True, "int32", "Relu", 13, False, ys), feeds, qg.U8)
    for n in model.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            n.domain = "com.microsoft"
    check(model, feeds, {"QLinearConv"}, {"Conv", "Relu"})


def add_relu_model(act: str = "Relu") -> onnx.ModelProto:
    """DQ, DQ -> Add -> Relu/Clip -> Q (a residual block as PyTorch-style QDQ exports write it)."""
    b = qg.QDQBuilder(13)
    s, z = qg.qparams_for(-1.0, 1.0, qg.U8, False)
    x = b.qdq("x", s, z)
    other = b.qdq(b.node("Neg", ["x"])[0], *qg.qparams_for(-0.8, 1.2, qg.U8, False))
    y = b.node("Add", [x, other])[0]
    if act == "Relu":
        y = b.node("Relu", [y])[0]
    else:
        y = b.node("Clip", [y, b.init("lo", np.float32(-0.1)), b.init("hi", np.float32(0.3))])[0]
    b.q(y, *qg.qparams_for(-0.5, 1.5, qg.U8, False))
    b.nodes[-1].output[0] = "y"
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])


@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_add_activation(act):
    feeds = feeds_for(X_SHAPE)
    g = check(add_relu_model(act), feeds, {"QLinearAdd"}, {"Add", "Relu"})
    assert "Clip" in op_types(g)  # the integer clamp after it (no fallback of its own: always runs)
    add = next(n for n in g.nodes if n.op_type == "QLinearAdd")
    assert add.unfused[-1].op_type == "QuantizeLinear" and add.unfused[-1].outputs == add.outputs


def test_add_activation_fallback(monkeypatch):
    """The QLinearAdd falls back to DQ/Add/Q writing its own output; the Clip stays."""
    from clglow.lower.base import GENERIC_TARGET, REGISTRY

    if not registered("QLinearAdd", "com.microsoft"):
        pytest.skip("no device lowering of QLinearAdd registered yet")
    op = REGISTRY[("com.microsoft", "QLinearAdd")]
    real = op.supports
    monkeypatch.setattr(op, "supports", lambda node, graph, target: real(node, graph, target)
                        if target is GENERIC_TARGET else "refused by the test")
    model = add_relu_model()
    feeds = feeds_for(X_SHAPE)
    sess = InferenceSession(model.SerializeToString())
    ops = [n.op_type for n in sess.graph.nodes]
    assert "QLinearAdd" not in ops and "Add" in ops and "Clip" in ops, ops
    got = sess.run(None, feeds)[0]
    assert qg.steps(got, qg.ort_outputs(model, feeds)[0]) <= 1


def test_optimizations_off_runs_the_literal_graph():
    """graph_optimization_level 0 (as onnxruntime's ORT_DISABLE_ALL) leaves the Q/DQ nodes as
    written: no integer node, results as onnxruntime's literal run."""
    from clglow import SessionOptions

    feeds = feeds_for(X_SHAPE)
    model = calibrated(lambda ys: conv_model(qg.U8, qg.I8, True, "int32", "Relu", 13, False, ys), feeds, qg.U8)
    opts = SessionOptions()
    opts.graph_optimization_level = 0
    sess = InferenceSession(model.SerializeToString(), opts)
    assert "QLinearConv" not in [n.op_type for n in sess.graph.nodes]
    assert qg.steps(sess.run(None, feeds)[0], qg.ort_outputs(model, feeds)[0]) <= 1
