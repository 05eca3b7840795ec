"""The com.microsoft operators clglow knows: their schemas and shape/dtype rules.

onnx knows nothing of onnxruntime's contrib domain (its checker skips the nodes, its shape
inference leaves their outputs untyped), so the frontend checks these nodes against this
registry and clglow's shape pass (clglow.shapes) takes their output types from `infer` here.
The schemas follow onnxruntime's docs/ContribOperators.md (domain version 1): the quantized
operators its quantization tool writes. Any other com.microsoft operator is refused at load with
an UnsupportedOperator naming the node.

Lowerings register under `domain=DOMAIN` (lower/qlinear.py: the QLinear* elementwise, pooling,
concat and softmax ops; the int8 GEMM/conv lowerings for QGemm, QLinearConv,
DynamicQuantizeMatMul and MatMulIntegerToFloat); host references live in runtime/contrib_host.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node

DOMAIN = "com.microsoft"
VERSION = 1  # the only version of onnxruntime's contrib domain

F32 = np.dtype(np.float32)
U8 = np.dtype(np.uint8)
Result = dict  # {output name: (dtype or None, shape tuple or None)}


@dataclass(frozen=True)
class ContribSchema:
    """One contrib operator: input names (the first `min_inputs` required; a variadic tail repeats
    the names after `fixed` in groups), output names, attributes with defaults (None: no
    default), required attributes, and the rule for its output's dtype and shape."""

    name: str
    inputs: tuple
    outputs: tuple
    min_inputs: int
    attrs: dict = field(default_factory=dict)
    required: tuple = ()
    variadic: Optional[int] = None  # inputs after this index come in groups of len(inputs) - variadic
    infer: Optional[Callable[[Node, Graph], Result]] = None

    @property
    def max_inputs(self) -> Optional[int]:
        return None if self.variadic is not None else len(self.inputs)


# --- helpers over possibly symbolic shapes ------------------------------------------------------
def _value(graph: Graph, name: str) -> tuple:
    v = graph.values.get(name) if name else None
    if v is None:
        return None, None
    return (None if v.dtype is None else np.dtype(v.dtype)), v.shape


def _broadcast(node: Node, a: Optional[tuple], b: Optional[tuple]) -> Optional[tuple]:
    """Multidirectional broadcast of two (maybe symbolic) shapes; None if a rank is unknown."""
    if a is None or b is None:
        return None
    r = max(len(a), len(b))
    a = (1,) * (r - len(a)) + tuple(a)
    b = (1,) * (r - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, int):
            raise InvalidModel(f"{node.op_type} inputs of shapes {list(a)} and {list(b)} do not broadcast",
                               node=node.name)
        else:
            out.append(x if isinstance(x, int) else (y if isinstance(y, int) else None))
    return tuple(out)


def _ints(v: object, n: int, default: int) -> list:
    return [int(x) for x in v] if v is not None and len(v) else [default] * n  # type: ignore[arg-type]


