"""CausalConvWithState (opset 27: the short depthwise convolution of Mamba and Gated DeltaNet
layers, carrying its last K-1 input positions between decode steps) as one kernels_cl/causal_conv.cl
launch writing the output and the present state."""
from __future__ import annotations

from typing import Optional

from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32
from .common import F16, F32, check_dtypes, check_int32_sizes, grid, shape_of

ACTIVATIONS = {"none": 0, "silu": 1, "swish": 1}


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 or float16 (read and written as stored, float arithmetic), a static [B, C, L]
    input, a (C, 1, K) weight, bias (C) and past state (B, C, K-1) when given, an activation the
    kernel has."""
    why = check_dtypes(node, graph, {F32, F16}, inputs=[i for i in range(len(node.inputs)) if node.inputs[i]],
                       outputs=True)
    if why:
        return why
    act = node.attr("activation", "none")
    if act not in ACTIVATIONS:
        return f"activation {act!r} (the kernel has {', '.join(ACTIVATIONS)})"
    x, w = graph.values.get(node.inputs[0]), graph.values.get(node.inputs[1])
    if x is None or w is None or not x.is_static or not w.is_static or len(x.shape) != 3 or len(w.shape) != 3:
        return "CausalConvWithState takes a static rank-3 input and weight"
    b, c, _ = (int(d) for d in x.shape)
    k = int(w.shape[2])
    if tuple(int(d) for d in w.shape) != (c, 1, k) or k < 1:
        return f"weight {tuple(w.shape)} is not (channels {c}, 1, k)"
    if node.input(2) and shape_of(graph, node.input(2)) != (c,):
        return f"bias is not of shape ({c},)"
    if node.input(3) and shape_of(graph, node.input(3)) != (b, c, k - 1):
        return f"past_state is not of shape ({b}, {c}, {k - 1})"
    return None


# every tensor read or written as stored, half or float (float16 models, precision="fp16")
@device_op("CausalConvWithState", supports=_supports, half=HalfIO((0, 1, 2, 3), (0, 1)))
def lower_causal_conv(ctx: LowerCtx) -> list:
    """One launch over (position, channel, image); positions past L only write the present state."""
    b, c, length = (int(d) for d in ctx.inputs[0].shape)
    k = int(ctx.inputs[1].shape[2])
    has_present = len(ctx.node.outputs) > 1 and bool(ctx.node.outputs[1])
    extent = max(length, k - 1 if has_present else 0)
    if b * c * extent == 0:
        return []
    check_int32_sizes(ctx)
    has_bias, has_past = bool(ctx.node.input(2)), bool(ctx.node.input(3))
    y = ctx.out(0)
    args = [ctx.buf(0), ctx.buf(1), ctx.buf(2) if has_bias else ctx.buf(1), ctx.buf(3) if has_past else ctx.buf(1),
            y, ctx.out(1) if has_present else y, i32(c), i32(length)]  # absent ones: never read or written
    defines = {"K": k, "HAS_BIAS": int(has_bias), "HAS_PAST": int(has_past), "HAS_PRESENT": int(has_present),
               "SILU": ACTIVATIONS[ctx.attr("activation", "none")]}
    for flag, i in (("XH", 0), ("WH", 1), ("BH", 2), ("PH", 3)):
        if ctx.node.input(i) and ctx.inputs[i].dtype == F16:
            defines[flag] = 1
    for flag, j in (("YH", 0), ("SH", 1)):
        if j < len(ctx.outputs) and ctx.outputs[j] is not None and ctx.node.outputs[j] and ctx.outputs[j].dtype == F16:
            defines[flag] = 1
    gsize, ls = grid(ctx.device, (extent, c, b), (min(extent, 64), 1, 1))
    return [Launch("causal_conv", "causal_conv", gsize, args, ls, defines, ctx.label())]
