"""clglow.SqueezeExcite (passes/fuse_squeeze_excite.py) as one kernels_cl/squeeze_excite.cl
launch: a work-group per image computes the channel means, both FCs and their activations."""
from __future__ import annotations

from typing import Optional

from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, f32, i32
from .common import F16, F32, check_dtypes
from .gemm_kernel import ACTIVATIONS, act_params

GROUP = 64  # work-items per image: a CPU driver runs them one after another, a GPU side by side


def _cap(n: int) -> int:
    """Local floats for a vector of n: the next power of two, at least 64 (few programs)."""
    cap = 64
    while cap < n:
        cap *= 2
    return cap


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 (x also in its half storage), a static 4-D x, constant FC weights, activations the
    epilogues know, and both vectors within the device's local memory."""
    why = check_dtypes(node, graph, {F32, F16}, inputs=[0]) or check_dtypes(
        node, graph, {F32}, inputs=[i for i, n in enumerate(node.inputs) if n and i > 0], outputs=True)
    if why:
        return why
    x = graph.values.get(node.input(0))
    w1, w2 = graph.const(node.input(1)), graph.const(node.input(3))
    if x is None or not x.is_static or len(x.shape) != 4 or w1 is None or w2 is None:
        return "SqueezeExcite takes a static 4-D x and constant FC weights"
    if any(node.attr(a, "") not in ACTIVATIONS for a in ("act1", "act2")):
        return f"activations {node.attr('act1')!r}, {node.attr('act2')!r} not fused by the epilogues"
    if node.attr("act1", "") == "Gelu":
        return "a Gelu after the first FC is not offered (squeeze_excite.cl's se_act1)"
    need = 8 * _cap(max(int(x.shape[1]), int(w1.shape[0])))
    if need > target.local_mem_size:
        return f"{need} bytes of local memory needed, the device has {target.local_mem_size}"
    return None


# x may be stored as half (the convs before an SE block write half under precision="fp16"); the
# squeeze vector s stays float32 (C values an image: nothing to save)
@device_op("SqueezeExcite", domain="clglow", supports=_supports, half=HalfIO((0,), ()))
def lower_squeeze_excite(ctx: LowerCtx) -> list:
    """One launch of (GROUP work-items, images)."""
    n, c, h, w = ctx.inputs[0].shape
    cm = int(ctx.inputs[1].shape[0])
    if n * c == 0:
        return []
    code1, p1 = act_params(ctx.attr("act1", ""), ctx.attr("alpha1", 0.0), ctx.attr("beta1", 0.0))
    code2, p2 = act_params(ctx.attr("act2", ""), ctx.attr("alpha2", 0.0), ctx.attr("beta2", 0.0))
    has_b1, has_b2 = bool(ctx.node.input(2)), bool(ctx.node.input(4))
    w1, w2 = ctx.buf(1), ctx.buf(3)
    args = [ctx.buf(0), w1, ctx.buf(2) if has_b1 else w1, w2, ctx.buf(4) if has_b2 else w2, ctx.out(0),
            i32(c), i32(cm), i32(h * w)] + [f32(v) for v in tuple(p1) + tuple(p2)]
    ls = ctx.device.fit_group((GROUP, 1, 1))[:2]
    # the first FC's activation as a define too: EfficientNet's and the MobileNet-style model's
    # SE blocks put a Swish there (unfused they were 3 launches: the mean and two FCs)
    defines = {"SE_ACT1": code1, "SE_ACT2": code2, "HAS_B1": int(has_b1), "HAS_B2": int(has_b2),
               "SE_CAP": _cap(max(c, cm))}
    if ctx.inputs[0].dtype == F16:
        defines["XH"] = 1
    return [Launch("squeeze_excite", "se_squeeze", (ls[0], n), args, ls, defines, ctx.label())]