def window_out(node: Node, size: object, k: int, s: int, d: int, pb: int, pe: int, auto_pad: str,
               ceil_mode: bool = False) -> object:
    """Output length of a convolution/pooling window along one axis (None if `size` is symbolic)."""
    if not isinstance(size, int):
        return None
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // s)
    span = (k - 1) * d + 1
    if auto_pad == "VALID":
        pb = pe = 0
    total = size + pb + pe - span
    if total < 0:
        raise InvalidModel(f"{node.op_type} window of {span} is larger than the padded input ({size + pb + pe})",
                           node=node.name)
    n = (-(-total // s) if ceil_mode else total // s) + 1
    if ceil_mode and (n - 1) * s >= size + pb:  # the last window would start in the end padding
        n -= 1
    return n


def spatial_out(node: Node, x: tuple, kernel: Sequence[int], channels_last: bool, ceil_mode: bool = False) -> tuple:
    """Spatial output dims of a window op over `x` ([N, C, *S] or, channels_last, [N, *S, C])."""
    sp = list(x[1:-1] if channels_last else x[2:])
    n = len(sp)
    if len(kernel) != n:
        raise InvalidModel(f"{node.op_type} kernel_shape {list(kernel)} does not match {n} spatial dims",
                           node=node.name)
    strides = _ints(node.attr("strides"), n, 1)
    dil = _ints(node.attr("dilations"), n, 1)
    pads = _ints(node.attr("pads"), 2 * n, 0)
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    return tuple(window_out(node, sp[i], int(kernel[i]), strides[i], dil[i], pads[i], pads[i + n], auto_pad,
                            ceil_mode) for i in range(n))


# --- the rules -----------------------------------------------------------------------------------
def _same_as(i: int) -> Callable[[Node, Graph], Result]:
    def rule(node: Node, graph: Graph) -> Result:
        dt, sh = _value(graph, node.input(i))
        return {node.outputs[0]: (dt, sh)}

    return rule


def _binary(node: Node, graph: Graph) -> Result:
    dt, a = _value(graph, node.input(0))
    _, b = _value(graph, node.input(3))
    return {node.outputs[0]: (dt, _broadcast(node, a, b))}


def _global_pool(node: Node, graph: Graph) -> Result:
    dt, x = _value(graph, node.input(0))
    if x is None:
        return {node.outputs[0]: (dt, None)}
    if len(x) < 3:
        raise InvalidModel(f"QLinearGlobalAveragePool needs an input of rank >= 3, got {list(x)}", node=node.name)
    if int(node.attr("channels_last", 0) or 0):
        return {node.outputs[0]: (dt, (x[0],) + (1,) * (len(x) - 2) + (x[-1],))}
    return {node.outputs[0]: (dt, tuple(x[:2]) + (1,) * (len(x) - 2))}


def _avg_pool(node: Node, graph: Graph) -> Result:
    dt, x = _value(graph, node.input(0))
    if x is None:
        return {node.outputs[0]: (dt, None)}
    cl = bool(int(node.attr("channels_last", 0) or 0))
    sp = spatial_out(node, x, list(node.attr("kernel_shape") or []), cl, bool(int(node.attr("ceil_mode", 0) or 0)))
    shape = (x[0],) + sp + (x[-1],) if cl else tuple(x[:2]) + sp
    return {node.outputs[0]: (dt, shape)}


def _concat(node: Node, graph: Graph) -> Result:
    dt, _ = _value(graph, node.input(1))
    shapes = [_value(graph, node.input(i))[1] for i in range(2, len(node.inputs), 3)]
    if not shapes or any(s is None for s in shapes):
        return {node.outputs[0]: (dt, None)}
    r = len(shapes[0])
    axis = int(node.attr("axis"))
    if not -r <= axis < r:
        raise InvalidModel(f"QLinearConcat axis {axis} is out of range for rank {r}", node=node.name)
    axis %= r
    out = list(shapes[0])
    for s in shapes[1:]:
        if len(s) != r:
            raise InvalidModel(f"QLinearConcat inputs of ranks {r} and {len(s)}", node=node.name)
        for d in range(r):
            if d == axis:
                out[d] = out[d] + s[d] if isinstance(out[d], int) and isinstance(s[d], int) else None
            elif isinstance(out[d], int) and isinstance(s[d], int) and out[d] != s[d]:
                raise InvalidModel(f"QLinearConcat inputs of shapes {list(shapes[0])} and {list(s)} differ off "
                                   f"axis {axis}", node=node.name)
    return {node.outputs[0]: (dt, tuple(out))}


def _quantize(node: Node, graph: Graph) -> Result:
    zdt, _ = _value(graph, node.input(2))
    _, x = _value(graph, node.input(0))
    return {node.outputs[0]: (zdt if node.input(2) else U8, x)}


def _dequantize(node: Node, graph: Graph) -> Result:
    sdt, _ = _value(graph, node.input(1))
    _, x = _value(graph, node.input(0))
    return {node.outputs[0]: (sdt, x)}


def matmul_shape(node: Node, a: Optional[tuple], b: Optional[tuple]) -> Optional[tuple]:
    """numpy matmul's output shape of (maybe symbolic) operand shapes."""
    if a is None or b is None:
        return None
    if not a or not b:
        raise InvalidModel(f"{node.op_type} operands must not be scalars", node=node.name)
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if isinstance(a2[-1], int) and isinstance(b2[-2], int) and a2[-1] != b2[-2]:
        raise InvalidModel(f"{node.op_type} inner dimensions differ: {list(a)} x {list(b)}", node=node.name)
    out = list(_broadcast(node, a2[:-2], b2[:-2]) or ()) + [a2[-2], b2[-1]]
    if len(a) == 1:
        out.pop(-2)
    if len(b) == 1:
        out.pop(-1)
    return tuple(out)


def _matmul_float(a_in: int, b_in: int, dtype_in: Optional[int]) -> Callable[[Node, Graph], Result]:
    def rule(node: Node, graph: Graph) -> Result:
        dt = _value(graph, node.input(dtype_in))[0] if dtype_in is not None else F32
        shape = matmul_shape(node, _value(graph, node.input(a_in))[1], _value(graph, node.input(b_in))[1])
        return {node.outputs[0]: (dt, shape)}

    return rule


def _qgemm(node: Node, graph: Graph) -> Result:
    _, a = _value(graph, node.input(0))
    _, b = _value(graph, node.input(3))
    if node.input(8):
        dt = _value(graph, node.input(8))[0]
    else:
        dt = U8 if node.input(7) else F32
    if a is None or b is None:
        return {node.outputs[0]: (dt, None)}
    if len(a) != 2 or len(b) != 2:
        raise InvalidModel(f"QGemm needs 2-D A and B, got {list(a)} and {list(b)}", node=node.name)
    m, ka = (a[1], a[0]) if int(node.attr("transA", 0) or 0) else (a[0], a[1])
    kb, n = (b[1], b[0]) if int(node.attr("transB", 0) or 0) else (b[0], b[1])
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise InvalidModel(f"QGemm inner dimensions differ: A {list(a)} x B {list(b)}", node=node.name)
    return {node.outputs[0]: (dt, (m, n))}


def _qlinear_conv(node: Node, graph: Graph) -> Result:
    dt = _value(graph, node.input(7))[0]
    _, x = _value(graph, node.input(0))
    _, w = _value(graph, node.input(3))
    if x is None or w is None:
        return {node.outputs[0]: (dt, None)}
    cl = bool(int(node.attr("channels_last", 0) or 0))
    kernel = node.attr("kernel_shape") or list(w[2:])
    sp = spatial_out(node, x, [int(k) for k in kernel], cl)
    shape = (x[0],) + sp + (w[0],) if cl else (x[0], w[0]) + sp
    return {node.outputs[0]: (dt, shape)}


# --- the registry --------------------------------------------------------------------------------
_POOL_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "channels_last": 0, "count_include_pad": 0,
               "kernel_shape": None, "pads": None, "strides": None}
_CONV_ATTRS = {"auto_pad": "NOTSET", "channels_last": 0, "dilations": None, "group": 1, "kernel_shape": None,
               "pads": None, "strides": None}
_BINARY_IN = ("A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale", "C_zero_point")
_UNARY_IN = ("X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point")

SCHEMAS: dict[str, ContribSchema] = {s.name: s for s in (
    ContribSchema("QLinearAdd", _BINARY_IN, ("C",), 7, infer=_binary),
    ContribSchema("QLinearMul", _BINARY_IN, ("C",), 7, infer=_binary),
    ContribSchema("QLinearSigmoid", _UNARY_IN, ("Y",), 4, infer=_same_as(0)),
    ContribSchema("QLinearLeakyRelu", _UNARY_IN, ("Y",), 4, {"alpha": 0.01}, infer=_same_as(0)),
    ContribSchema("QLinearGlobalAveragePool", ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"),
                  ("Y",), 5, {"channels_last": 0}, infer=_global_pool),
    ContribSchema("QLinearAveragePool", ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"), ("Y",), 4,
                  _POOL_ATTRS, ("kernel_shape",), infer=_avg_pool),
    ContribSchema("QLinearConcat", ("Y_scale", "Y_zero_point", "X", "X_scale", "X_zero_point"), ("Y",), 5,
                  {"axis": None}, ("axis",), variadic=2, infer=_concat),
    ContribSchema("QLinearSoftmax", ("X", "X_scale", "x_zero_point", "y_scale", "y_zero_point"), ("Y",), 5,
                  {"axis": -1, "opset": None}, ("opset",), infer=_same_as(0)),
    ContribSchema("QuantizeLinear", ("x", "y_scale", "y_zero_point"), ("y",), 2, {"axis": None},
                  infer=_quantize),
    ContribSchema("DequantizeLinear", ("x", "x_scale", "x_zero_point"), ("y",), 2, {"axis": None},
                  infer=_dequantize),
    ContribSchema("QGemm", ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C", "y_scale",
                            "y_zero_point"), ("Y",), 6, {"alpha": 1.0, "transA": 0, "transB": 0}, infer=_qgemm),
    ContribSchema("DynamicQuantizeMatMul", ("A", "B", "b_scale", "b_zero_point", "bias"), ("Y",), 3,
                  infer=_matmul_float(0, 1, None)),
    ContribSchema("MatMulIntegerToFloat", ("A", "B", "a_scale", "b_scale", "a_zero_point", "b_zero_point",
                                           "bias"), ("Y",), 4, infer=_matmul_float(0, 1, 2)),
    ContribSchema("QLinearConv", ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                                  "y_zero_point", "B"), ("y",), 8, _CONV_ATTRS, infer=_qlinear_conv),
)}


