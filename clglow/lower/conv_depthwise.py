"""The "depthwise" row of CONV_PATHS (lower/conv.py): Cin/groups == 1, groups > 1, as one
kernels_cl/dwconv.cl launch with its epilogue (bias, residual, activation) fused.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .base import Launch, LowerCtx, f32, i32
from .common import grid
from .gemm_kernel import act_params

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase

# Output rows per work-item of the KxK depthwise kernel (dwconv.cl dwconv_rows, unrolled): 16 rows
# ran MobileNet-style 0.04 ms faster than 8 but took ~3 s longer to generate at a cold start
# (11.3-11.8 s vs 8.1-9.2 s); 4 rows 0.1 ms slower.
_DW_ROWS = 8


def depthwise_applicable(c: "ConvCase") -> Optional[str]:
    return None if c.geom.depthwise else "not depthwise (Cin/groups > 1 or one group)"


def lower_depthwise(ctx: LowerCtx, c: "ConvCase") -> list:
    """dwconv.cl: every output channel from its one input channel, epilogue included."""
    g, e, label = c.geom, c.epi, ctx.label()
    act_code, act_p = act_params(e.act, e.alpha, e.beta)
    defines = {"DW_T": 16, "HAS_BIAS": int(e.has_bias), "HAS_RES": int(e.has_res)}
    if act_code:
        defines["ACT"] = act_code
    args: list = [ctx.buf(0), ctx.buf(1)]
    if e.has_bias:
        args.append(ctx.buf(2))
    if e.has_res:
        args.append(ctx.buf(3))
    head = args + [ctx.out(0), i32(g.cin), i32(g.h), i32(g.w), i32(g.cout)]
    tail = [i32(v) for v in (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.cout // g.cin)] + [f32(p) for p in act_p]
    args = head + [i32(g.oh), i32(g.ow)] + tail
    noop = head + [i32(0), i32(0)] + tail  # OH = OW = 0: returns at once (code generated early)
    if (g.kh == g.kw and g.kh in (3, 5, 7) and g.dh == g.dw and g.sh == g.sw and g.sh in (1, 2)
            and 16 * g.sh + (g.kh - 1) * g.dh <= 64):
        # The usual depthwise KxK (stride 1 or 2, dilation 1 or a few): _DW_ROWS output rows x
        # 16 columns per work-item, each input row loaded once for the output rows it serves.
        # DeepLabV3's 5x5 dilation-2 layers on 20x20 (960 channels), profiled on pocl under
        # load: 3.7-3.9 ms on dwconv (element by element: the tile starts in the padding) ->
        # 1.3 ms.
        # MobileNet-style on pocl (AVX-512), A/B in one process: its 7 depthwise layers
        # 1.20 -> 0.49 ms (the 14x14 one 0.22 -> 0.063, the stride-2 112 -> 56 one 0.19 ->
        # 0.10); groups of 2 work-items slower than 1.
        dw3 = dict(defines, DW_S=g.sh, DW_K=g.kh, DW_RT=_DW_ROWS, **({"DW_D": g.dh} if g.dh > 1 else {}))
        del dw3["DW_T"]
        gsize, ls = grid(ctx.device, (-(-g.ow // 16), -(-g.oh // _DW_ROWS), g.n_img * g.cout), (1, 1, 1))
        return [Launch("dwconv", "dwconv_rows", gsize, args, ls, dw3, label, noop_args=noop)]
    # 8 output rows per work-group (the kernel skips rows past OH): a CPU driver pays per
    # group, and pocl left to itself picked groups of a single work-item for most layer shapes
    gsize, ls = grid(ctx.device, (-(-g.ow // 16), g.oh, g.n_img * g.cout), (1, 8, 1))
    return [Launch("dwconv", "dwconv", gsize, args, ls, defines, label, noop_args=noop)]
