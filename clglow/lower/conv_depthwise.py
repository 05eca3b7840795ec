"""The "depthwise" row of CONV_PATHS (lower/conv.py): Cin/groups == 1, groups > 1, as one
kernels_cl/dwconv.cl launch with its epilogue (bias, residual, activation) fused.

KxK convs (3, 5, 7; stride 1 or 2) run dwconv_rows: DW_RT output rows x 16 columns per work-item.
DW_RT is the tunable family "dwconv" (lower/tunable.py), per conv shape: the tuning database's
choice, else ROWS_DEFAULT. Other depthwise convs run dwconv (16 columns of one row).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, List, Optional, Tuple

from ..target import Target
from .base import Buf, Launch, LowerCtx, f32, i32
from .common import F16, ConvGeometry, grid
from .gemm_kernel import act_params
from .tunable import Family, Params, ShapeKey, choose, register

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase

# Output rows per work-item of dwconv_rows (unrolled), the default first: 16 rows ran
# MobileNet-style 0.04 ms faster than 8 but took ~3 s longer to generate at a cold start (11.3-11.8
# s vs 8.1-9.2 s); 4 rows 0.1 ms slower. On 12 EfficientNet/MnasNet/MobileNetV3 depthwise shapes
# (pocl, under load) 4 / 8 / 16 rows summed 1356 / 1077 / 1053 us, 16 best on the 14x14 and 7x7
# maps with many channels, 8 on the 112x112 stride-2 one: a per-shape choice for the search.
ROWS_DEFAULT = 8
ROWS_SPACE = (ROWS_DEFAULT, 4, 16)


def depthwise_applicable(c: "ConvCase") -> Optional[str]:
    return None if c.geom.depthwise else "not depthwise (Cin/groups > 1 or one group)"


def rows_applicable(g: ConvGeometry) -> bool:
    """Whether dwconv_rows runs `g`: square 3x3, 5x5 or 7x7, equal strides of 1 or 2, equal
    dilations, a 16-output tile's input segment at most 64 floats."""
    return (g.kh == g.kw and g.kh in (3, 5, 7) and g.dh == g.dw and g.sh == g.sw and g.sh in (1, 2)
            and 16 * g.sh + (g.kh - 1) * g.dh <= 64)


def dw_launch(target: Target, g: ConvGeometry, rows: Optional[int], x, w, y, *, bias=None, res=None,
              act: str = "", act_alpha: float = 0.0, act_beta: float = 0.0, label: str = "",
              x_half: bool = False, y_half: bool = False) -> Launch:
    """The dwconv.cl launch of conv `g`: dwconv_rows with `rows` output rows per work-item, or
    (rows None) dwconv (x, w, y, bias, res: the arguments of X, W, Y, B, Z; `x_half`, `y_half`:
    X, and Y with Z, stored as half)."""
    act_code, act_p = act_params(act, act_alpha, act_beta)
    defines = {"HAS_BIAS": int(bias is not None), "HAS_RES": int(res is not None)}
    defines.update({k: 1 for k, h in (("XH", x_half), ("YH", y_half)) if h})
    if act_code:
        defines["ACT"] = act_code
    head = [x, w] + ([bias] if bias is not None else []) + ([res] if res is not None else [])
    head += [y, i32(g.cin), i32(g.h), i32(g.w), i32(g.cout)]
    tail = [i32(v) for v in (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.cout // g.cin)] + [f32(p) for p in act_p]
    args = head + [i32(g.oh), i32(g.ow)] + tail
    noop = head + [i32(0), i32(0)] + tail  # OH = OW = 0: returns at once (code generated early)
    if rows is not None:
        # DW_RT output rows x 16 columns per work-item, each input row loaded once for the output
        # rows it serves. DeepLabV3's 5x5 dilation-2 layers on 20x20 (960 channels), profiled on
        # pocl under load: 3.7-3.9 ms on dwconv (element by element: the tile starts in the
        # padding) -> 1.3 ms. MobileNet-style on pocl (AVX-512), A/B in one process: its 7
        # depthwise layers 1.20 -> 0.49 ms; groups of 2 work-items slower than 1.
        defines.update(DW_S=g.sh, DW_K=g.kh, DW_RT=rows, **({"DW_D": g.dh} if g.dh > 1 else {}))
        gsize, ls = grid(target, (-(-g.ow // 16), -(-g.oh // rows), g.n_img * g.cout), (1, 1, 1))
        return Launch("dwconv", "dwconv_rows", gsize, args, ls, defines, label, noop_args=noop)
    # 8 output rows per work-group (the kernel skips rows past OH): a CPU driver pays per
    # group, and pocl left to itself picked groups of a single work-item for most layer shapes
    defines["DW_T"] = 16
    gsize, ls = grid(target, (-(-g.ow // 16), g.oh, g.n_img * g.cout), (1, 8, 1))
    return Launch("dwconv", "dwconv", gsize, args, ls, defines, label, noop_args=noop)


def lower_depthwise(ctx: LowerCtx, c: "ConvCase") -> list:
    """dwconv.cl: every output channel from its one input channel, epilogue included; X, Y and
    the residual as stored (half or float: the conv's HalfIO)."""
    g, e = c.geom, c.epi
    rows = tuned_rows(c.target, g, c.label) if rows_applicable(g) else None
    return [dw_launch(ctx.device, g, rows, ctx.buf(0), ctx.buf(1), ctx.out(0),
                      bias=ctx.buf(2) if e.has_bias else None, res=ctx.buf(3) if e.has_res else None,
                      act=e.act, act_alpha=e.alpha, act_beta=e.beta, label=ctx.label(),
                      x_half=ctx.inputs[0].dtype == F16, y_half=ctx.outputs[0].dtype == F16)]


# --- the tunable family: dwconv_rows' rows per work-item, per depthwise conv shape --------------------
# Shape key: the ConvGeometry's fields. Parameters: {"rows": one of ROWS_SPACE}.
def _space(target: Target, key: ShapeKey) -> List[Params]:
    return [{"rows": r} for r in ROWS_SPACE] if rows_applicable(ConvGeometry(*key)) else []


def _default(target: Target, key: ShapeKey) -> Params:
    return {"rows": ROWS_DEFAULT}


def _bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """Conv shape `key` with `p`'s rows (buffers X, W, B, Y; bias and Relu as a fused layer has)."""
    g = ConvGeometry(*key)
    if not rows_applicable(g) or p.get("rows") not in ROWS_SPACE:
        raise ValueError(f"dwconv_rows does not run {p} on {g}")
    launch = dw_launch(target, g, int(p["rows"]), Buf("X"), Buf("W"), Buf("Y"), bias=Buf("B"), act="Relu")
    return launch, {"X": 4 * g.n_img * g.cin * g.h * g.w, "W": 4 * g.cout * g.kh * g.kw, "B": 4 * g.cout,
                    "Y": 4 * g.n_img * g.cout * g.oh * g.ow}


def _flops(key: ShapeKey) -> float:
    g = ConvGeometry(*key)
    return 2.0 * g.n_img * g.cout * g.kh * g.kw * g.oh * g.ow


DWCONV_FAMILY = register(Family("dwconv", "dwconv", _space, _default, _bench, flops=_flops, priority=3))


def tuned_rows(target: Target, g: ConvGeometry, label: str = "") -> int:
    """This conv's rows per work-item: the tuning database's when it is a point of ROWS_SPACE,
    else ROWS_DEFAULT."""
    p, _ = choose(target, "dwconv", dataclasses.astuple(g), label, valid=lambda q: q.get("rows") in ROWS_SPACE)
    return int(p["rows"])