def schema(op_type: str) -> Optional[ContribSchema]:
    """The registry's schema of com.microsoft `op_type`, None when clglow does not know it."""
    return SCHEMAS.get(op_type)


def check_arity(op_type: str, n_inputs: int, attrs: Sequence[str]) -> Optional[str]:
    """Why a com.microsoft node with `n_inputs` inputs (trailing empty ones dropped) and attribute
    names `attrs` breaks its schema, or None when it fits."""
    s = SCHEMAS[op_type]
    if n_inputs < s.min_inputs:
        return f"has {n_inputs} inputs; {op_type} needs at least {s.min_inputs} ({', '.join(s.inputs[:s.min_inputs])})"
    if s.variadic is not None:
        group = len(s.inputs) - s.variadic
        if (n_inputs - s.variadic) % group:
            return (f"has {n_inputs} inputs; {op_type} takes {s.variadic} then groups of {group} "
                    f"({', '.join(s.inputs[s.variadic:])})")
    elif n_inputs > len(s.inputs):
        return f"has {n_inputs} inputs; {op_type} takes at most {len(s.inputs)}"
    missing = [a for a in s.required if a not in attrs]
    if missing:
        return f"misses the required attribute(s) {', '.join(missing)}"
    unknown = [a for a in attrs if a not in s.attrs]
    if unknown:
        return f"has attribute(s) {', '.join(unknown)} that {op_type} does not define"
    return None


def infer(node: Node, graph: Graph) -> Result:
    """{output: (dtype, shape)} of a known com.microsoft node ({} for an unknown one)."""
    s = SCHEMAS.get(node.op_type)
    if s is None or s.infer is None:
        return {}
    return s.infer(node, graph)


def annotate(graph: Graph) -> None:
    """Give the outputs of `graph`'s com.microsoft nodes the dtypes and shapes their rules find,
    where the model and onnx's shape inference left them untyped (in graph order, so a chain of
    contrib ops is typed through)."""
    for node in graph.nodes:
        if node.domain != DOMAIN:
            continue
        for name, (dtype, shape) in infer(node, graph).items():
            v = graph.values.get(name)
            if v is None or not name:
                continue
            if v.dtype is None and dtype is not None:
                v.dtype = dtype
            if v.shape is None and shape is not None:
                v.shape = tuple(shape)
