"""LinearAttention (opset 27: the recurrent attention of Gated DeltaNet / Qwen3.5-style hybrid
models, RetNet and other linear-attention layers) as one kernels_cl/linear_attention.cl launch:
a work-item per (state column, KV head, image) runs the recurrence over the tokens in order,
its state column in registers, and writes the output rows and the present state."""
from __future__ import annotations

import math
from typing import Optional

from ..ir import Graph, Node
from ..target import Target
from .base import Launch, LowerCtx, device_op, f32, i32
from .common import F16, F32, check_dtypes, check_int32_sizes, grid, shape_of

RULES = {"linear": (0, 0), "gated": (1, 0), "delta": (0, 1), "gated_delta": (1, 1)}  # (GATED, DELTA)
MAX_DK = 256  # the state column a work-item keeps (registers or its private stack)


def _dims(node: Node, graph: Graph) -> Optional[tuple]:
    """(B, T, Hq, Hkv, d_k, d_v) of the node, None when q, k, v are not static [B, T, H * D] of
    one B and T with whole heads."""
    q, k, v = (shape_of(graph, n) for n in node.inputs[:3])
    hq, hkv = int(node.attr("q_num_heads", 0) or 0), int(node.attr("kv_num_heads", 0) or 0)
    if any(s is None or len(s) != 3 or not all(isinstance(d, int) for d in s) for s in (q, k, v)) \
            or hq <= 0 or hkv <= 0:
        return None
    if q[:2] != k[:2] or q[:2] != v[:2] or hq % hkv or q[2] % hq or v[2] % hkv:
        return None
    dk, dv = q[2] // hq, v[2] // hkv
    return (q[0], q[1], hq, hkv, dk, dv) if k[2] == hkv * dk else None


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 or float16 (T: q, k, v, decay, beta and the output of one of them; the states
    either, read and written as stored; float arithmetic), static packed shapes, the rule's
    decay / beta given in a layout the kernel reads, a key size within MAX_DK."""
    why = check_dtypes(node, graph, {F32, F16}, inputs=[i for i in range(len(node.inputs)) if node.inputs[i]],
                       outputs=True)
    if why:
        return why
    t_types = {graph.values[n].dtype for i, n in enumerate(node.inputs) if n and i != 3 and n in graph.values}
    if len(t_types) > 1:
        return "q, k, v, decay and beta of different float types"
    rule = node.attr("update_rule", "gated_delta")
    dims = _dims(node, graph)
    if rule not in RULES or dims is None:
        return f"LinearAttention with update_rule {rule!r} or shapes the kernel does not read"
    b, t, _hq, hkv, dk, dv = dims
    gated, delta = RULES[rule]
    if dk > MAX_DK:
        return f"key size {dk} above the kernel's {MAX_DK}"
    if gated != bool(node.input(4)) or delta != bool(node.input(5)):
        return f"update_rule {rule!r} with decay given {bool(node.input(4))}, beta given {bool(node.input(5))}"
    if gated and shape_of(graph, node.input(4)) not in ((b, t, hkv), (b, t, hkv * dk)):
        return "decay is not [B, T, kv heads] or [B, T, kv heads * d_k]"
    if delta and shape_of(graph, node.input(5)) not in ((b, t, hkv), (b, t, 1)):
        return "beta is not [B, T, kv heads] or [B, T, 1]"
    if node.input(3) and shape_of(graph, node.input(3)) != (b, hkv, dk, dv):
        return f"past_state is not ({b}, {hkv}, {dk}, {dv})"
    return None


@device_op("LinearAttention", supports=_supports)
def lower_linear_attention(ctx: LowerCtx) -> list:
    """One launch over (state column, KV head, image)."""
    b, t, hq, hkv, dk, dv = _dims(ctx.node, ctx.graph)
    if b * hkv * dv == 0:
        return []
    check_int32_sizes(ctx)
    gated, delta = RULES[ctx.attr("update_rule", "gated_delta")]
    has_past = bool(ctx.node.input(3))
    has_present = len(ctx.node.outputs) > 1 and bool(ctx.node.outputs[1])
    scale = float(ctx.attr("scale", 0.0) or 0.0) or 1.0 / math.sqrt(dk)
    y = ctx.out(0)
    q = ctx.buf(0)
    args = [q, ctx.buf(1), ctx.buf(2), ctx.buf(3) if has_past else q, ctx.buf(4) if gated else q,
            ctx.buf(5) if delta else q, y, ctx.out(1) if has_present else y,  # absent ones: never touched
            i32(t), i32(hq), i32(hkv), i32(dv), f32(scale)]
    defines = {"DK": dk, "GATED": gated, "DELTA": delta, "HAS_PAST": int(has_past), "HAS_PRESENT": int(has_present)}
    storage = {"TH": ctx.inputs[0].dtype, "PH": ctx.inputs[3].dtype if has_past else None,
               "SH": ctx.outputs[1].dtype if has_present else None}
    defines.update({flag: 1 for flag, dt in storage.items() if dt == F16})
    if gated and shape_of(ctx.graph, ctx.node.input(4))[2] == hkv * dk and dk != 1:
        defines["DECAY_PER_KEY"] = 1
    if delta and shape_of(ctx.graph, ctx.node.input(5))[2] == 1 and hkv != 1:
        defines["BETA_SHARED"] = 1
    gsize, ls = grid(ctx.device, (dv, hkv, b), (min(dv, 64), 1, 1))
    return [Launch("linear_attention", "linear_attention", gsize, args, ls, defines, ctx.label())]
