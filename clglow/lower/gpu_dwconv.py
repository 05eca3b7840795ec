"""Depthwise convolution with local-memory halos (kernels_cl/gpu_dwconv.cl): the GPU family's
"gpu depthwise" row of lower/conv.py's CONV_PATHS.

Why: dwconv.cl (the "depthwise" row) gives each work-item a run of outputs read straight from
global memory, every input read by up to KH x KW work-items, in groups shaped for a CPU driver.
On a GPU with dedicated local memory a work-group computes a tile of output pixels of one plane,
stages the tile's input window (its halo included, the padding as zeros) in local memory once,
and each work-item computes several outputs from it: global memory is read about once per input.

The tile (TW x TH outputs) and the work-group shape (WX x WY) are a point of SEARCH_SPACE, each
filtered by the device's limits (work-group size, work-item sizes, local memory for this conv's
window); the tunable family "gpu_dwconv" (lower/tunable.py) picks one per conv shape: the tuning
database's entry, else the first point whose tile wastes little on the map (`_default`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Tuple

import numpy as np

from ..target import Target
from .base import Buf, Launch, LowerCtx, f32, i32
from .common import ConvGeometry
from .gemm_kernel import act_params
from .tunable import Family, Params, ShapeKey, choose, register

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase


@dataclass(frozen=True)
class DwTile:
    """One point of gpu_dwconv.cl's space: TW x TH outputs per work-group of WX x WY work-items."""

    tw: int
    th: int
    wx: int
    wy: int

    def window(self, g: ConvGeometry) -> Tuple[int, int]:
        """(IH, IW): the input window of one tile of `g`'s outputs, halo included."""
        return ((self.th - 1) * g.sh + (g.kh - 1) * g.dh + 1, (self.tw - 1) * g.sw + (g.kw - 1) * g.dw + 1)

    def why_not(self, target: Target, g: ConvGeometry) -> Optional[str]:
        """None when `target` can run this point on `g`, else why not."""
        if self.tw % self.wx or self.th % self.wy:
            return f"tile {self.tw}x{self.th} is not whole work-groups of {self.wx}x{self.wy}"
        if self.wx * self.wy > target.max_work_group_size:
            return f"{self.wx * self.wy} work-items exceed the device's work-group limit {target.max_work_group_size}"
        sizes = tuple(target.max_work_item_sizes) + (1, 1)
        if self.wx > sizes[0] or self.wy > sizes[1]:
            return f"local size {(self.wx, self.wy)} exceeds the device's work-item sizes {target.max_work_item_sizes}"
        ih, iw = self.window(g)
        if 4 * ih * iw > target.local_mem_size:
            return f"a {ih}x{iw} input window exceeds the device's {target.local_mem_size} bytes of local memory"
        return None

    def waste(self, g: ConvGeometry) -> float:
        """Outputs computed per output stored (the last tiles' overhang)."""
        return (-(-g.ow // self.tw) * self.tw * -(-g.oh // self.th) * self.th) / max(1, g.ow * g.oh)


# The declared space, the usual choice first: a 32 x 8 tile of one output per work-item in
# 256-item groups; two and four rows per item (registers reused, fewer halo rows per output);
# narrower tiles for small maps (14x14, 7x7) and 64-item groups for small work-group limits; a
# single row for 1-D convs.
SEARCH_SPACE = (
    DwTile(32, 8, 32, 8),
    DwTile(32, 16, 32, 8),
    DwTile(32, 32, 32, 8),
    DwTile(64, 8, 32, 8),
    DwTile(16, 16, 16, 8),
    DwTile(16, 16, 16, 16),
    DwTile(16, 8, 16, 8),
    DwTile(8, 8, 8, 8),
    DwTile(64, 1, 64, 1),  # one row: 1-D convs (H = 1)
)


def search_space(target: Target, g: ConvGeometry) -> List[DwTile]:
    """The points of SEARCH_SPACE this device runs on conv `g`, in order."""
    return [t for t in SEARCH_SPACE if t.why_not(target, g) is None]


def depthwise_applicable(c: "ConvCase") -> Optional[str]:
    """None when the conv runs as gpu_dwconv.cl: depthwise, the GPU family, dedicated local memory
    (pocl's is emulated in global memory: dwconv.cl there) and a point that fits the device."""
    if c.target.is_cpu_family:
        return "the CPU family (dwconv.cl's rows per work-item)"
    if not c.target.has_local_memory:
        return f"no dedicated local memory (type {c.target.local_mem_type!r})"
    if not isinstance(c.geom, ConvGeometry) or not c.geom.depthwise:
        return "not a depthwise 1-D or 2-D conv (Cin/groups > 1 or one group)"
    return None if search_space(c.target, c.geom) else "no tile fits the device's work-group and local memory"


def dw_launch(tile: DwTile, g: ConvGeometry, x, w, y, *, bias=None, res=None, act: str = "", act_alpha: float = 0.0,
              act_beta: float = 0.0, label: str = "", x_half: bool = False, y_half: bool = False) -> Launch:
    """The gpu_dwconv.cl launch of conv `g` (x, w, y, bias, res: the arguments of X, W, Y, B, Z;
    x_half: X stored as half, y_half: Y and Z, gpu_dwconv.cl XH / YH)."""
    act_code, act_p = act_params(act, act_alpha, act_beta)
    defines = {"TW": tile.tw, "TH": tile.th, "WX": tile.wx, "WY": tile.wy, "KH": g.kh, "KW": g.kw, "SH": g.sh,
               "SW": g.sw, "DH": g.dh, "DW": g.dw}
    defines.update({name: 1 for name, h in (("XH", x_half), ("YH", y_half)) if h})
    if act_code:
        defines["ACT"] = act_code
    flags = (1 if bias is not None else 0) | (2 if res is not None else 0)
    head = [x, w, y, bias if bias is not None else y, res if res is not None else y, i32(g.cin), i32(g.h), i32(g.w),
            i32(g.cout)]
    tail = [i32(g.ph), i32(g.pw), i32(g.cout // g.cin), i32(flags)] + [f32(p) for p in act_p]
    gsize = (-(-g.ow // tile.tw) * tile.wx, -(-g.oh // tile.th) * tile.wy, g.n_img * g.cout)
    return Launch("gpu_dwconv", "dw_tile", gsize, head + [i32(g.oh), i32(g.ow)] + tail, (tile.wx, tile.wy, 1),
                  defines, label, noop_args=head + [i32(0), i32(0)] + tail)  # OH = OW = 0: returns at once


def lower_depthwise(ctx: LowerCtx, c: "ConvCase") -> list:
    """The depthwise conv as one gpu_dwconv.cl launch, its tile from the "gpu_dwconv" family."""
    g, e = c.geom, c.epi
    tile = tuned_tile(c.target, g, c.label)
    return [dw_launch(tile, g, ctx.buf(0), ctx.buf(1), ctx.out(0), bias=ctx.buf(2) if e.has_bias else None,
                      res=ctx.buf(3) if e.has_res else None, act=e.act, act_alpha=e.alpha, act_beta=e.beta,
                      label=ctx.label(), x_half=np.dtype(ctx.inputs[0].dtype) == np.float16,
                      y_half=np.dtype(ctx.outputs[0].dtype) == np.float16)]


# --- the tunable family: the tile per depthwise conv shape ----------------------------------------------------
# Shape key: the ConvGeometry's fields. Parameters: {"tile": (TW, TH, WX, WY)}.
def _space(target: Target, key: ShapeKey) -> List[Params]:
    first = _default(target, key)
    return [first] + [{"tile": dataclasses.astuple(t)} for t in search_space(target, ConvGeometry(*key))
                      if {"tile": dataclasses.astuple(t)} != first]


def _default(target: Target, key: ShapeKey) -> Params:
    """The first point whose tiles overhang the map by at most a quarter, else the least wasteful
    (a 7x7 map in 32x8 tiles would compute five outputs per one stored)."""
    g = ConvGeometry(*key)
    space = search_space(target, g) or [SEARCH_SPACE[-1]]
    fits = [t for t in space if t.waste(g) <= 1.25]
    best = fits[0] if fits else min(space, key=lambda t: t.waste(g))
    return {"tile": dataclasses.astuple(best)}


def _bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """Conv shape `key` with tile `p` (buffers X, W, B, Y; bias and Relu as a fused layer has)."""
    g = ConvGeometry(*key)
    tile = DwTile(*(int(v) for v in p["tile"]))
    why = tile.why_not(target, g)
    if why:
        raise ValueError(why)
    launch = dw_launch(tile, g, Buf("X"), Buf("W"), Buf("Y"), bias=Buf("B"), act="Relu")
    return launch, {"X": 4 * g.n_img * g.cin * g.hw, "W": 4 * g.cout * g.kh * g.kw, "B": 4 * g.cout,
                    "Y": 4 * g.n_img * g.cout * g.npix}


def _flops(key: ShapeKey) -> float:
    g = ConvGeometry(*key)
    return 2.0 * g.n_img * g.cout * g.kh * g.kw * g.npix


def _applies(target: Target) -> bool:
    return not target.is_cpu_family and target.has_local_memory


GPU_DWCONV_FAMILY = register(Family("gpu_dwconv", "gpu_dwconv", _space, _default, _bench, flops=_flops,
                                    applies=_applies, priority=3))


def tuned_tile(target: Target, g: ConvGeometry, label: str = "") -> DwTile:
    """This conv's tile: the tuning database's when the device runs it on `g`, else `_default`'s."""
    def ok(p: Params) -> bool:
        try:
            return DwTile(*(int(v) for v in p["tile"])).why_not(target, g) is None
        except (KeyError, TypeError, ValueError):
            return False

    p, _ = choose(target, "gpu_dwconv", dataclasses.astuple(g), label, valid=ok)
    return DwTile(*(int(v) for v in p["tile"]))


__all__ = ["DwTile", "SEARCH_SPACE", "search_space", "depthwise_applicable", "dw_launch", "lower_depthwise",
           "tuned_tile", "GPU_DWCONV_FAMILY"]
