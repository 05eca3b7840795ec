"""A LayerNorm written out in primitive ops -> one LayerNormalization node.

Exporters before opset 17 (PyTorch's among them) have no LayerNormalization and write

    m = ReduceMean(x, last axis)   d = Sub(x, m)        p = Pow(d, 2) | Mul(d, d)
    v = ReduceMean(p, last axis)   s = Sqrt(Add(v, eps))  n = Div(d, s)
    [y = Add(Mul(n, gamma), beta)]

seven to nine launches and three passes over the activations where the norm kernel makes one
launch (measured on pocl, AVX-512, [256, 768]: 0.15 ms decomposed, onnxruntime, which fuses the
same pattern, 0.06 ms; the fused kernel 0.04 ms). Matched only when every intermediate value
feeds the pattern alone (no graph output, no other consumer), eps, gamma and beta are constants
and the reductions keep their dims over the last axis; gamma/beta absent become ones/zeros.
The node is clglow.LayerNormalization (the device kernel of ai.onnx's, whatever the model's
opset), made only where that kernel supports it.

The RMS norm of T5 and Llama (Hugging Face's T5LayerNorm / LlamaRMSNorm, exported) is the same
kernel without the mean:

    p = Pow(x, 2) | Mul(x, x)   v = ReduceMean(p, last axis)   s = Sqrt(Add(v, eps))
    n = Mul(x, Div(1, s)) | Mul(x, Reciprocal(s)) | Div(x, s)   [y = Mul(n, gamma)]

three launches after fuse_elementwise (the square, the mean, the scaling) and one as
clglow.RMSNormalization (norm.cl RMS; llama and t5_encoder: nine norms each, 27 -> 9 launches).

fuse_channel_norm: a LayerNormalization over the last axis between a Transpose to channels-last
and its inverse (timm's LayerNorm2d in ConvNeXt, EdgeNeXt, EfficientFormer) -> one
clglow.ChannelNorm over axis 1 of the NCHW tensor (norm.cl channelnorm): three launches and two
copies of the activations become one launch.
"""
from __future__ import annotations

from functools import partial
from typing import Optional

import numpy as np

from ..ir import Graph, Node, Value
from .fuse_conv import rewrite_to_fixed_point, splice_fused


def _sole_reader(name: str, consumers: dict, outputs: set) -> Optional[Node]:
    """The single consumer of an internal value (None when it has several or is a graph output)."""
    users = consumers.get(name, [])
    return users[0] if len(users) == 1 and name not in outputs else None


