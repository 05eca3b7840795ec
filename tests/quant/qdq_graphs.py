"""Small QDQ graphs written with onnx.helper, and the oracles the QDQ-fusion tests compare with.

Each builder writes the float op wrapped the way onnxruntime's quantizer (QDQ format) does:
QuantizeLinear on the float input, DequantizeLinear before the op (weights as 8-bit
initialisers with their own DequantizeLinear), QuantizeLinear after it. The output scale comes
from a float run of the same graph (`calibrated`), so outputs spread over many quantization steps.

Oracles: onnxruntime's literal run (ORT_DISABLE_ALL: each Q/DQ and float op as written) and its
fused run (ORT_ENABLE_ALL: its QDQ transformers' int8 kernels); `ort_gap` is the largest
difference between the two in quantization steps, which the tests allow (at least one step).
`graph_model` turns a rewritten clglow Graph back into a model for onnxruntime, so its own
QLinearConv/QGemm/... kernels check the rewrite independently of clglow's kernels.
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

I8, U8 = np.dtype(np.int8), np.dtype(np.uint8)


def qrange(dt: np.dtype) -> tuple:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def qparams_for(lo: float, hi: float, dt: np.dtype, symmetric: bool) -> tuple:
    """(scale, zero point) covering [lo, hi] in type `dt` as onnxruntime's quantizer picks them."""
    qmin, qmax = qrange(dt)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if symmetric:
        m = max(abs(lo), abs(hi), 1e-6)
        scale = 2 * m / (qmax - qmin)
        zp = 0 if dt == I8 else 128
    else:
        scale = max(hi - lo, 1e-6) / (qmax - qmin)
        zp = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return np.float32(scale), np.array(zp, dt)


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: Optional[int] = None) -> np.ndarray:
    s, z = np.asarray(scale, np.float32), np.asarray(zp)
    if axis is not None and s.size > 1:
        shape = [1] * x.ndim
        shape[axis] = s.size
        s, z = s.reshape(shape), z.reshape(shape)
    qmin, qmax = qrange(z.dtype)
    return np.clip(np.rint(x / s) + z.astype(np.int64), qmin, qmax).astype(z.dtype)


class QDQBuilder:
    """Nodes and initialisers of one QDQ graph, named uniquely."""

    def __init__(self, opset: int = 13):
        self.opset = opset
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, base: str, arr: np.ndarray) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(self, op: str, inputs: list, n_out: int = 1, domain: str = "", **attrs) -> list:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), domain=domain or None, **attrs))
        return outs

    def q(self, x: str, scale, zp, axis: Optional[int] = None, with_zp: bool = True) -> str:
        ins = [x, self.init("s", scale)] + ([self.init("z", zp)] if with_zp else [])
        return self.node("QuantizeLinear", ins, **({"axis": axis} if axis is not None else {}))[0]

    def dq(self, x: str, scale, zp, axis: Optional[int] = None, with_zp: bool = True) -> str:
        ins = [x, self.init("s", scale)] + ([self.init("z", zp)] if with_zp else [])
        return self.node("DequantizeLinear", ins, **({"axis": axis} if axis is not None else {}))[0]

    def qdq(self, x: str, scale, zp) -> str:
        return self.dq(self.q(x, scale, zp), scale, zp)

    def weight(self, w: np.ndarray, dt: np.dtype, per_channel: bool, axis: int, symmetric: bool = True) -> str:
        """DequantizeLinear of `w` quantized to `dt` (per channel along `axis`) as an initialiser."""
        if per_channel:
            moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
            pairs = [qparams_for(float(r.min()), float(r.max()), dt, symmetric) for r in moved]
            scale = np.array([p[0] for p in pairs], np.float32)
            zp = np.array([p[1] for p in pairs], dt)
            wq = quantize(w, scale, zp, axis)
            return self.dq(self.init("wq", wq), scale, zp, axis=axis)
        scale, zp = qparams_for(float(w.min()), float(w.max()), dt, symmetric)
        return self.dq(self.init("wq", quantize(w, scale, zp)), scale, zp)

    def model(self, inputs: list, outputs: list) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, "qdq", inputs, outputs, self.inits)
        opsets = [helper.make_opsetid("", self.opset), helper.make_opsetid("com.microsoft", 1)]
        m = helper.make_model(g, opset_imports=opsets, producer_name="qdq-tests")
        m.ir_version = 8 if self.opset < 21 else 10
        return with_output_shapes(m)


