"""The QDQ patterns of passes/qdq.py: each QuantizeLinear's chain back to its DequantizeLinear
inputs, matched and turned into the integer node that replaces it (`match`), with the parameter
checks they share. Pure functions over the Graph; nothing here edits it (qdq.apply does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..ir import Graph, Node, Value
from .fuse_conv import fused_activation


MS = "com.microsoft"
Q8 = {np.dtype(np.int8), np.dtype(np.uint8)}
# ops that only move or select elements: exact on the integer tensor with unchanged parameters
# (onnxruntime's DropQDQ set: its input 0 is the data, the other inputs are indices or shapes)
EXACT_OPS = {"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Resize", "Slice", "Expand",
             "Gather", "GatherElements", "DepthToSpace", "SpaceToDepth", "Tile"}
BINARY_OPS = {"Add": "QLinearAdd", "Mul": "QLinearMul"}
# one-input ops with an integer contrib form (onnxruntime's QDQ unary selector)
UNARY_OPS = {"AveragePool": "QLinearAveragePool", "GlobalAveragePool": "QLinearGlobalAveragePool",
             "Sigmoid": "QLinearSigmoid", "LeakyRelu": "QLinearLeakyRelu", "Softmax": "QLinearSoftmax"}
INT32 = np.iinfo(np.int32)


@dataclass
class QParams:
    """A DequantizeLinear's or QuantizeLinear's constant parameters (names as the fused node's
    inputs use them; a missing zero point gets a constant of zeros)."""

    node: Node
    scale: np.ndarray  # float32
    zp: np.ndarray  # the quantized dtype
    axis: Optional[int]  # None: per tensor
    scale_name: str
    zp_name: str  # '' when the node had none (filled in by `zp_input`)

    @property
    def dtype(self) -> np.dtype:
        return self.zp.dtype

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def same(self, other: "QParams") -> bool:
        """Equal per-tensor parameters and type: Q(DQ(v)) == v across them."""
        return self.per_tensor and other.per_tensor and self.dtype == other.dtype and \
            float(self.scale.reshape(-1)[0]) == float(other.scale.reshape(-1)[0]) and \
            int(self.zp.reshape(-1)[0]) == int(other.zp.reshape(-1)[0])

    def quantize(self, v: float) -> int:
        """The quantized value of float `v` (per-tensor parameters), saturated."""
        info = np.iinfo(self.dtype)
        s = float(self.scale.reshape(-1)[0])
        q = np.rint(np.clip(np.float64(v) / s, -1e12, 1e12)) + int(self.zp.reshape(-1)[0])
        return int(np.clip(q, info.min, info.max))


def std(node: Node) -> bool:
    """`node` is an ai.onnx op (the patterns are written over the standard ops only)."""
    return node.domain in ("", "ai.onnx")


def is_qdq(node: Node, op_type: str) -> bool:
    """`node` is a QuantizeLinear / DequantizeLinear (`op_type`) of ai.onnx or com.microsoft (the
    quantizer's UseQDQContribOps spelling: the same arithmetic for 8-bit types)."""
    return node.op_type == op_type and (std(node) or node.domain == MS)


def qparams(node: Node, g: Graph, data_dtype: Optional[np.dtype] = None) -> Optional[QParams]:
    """The parameters of a Q/DQ node when they are constant, 8-bit, float32-scaled and not blocked."""
    if not (is_qdq(node, "QuantizeLinear") or is_qdq(node, "DequantizeLinear")):
        return None
    if node.attr("block_size", 0) or node.attr("precision"):
        return None
    scale = g.const(node.input(1))
    if scale is None or np.asarray(scale).dtype != np.float32 or np.asarray(scale).ndim > 1:
        return None
    scale = np.asarray(scale)
    if not np.all(scale > 0) or not np.all(np.isfinite(scale)):
        return None
    zp = g.const(node.input(2)) if node.input(2) else None
    if node.input(2) and zp is None:
        return None
    if zp is None:
        if node.op_type == "DequantizeLinear":
            dt = data_dtype if data_dtype is not None else np.dtype(np.uint8)
        else:
            out_dt = node.attr("output_dtype", 0)
            dt = np.dtype(np.int8) if out_dt == 3 else np.dtype(np.uint8) if out_dt in (0, 2) else None
            if dt is None:
                return None
        zp = np.zeros(scale.shape, dt)
    zp = np.asarray(zp)
    if zp.dtype not in Q8 or zp.size != scale.size:
        return None
    axis = int(node.attr("axis", 1)) if scale.size > 1 else None  # opset 10 has no axis: per tensor
    return QParams(node, scale, zp, axis, node.input(1), node.input(2))


def dq_of(name: str, g: Graph, producers: dict) -> Optional[QParams]:
    """The parameters of the DequantizeLinear producing `name` (8-bit data), else None."""
    p = producers.get(name)
    if p is None or not is_qdq(p, "DequantizeLinear"):
        return None
    v = g.values.get(p.input(0))
    if v is None or v.dtype is None or np.dtype(v.dtype) not in Q8:
        return None
    qp = qparams(p, g, np.dtype(v.dtype))
    return qp if qp is not None and qp.dtype == np.dtype(v.dtype) else None


def sole_user(name: str, user: Node, consumers: dict, outputs: set) -> bool:
    """`name` is read by `user` only and is not a graph output."""
    users = consumers.get(name, [])
    return name not in outputs and len(users) >= 1 and all(u is user for u in users)


class Rewrite:
    """What one pattern produces: the new node, the constants it adds, the nodes it replaces."""

    def __init__(self, g: Graph, q: Node):
        self.g = g
        self.q = q
        self.replaced: list = [q]
        self.consts: dict = {}
        self.dqs: list = []
        # an activation after a contrib op: the integer Clip that follows the new node, and the
        # (activation, QuantizeLinear) pair whose place a QuantizeLinear of the op's output takes
        # in the fallback nodes
        self.tail: Optional[Node] = None
        self.split: Optional[tuple] = None
        self.values: dict = {}

    def const(self, base: str, arr: np.ndarray) -> str:
        """The name of a new constant input (added to the graph only if the rewrite is applied)."""
        name = self.g.unique_name(base)
        while name in self.consts:
            name = self.g.unique_name(name + "_")
        self.consts[name] = np.asarray(arr)
        return name

    def scale_input(self, qp: QParams) -> str:
        return qp.scale_name

    def zp_input(self, qp: QParams) -> str:
        """The zero point's input name: the node's own, or a new constant of zeros."""
        return qp.zp_name or self.const(qp.node.name + "_zero_point", qp.zp)

    def triple(self, data: str, qp: QParams) -> list:
        """[data, scale, zero point] inputs of an integer op, the DQ remembered for removal."""
        self.dqs.append(qp.node)
        return [data, self.scale_input(qp), self.zp_input(qp)]


def activation_clamp(act: Optional[Node], g: Graph, yq: QParams) -> Optional[list]:
    """[lo, hi] quantized bounds of a fused Relu/Clip (None: no activation; raises nothing:
    an activation whose bounds are not constant is not fused, see `chain_back`)."""
    if act is None:
        return None
    a = fused_activation(act, g)
    info = np.iinfo(yq.dtype)
    lo = yq.quantize(a[1]) if a[0] == "Clip" else yq.quantize(0.0)
    hi = yq.quantize(a[2]) if a[0] == "Clip" else int(info.max)
    return [lo, hi]


def chain_back(q: Node, g: Graph, producers: dict, consumers: dict, outputs: set) -> tuple:
    """(core op, optional Relu/Clip) producing the input of QuantizeLinear `q`, each used only by
    the next; (None, None) when there is none."""
    p = producers.get(q.input(0))
    if p is None or not sole_user(q.input(0), q, consumers, outputs):
        return None, None
    act = None
    if std(p) and p.op_type in ("Relu", "Clip"):
        a = fused_activation(p, g)
        if a is None or a[0] not in ("Relu", "Clip"):
            return None, None
        act, p = p, producers.get(p.input(0))
        if p is None or not sole_user(act.input(0), act, consumers, outputs):
            return None, None
    return p, act


def bias_values(name: str, g: Graph, producers: dict, rw: Rewrite) -> Optional[np.ndarray]:
    """The float64 values of a bias: a float constant, or a DequantizeLinear of a constant
    (its node then replaced too)."""
    c = g.const(name)
    if c is not None:
        return np.asarray(c, np.float64) if np.asarray(c).dtype.kind == "f" else None
    p = producers.get(name)
    if p is None or not is_qdq(p, "DequantizeLinear") or p.attr("block_size", 0):
        return None
    data, scale = g.const(p.input(0)), g.const(p.input(1))
    zp = g.const(p.input(2)) if p.input(2) else 0
    if data is None or scale is None or zp is None:
        return None
    scale = np.asarray(scale, np.float64)
    if scale.size > 1:
        axis = int(p.attr("axis", 1)) % max(np.asarray(data).ndim, 1)
        shape = [1] * np.asarray(data).ndim
        shape[axis] = scale.size
        scale = scale.reshape(shape)
        zp = np.asarray(zp).reshape(shape)
    rw.dqs.append(p)
    return (np.asarray(data, np.float64) - np.asarray(zp, np.float64)) * scale


def int32_bias(values: np.ndarray, acc_scale: np.ndarray) -> Optional[np.ndarray]:
    """round(values / acc_scale) as int32, None when it does not fit."""
    q = np.rint(values / acc_scale)
    if not np.all(np.isfinite(q)) or q.size and (q.min() < INT32.min or q.max() > INT32.max):
        return None
    return q.astype(np.int32)


def channel_scale(w: QParams, n: int, axis: int, rank: int) -> bool:
    """`w`'s scale is per tensor, or per channel along `axis` of a rank-`rank` tensor with n channels."""
    if w.per_tensor:
        return True
    return w.axis is not None and w.axis % rank == axis and w.scale.size == n


def rank_of(name: str, g: Graph) -> Optional[int]:
    """The rank of value `name`, None when unknown."""
    v = g.values.get(name)
    return None if v is None or v.shape is None else len(v.shape)


def dims_of(name: str, g: Graph) -> Optional[tuple]:
    """The (maybe symbolic) shape of value `name`, None when unknown."""
    v = g.values.get(name)
    return None if v is None or v.shape is None else tuple(v.shape)


def conv_rewrite(core: Node, act: Optional[Node], rw: Rewrite, yq: QParams, producers: dict) -> Optional[Node]:
    """DQ(x), DQ(w) [, bias] -> Conv -> [act] -> Q as QLinearConv."""
    g = rw.g
    x, w = dq_of(core.input(0), g, producers), dq_of(core.input(1), g, producers)
    wdims = dims_of(w.node.input(0), g) if w is not None else None
    if x is None or w is None or not x.per_tensor or not wdims or not isinstance(wdims[0], int):
        return None
    m = wdims[0]
    if not channel_scale(w, m, 0, len(wdims)):
        return None
    inputs = rw.triple(x.node.input(0), x) + rw.triple(w.node.input(0), w) + \
        [yq.scale_name, rw.zp_input(yq)]
    if core.input(2):
        bf = bias_values(core.input(2), g, producers, rw)
        if bf is None or bf.size != m:
            return None
        acc = np.float64(x.scale.reshape(-1)[0]) * w.scale.reshape(-1).astype(np.float64)
        b = int32_bias(bf.reshape(-1), acc)
        if b is None:
            return None
        inputs.append(rw.const(core.name + "_bias_int32", b))
    attrs = dict(core.attrs)
    clamp = activation_clamp(act, g, yq)
    if clamp is not None:
        attrs["qclamp"] = clamp
    return Node("QLinearConv", core.name, inputs, [rw.q.outputs[0]], attrs, "")


def gemm_operands(a_name: str, b_name: str, trans_b: bool, rw: Rewrite, producers: dict) -> Optional[tuple]:
    """(a, b, n) parameters of a GEMM's two DequantizeLinear operands, b per tensor or per column."""
    g = rw.g
    a, b = dq_of(a_name, g, producers), dq_of(b_name, g, producers)
    if a is None or b is None or not a.per_tensor:
        return None
    bdims = dims_of(b.node.input(0), g)
    if b.per_tensor:
        return a, b, None
    if not bdims or len(bdims) != 2 or not channel_scale(b, bdims[0 if trans_b else 1], 0 if trans_b else 1, 2):
        return None
    return a, b, bdims[0 if trans_b else 1]


def qgemm(name: str, ops: tuple, bias: Optional[np.ndarray], attrs: dict, act: Optional[Node], rw: Rewrite,
          yq: QParams) -> Optional[Node]:
    """The com.microsoft QGemm of operands `ops`, its float `bias` scaled by beta / alpha already."""
    a, b, _ = ops
    inputs = rw.triple(a.node.input(0), a) + rw.triple(b.node.input(0), b)
    alpha = float(attrs.get("alpha", 1.0))
    if bias is not None:
        acc = alpha * np.float64(a.scale.reshape(-1)[0]) * b.scale.reshape(-1).astype(np.float64)
        c = int32_bias(bias, acc)
        if c is None:
            return None
        inputs.append(rw.const(name + "_bias_int32", c))
    else:
        inputs.append("")
    inputs += [yq.scale_name, rw.zp_input(yq)]
    clamp = activation_clamp(act, rw.g, yq)
    if clamp is not None:
        attrs["qclamp"] = clamp
    return Node("QGemm", name, inputs, [rw.q.outputs[0]], attrs, MS)


def gemm_rewrite(core: Node, act: Optional[Node], rw: Rewrite, yq: QParams, producers: dict) -> Optional[Node]:
    """DQ(a), DQ(b) [, bias] -> Gemm -> [act] -> Q as com.microsoft QGemm."""
    trans_a, trans_b = int(core.attr("transA", 0)), int(core.attr("transB", 0))
    ops = gemm_operands(core.input(0), core.input(1), bool(trans_b), rw, producers)
    if ops is None:
        return None
    alpha, beta = float(core.attr("alpha", 1.0)), float(core.attr("beta", 1.0))
    bias = None
    if core.input(2) and beta != 0.0:
        bf = bias_values(core.input(2), rw.g, producers, rw)
        if bf is None or bf.ndim > 2 or alpha == 0.0:
            return None
        bias = beta * (bf.reshape(1, -1) if ops[2] is not None and bf.ndim == 1 else bf)
    return qgemm(core.name, ops, bias, {"transA": trans_a, "transB": trans_b, "alpha": alpha}, act, rw, yq)


def matmul_rewrite(core: Node, act: Optional[Node], rw: Rewrite, yq: QParams, producers: dict,
                   consumers: dict, outputs: set) -> Optional[Node]:
    """DQ(a), DQ(b) -> MatMul -> [act] -> Q as QLinearMatMul; MatMul + Add(bias) of 2-D
    operands as com.microsoft QGemm."""
    g = rw.g
    if core.op_type == "Add":
        mm = None
        for i in (0, 1):
            p = producers.get(core.input(i))
            if p is not None and p.op_type == "MatMul" and std(p) and sole_user(core.input(i), core, consumers, outputs):
                mm, bias_name = p, core.input(1 - i)
                break
        if mm is None or rank_of(mm.input(0), g) != 2 or rank_of(mm.input(1), g) != 2:
            return None
        ops = gemm_operands(mm.input(0), mm.input(1), False, rw, producers)
        bf = bias_values(bias_name, g, producers, rw) if ops is not None else None
        if bf is None or bf.ndim > 2:
            return None
        rw.replaced.append(mm)
        return qgemm(mm.name, ops, bf, {"transA": 0, "transB": 0, "alpha": 1.0}, act, rw, yq)
    rank_b = rank_of(core.input(1), g)
    ops = gemm_operands(core.input(0), core.input(1), False, rw, producers)
    if ops is None or ops[2] is not None and rank_b != 2:
        return None
    a, b, _ = ops
    inputs = rw.triple(a.node.input(0), a) + rw.triple(b.node.input(0), b) + [yq.scale_name, rw.zp_input(yq)]
    attrs = {}
    clamp = activation_clamp(act, g, yq)
    if clamp is not None:
        attrs["qclamp"] = clamp
    return Node("QLinearMatMul", core.name, inputs, [rw.q.outputs[0]], attrs, "")


def exact_rewrite(core: Node, rw: Rewrite, yq: QParams, producers: dict, consumers: dict) -> Optional[Node]:
    """DQ -> {MaxPool, Reshape, Transpose, ...} -> Q with equal parameters: the op on the integer
    tensor (MaxPool's indices, when read, keep the float graph)."""
    g = rw.g
    x = dq_of(core.input(0), g, producers)
    if x is None or not x.same(yq):
        return None
    if any(o and consumers.get(o) for o in core.outputs[1:]) or any(o in g.outputs for o in core.outputs[1:] if o):
        return None
    if core.op_type == "MaxPool" and g.opset() < 12:
        return None  # int8 MaxPool exists from opset 12
    if core.op_type == "Resize":
        mode = core.attr("mode", "nearest")
        if (mode.decode() if isinstance(mode, bytes) else mode) != "nearest":
            return None
    rw.dqs.append(x.node)
    outs = [rw.q.outputs[0]] + [o for o in core.outputs[1:] if o]
    return Node(core.op_type, core.name, [x.node.input(0)] + list(core.inputs[1:]), outs, dict(core.attrs),
                core.domain, None)


def unary_attrs(core: Node, g: Graph) -> Optional[dict]:
    """The attributes of the contrib form of a one-input op (None: it has no such form)."""
    op = core.op_type
    if op in ("AveragePool", "GlobalAveragePool"):
        dil = core.attr("dilations")
        if dil is not None and any(int(d) != 1 for d in dil):
            return None
        return dict({k: v for k, v in core.attrs.items() if k != "dilations"}, channels_last=0)
    if op == "LeakyRelu":
        return {"alpha": float(core.attr("alpha", 0.01))}
    if op == "Softmax":  # the contrib op keeps the original opset's meaning of axis
        return {"axis": int(core.attr("axis", 1 if g.opset() < 13 else -1)), "opset": g.opset()}
    return {}


def contrib_rewrite(core: Node, rw: Rewrite, yq: QParams, producers: dict) -> Optional[Node]:
    """DQ -> {Add, Mul, AveragePool, GlobalAveragePool, Concat} -> Q as the com.microsoft ops
    onnxruntime's quantizer writes (per-tensor parameters, one 8-bit type throughout)."""
    g = rw.g
    xs = [dq_of(i, g, producers) for i in core.inputs]
    if not xs or any(x is None or not x.per_tensor or x.dtype != yq.dtype for x in xs):
        return None
    y = [yq.scale_name, rw.zp_input(yq)]
    if core.op_type in BINARY_OPS:
        if len(xs) != 2:
            return None
        inputs = rw.triple(xs[0].node.input(0), xs[0]) + rw.triple(xs[1].node.input(0), xs[1]) + y
        return Node(BINARY_OPS[core.op_type], core.name, inputs, [rw.q.outputs[0]], {}, MS)
    if core.op_type in UNARY_OPS:
        attrs = unary_attrs(core, g)
        if len(xs) != 1 or attrs is None:
            return None
        return Node(UNARY_OPS[core.op_type], core.name, rw.triple(xs[0].node.input(0), xs[0]) + y,
                    [rw.q.outputs[0]], attrs, MS)
    inputs = list(y)
    for x in xs:
        inputs += rw.triple(x.node.input(0), x)
    if core.attr("axis") is None:
        return None
    return Node("QLinearConcat", core.name, inputs, [rw.q.outputs[0]], {"axis": int(core.attr("axis"))}, MS)


def split_activation(rw: Rewrite, node: Node, act: Node, yq: QParams) -> None:
    """DQ, DQ -> Add / Mul -> Relu / Clip -> Q: the contrib op writes the quantized sum at the
    output's parameters and an integer Clip at the quantized bounds follows it. Exact against the
    literal graph but for the op's own rounding: Q(clip(v, a, b)) == clip(Q(v), Q(a), Q(b))."""
    g, q = rw.g, rw.q
    t = g.unique_name(f"{q.outputs[0]}_unclamped")
    node.outputs = [t]
    out = g.values.get(q.outputs[0])
    rw.values[t] = Value(t, yq.dtype, out.shape if out is not None else None)
    lo, hi = activation_clamp(act, g, yq)
    bounds = [rw.const(act.name + "_qmin", np.array(lo, yq.dtype)), rw.const(act.name + "_qmax", np.array(hi, yq.dtype))]
    rw.tail = Node("Clip", act.name, [t] + bounds, [q.outputs[0]], {}, "")
    rw.split = (act, Node(q.op_type, q.name, [act.input(0)] + list(q.inputs[1:]), [t], dict(q.attrs), q.domain,
                          q.proto))


def clamp_rewrite(q: Node, act: Node, g: Graph, yq: QParams, producers: dict) -> Optional[tuple]:
    """DQ -> Relu / Clip -> Q with equal parameters (an activation the quantizer kept apart from
    its producer): a Clip of the integer tensor at the quantized bounds. Exact: Q(DQ(v)) == v
    and quantization is monotonic. Integer Clip exists from opset 12."""
    x = dq_of(act.input(0), g, producers)
    if x is None or not x.same(yq) or g.opset() < 12:
        return None
    rw = Rewrite(g, q)
    rw.replaced.append(act)
    rw.dqs.append(x.node)
    lo, hi = activation_clamp(act, g, yq)
    inputs = [x.node.input(0), rw.const(act.name + "_qmin", np.array(lo, yq.dtype)),
              rw.const(act.name + "_qmax", np.array(hi, yq.dtype))]
    return rw, Node("Clip", act.name, inputs, [q.outputs[0]], {}, "")


def match(q: Node, g: Graph, producers: dict, consumers: dict, outputs: set) -> Optional[tuple]:
    """(Rewrite, new node) for the pattern ending at QuantizeLinear `q`, or None."""
    yq = qparams(q, g)
    if yq is None or not yq.per_tensor:
        return None
    core, act = chain_back(q, g, producers, consumers, outputs)
    if core is not None and act is not None and is_qdq(core, "DequantizeLinear"):
        return clamp_rewrite(q, act, g, yq, producers)
    if core is None or not std(core):
        return None
    rw = Rewrite(g, q)
    rw.replaced += [n for n in (act, core) if n is not None]
    op = core.op_type
    if op == "Conv":
        node = conv_rewrite(core, act, rw, yq, producers)
    elif op == "Gemm":
        node = gemm_rewrite(core, act, rw, yq, producers)
    elif op == "MatMul" or op == "Add" and any(
            producers.get(i) is not None and producers[i].op_type == "MatMul" for i in core.inputs):
        node = matmul_rewrite(core, act, rw, yq, producers, consumers, outputs)
    elif act is not None:
        node = contrib_rewrite(core, rw, yq, producers) if op in BINARY_OPS and g.opset() >= 12 else None
        if node is not None:
            split_activation(rw, node, act, yq)
    elif op in EXACT_OPS:
        node = exact_rewrite(core, rw, yq, producers, consumers)
    elif op in BINARY_OPS or op in UNARY_OPS or op == "Concat":
        node = contrib_rewrite(core, rw, yq, producers)
    else:
        return None
    return None if node is None else (rw, node)