def _is(node: Optional[Node], op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _last_axis_mean(node: Optional[Node], g: Graph, rank: int) -> bool:
    if not _is(node, "ReduceMean") or not int(node.attr("keepdims", 1)):
        return False
    axes = node.attr("axes")
    if axes is None and node.input(1):
        axes = g.const(node.input(1))
    if axes is None:
        return False
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    return len(axes) == 1 and axes[0] % rank == rank - 1


def _scalar(g: Graph, name: str) -> Optional[float]:
    c = g.const(name)
    return None if c is None or np.asarray(c).size != 1 else float(np.asarray(c).reshape(-1)[0])


def _other(node: Node, name: str) -> str:
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _match(g: Graph, mean: Node, consumers: dict, outputs: set) -> Optional[tuple]:
    """(nodes of the pattern, x, eps, gamma name or None, beta name or None, output) from the
    first ReduceMean, or None."""
    x = mean.inputs[0]
    vx = g.values.get(x)
    if vx is None or vx.shape is None or vx.dtype != np.float32 or not isinstance(vx.shape[-1], int):
        return None
    rank = len(vx.shape)

    only = partial(_sole_reader, consumers=consumers, outputs=outputs)

    if rank < 1 or not _last_axis_mean(mean, g, rank):
        return None
    sub = only(mean.outputs[0])
    if not _is(sub, "Sub") or sub.inputs != [x, mean.outputs[0]]:
        return None
    d = sub.outputs[0]
    users = list({id(u): u for u in consumers.get(d, [])}.values())  # Mul(d, d) lists once
    if d in outputs or len(users) != 2:
        return None
    sq = next((u for u in users if _is(u, "Pow") or _is(u, "Mul")), None)
    div = next((u for u in users if _is(u, "Div")), None)
    if sq is None or div is None or div.inputs != [d, div.inputs[1]]:
        return None
    if _is(sq, "Pow") and not (sq.inputs[0] == d and _scalar(g, sq.inputs[1]) == 2.0):
        return None
    if _is(sq, "Mul") and sq.inputs != [d, d]:
        return None
    var = only(sq.outputs[0])
    if not _last_axis_mean(var, g, rank):
        return None
    add = only(var.outputs[0])
    if not _is(add, "Add"):
        return None
    eps = _scalar(g, _other(add, var.outputs[0]))
    sqrt = only(add.outputs[0])
    if eps is None or not _is(sqrt, "Sqrt") or div.inputs[1] != sqrt.outputs[0] or only(sqrt.outputs[0]) is not div:
        return None
    nodes = [mean, sub, sq, var, add, sqrt, div]
    out, gamma, beta = div.outputs[0], None, None
    width = vx.shape[-1]

    def param(node: Node, cur: str) -> Optional[str]:
        other = _other(node, cur)
        c = g.const(other)
        return other if c is not None and np.asarray(c).size == width and np.asarray(c).shape[-1:] == (width,) else None

    mul = only(out)
    if _is(mul, "Mul") and param(mul, out):
        gamma, out = param(mul, out), mul.outputs[0]
        nodes.append(mul)
        add2 = only(out)
        if _is(add2, "Add") and param(add2, out):
            beta, out = param(add2, out), add2.outputs[0]
            nodes.append(add2)
    return nodes, x, eps, gamma, beta, out


def _match_rms(g: Graph, sq: Node, consumers: dict, outputs: set) -> Optional[tuple]:
    """(nodes of the RMS pattern, x, eps, gamma name or None, None, output) from its square,
    or None."""
    only = partial(_sole_reader, consumers=consumers, outputs=outputs)

    var = only(sq.outputs[0])
    if not _is(var, "ReduceMean"):
        return None
    x = sq.inputs[0]
    if not ((_is(sq, "Pow") and _scalar(g, sq.inputs[1]) == 2.0) or (_is(sq, "Mul") and sq.inputs == [x, x])):
        return None
    vx = g.values.get(x)
    if vx is None or vx.shape is None or vx.dtype != np.float32 or not isinstance(vx.shape[-1], int):
        return None
    if len(vx.shape) < 1 or not _last_axis_mean(var, g, len(vx.shape)):
        return None
    add = only(var.outputs[0])
    eps = _scalar(g, _other(add, var.outputs[0])) if _is(add, "Add") else None
    sqrt = only(add.outputs[0]) if eps is not None else None
    if not _is(sqrt, "Sqrt"):
        return None
    nodes = [sq, var, add, sqrt]
    step = only(sqrt.outputs[0])
    if _is(step, "Div") and step.inputs == [x, sqrt.outputs[0]]:
        nodes.append(step)
    else:
        if _is(step, "Div") and step.inputs[1] == sqrt.outputs[0] and _scalar(g, step.inputs[0]) == 1.0:
            pass
        elif not (_is(step, "Reciprocal") and step.inputs == [sqrt.outputs[0]]):
            return None
        mul = only(step.outputs[0])
        if not _is(mul, "Mul") or sorted(mul.inputs) != sorted([x, step.outputs[0]]):
            return None
        nodes += [step, mul]
    out, gamma = nodes[-1].outputs[0], None
    mul = only(out)
    other = _other(mul, out) if _is(mul, "Mul") else ""
    c = g.const(other) if other else None
    if c is not None and np.asarray(c).size == vx.shape[-1] and np.asarray(c).shape[-1:] == (vx.shape[-1],):
        gamma, out = other, mul.outputs[0]
        nodes.append(mul)
    return nodes, x, eps, gamma, None, out


def _fuse_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for mean in g.nodes:  # a LayerNorm's first ReduceMean or an RMS norm's square
        rms = _is(mean, "Pow") or _is(mean, "Mul")  # an RMS norm's square, else a LayerNorm's mean
        m = _match_rms(g, mean, consumers, outputs) if rms else \
            _match(g, mean, consumers, outputs) if _is(mean, "ReduceMean") else None
        if m is None:
            continue
        nodes, x, eps, gamma, beta, out = m
        width = g.values[x].shape[-1]
        ins, added = [x], []
        params = ((gamma, 1.0, "scale"),) if rms else ((gamma, 1.0, "scale"), (beta, 0.0, "bias"))
        for name, fill, tag in params:
            if name is None:  # absent: the identity scale, a zero bias
                name = f"{out}__ln_{tag}"
                g.values[name] = Value(name, np.dtype(np.float32), (width,), np.full(width, fill, np.float32))
                added.append(name)
            ins.append(name)  # else a constant of `width` elements (the lowering reshapes it)
        # clglow's domain: the same kernel as ai.onnx LayerNormalization, whatever the opset
        op = "RMSNormalization" if rms else "LayerNormalization"
        fused = Node(op, f"{nodes[0].name}/{op}", ins, [out], {"axis": -1, "epsilon": float(eps)}, domain="clglow")
        if splice_fused(g, nodes[0], nodes[1:], fused):
            return True
        for name in added:
            g.values.pop(name, None)
    return False


def fuse_layernorm(graph: Graph) -> Graph:
    return rewrite_to_fixed_point(graph, _fuse_one)


def _transpose(node: Optional[Node]) -> Optional[list]:
    if not _is(node, "Transpose") or node.attr("perm") is None:
        return None
    return [int(p) for p in node.attr("perm")]


def _fuse_channel_norm_one(g: Graph, consumers: dict, outputs: set) -> bool:
    for t1 in g.nodes:
        perm = _transpose(t1)
        if perm is None or len(perm) < 3 or perm != [0] + list(range(2, len(perm))) + [1]:
            continue
        ln = _sole_reader(t1.outputs[0], consumers, outputs)
        if ln is None or ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx", "clglow"):
            continue
        r = len(perm)
        if int(ln.attr("axis", -1)) % r != r - 1 or any(o for o in ln.outputs[1:]):
            continue
        t2 = _sole_reader(ln.outputs[0], consumers, outputs)
        if _transpose(t2) != [0, r - 1] + list(range(1, r - 1)):
            continue
        inputs = [t1.input(0), ln.input(1), ln.input(2) if len(ln.inputs) > 2 else ""]
        fused = Node("ChannelNorm", ln.name, inputs, [t2.outputs[0]],
                     {"epsilon": float(ln.attr("epsilon", 1e-5))}, "clglow", None)
        if splice_fused(g, t1, [ln, t2], fused):
            return True
    return False


def fuse_channel_norm(graph: Graph) -> Graph:
    """Transpose(to channels-last) -> LayerNormalization(last axis) -> Transpose(back) as one
    clglow.ChannelNorm (see the module doc)."""
    return rewrite_to_fixed_point(graph, _fuse_channel_norm_one)