def with_output_shapes(m: onnx.ModelProto) -> onnx.ModelProto:
    """`m` with its outputs' shapes filled in by onnx shape inference (the checker wants them)."""
    inferred = onnx.shape_inference.infer_shapes(m)
    for out, inf in zip(m.graph.output, inferred.graph.output):
        out.CopyFrom(inf)
    return m


def ort_session(model: onnx.ModelProto, fused: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL if fused else \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_outputs(model: onnx.ModelProto, feeds: dict, fused: bool = False) -> list:
    return ort_session(model, fused).run(None, feeds)


def ort_matmul_integer_exact(weight: int) -> bool:
    """onnxruntime's MatMulInteger at the worst case of `weight`: 255 * weight in every pair,
    against the exact integer product."""
    a = np.full((1, 64), 255, np.uint8)
    b = np.full((64, 1), weight, np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 64]),
                           helper.make_tensor_value_info("b", TensorProto.INT8, [64, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    got = ort_session(m, fused=False).run(None, {"a": a, "b": b})[0]
    return bool(np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64)))


@functools.lru_cache(maxsize=None)
def ort_int8_exact() -> bool:
    """Whether onnxruntime's 8-bit kernels accumulate exactly on this machine. Without VNNI-style
    dot products, x86 kernels sum uint8 x int8 pairs in saturating int16 (the issue's GPT-2
    finding), so products of full-range weights come out wrong: a probe at the worst case
    (255 * 127 in every pair) against the exact integer product decides whether onnxruntime's
    integer output may be taken as a reference here."""
    return ort_matmul_integer_exact(127)


def steps(a: np.ndarray, b: np.ndarray) -> int:
    """Largest difference of two integer tensors, in quantization steps."""
    return int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))) if a.size else 0


def ort_gap(model: onnx.ModelProto, feeds: dict) -> int:
    """onnxruntime's own fused-vs-literal difference on integer output 0, in steps (one step
    where its integer kernels saturate, see `ort_int8_exact`: the most these graphs gave here)."""
    if not ort_int8_exact():
        return 1
    return steps(ort_outputs(model, feeds, True)[0], ort_outputs(model, feeds, False)[0])


def float_range(model: onnx.ModelProto, feeds: dict) -> tuple:
    y = ort_outputs(model, feeds)[0]
    return float(y.min()), float(y.max())


def graph_model(g, opset: int) -> onnx.ModelProto:
    """The clglow Graph `g` as a model onnxruntime can run: a `qclamp` attribute becomes a Clip
    of the integer output (onnxruntime's QLinearConv has no such attribute)."""
    from clglow.ir import Node

    nodes, used, extra = [], set(), []
    for n in g.nodes:
        clamp = n.attrs.get("qclamp")
        used.update(i for i in n.inputs if i)
        if clamp is None:
            nodes.append(n.to_proto())
            continue
        attrs = {k: v for k, v in n.attrs.items() if k != "qclamp"}
        raw = n.outputs[0] + "_unclamped"
        nodes.append(Node(n.op_type, n.name, list(n.inputs), [raw], attrs, n.domain).to_proto())
        dt = np.dtype(g.values[n.outputs[0]].dtype)
        lo, hi = (numpy_helper.from_array(np.array(v, dt), f"{n.name}_q{k}") for k, v in zip("lh", clamp))
        extra += [lo, hi]
        nodes.append(helper.make_node("Clip", [raw, lo.name, hi.name], [n.outputs[0]]))
    inits = [numpy_helper.from_array(np.asarray(g.values[k].const), k) for k in sorted(used)
             if g.values.get(k) is not None and g.values[k].const is not None] + extra

    def info(name: str) -> onnx.ValueInfoProto:
        v = g.values[name]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)),
                                             None if v.shape is None else list(v.shape))

    graph = helper.make_graph(nodes, "rewritten", [info(i) for i in g.inputs], [info(o) for o in g.outputs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 13)),  # Clip of ints
                                                helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8 if opset < 21 else 10
    return m


FLOAT = TensorProto.FLOAT
