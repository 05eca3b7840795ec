"""Convolution as implicit GEMM on xgemm.cl's local-memory tiles (the GPU family's "xgemm implicit"
row of lower/conv.py's CONV_PATHS).

Why: the "xgemm im2col" row writes im2col panels into scratch and reads them back (Cin/G x KH x KW
times the output's size through global memory, piece by piece, a producer launch per piece). Here
xgemm.cl's B_CONV mode gathers each KWG x NWG slice of B straight from X into local memory (row
k = (ci, kh, kw), column n = (oh, ow); a tap in the padding is a zero by bounds, no padded copy),
so a conv of any stride, dilation and groups is one launch with the weights read in place as A
([Cout/G, Cin/G*KH*KW] per group) and the epilogue (bias, residual, activation) of every GEMM.

Its tile is a point of xgemm's search space (`gpu_gemm.search_space`: work-group size and local
memory within the device's limits; `gathers`: whole B columns per work-item), chosen per conv
shape by the tunable family "xgemm_conv" (lower/tunable.py: the tuning database's entry for the
conv's geometry, else xgemm's default).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, List, Optional, Tuple

import numpy as np

from ..target import Target
from .base import Buf, Launch, LowerCtx
from .common import ConvGeometry
from .gemm_kernel import Bias, Operand
from .gpu_gemm import (MAX_GATHER_INDEX, SEARCH_SPACE, ConvGather, XgemmConfig, search_space, tiled_launch,
                       xgemm_applicable, xgemm_config)
from .tunable import Family, Params, ShapeKey, choose, register

if TYPE_CHECKING:  # pragma: no cover
    from .conv import ConvCase


def implicit_applicable(c: "ConvCase") -> Optional[str]:
    """None when the conv runs as xgemm.cl's implicit GEMM: the GPU family with dedicated local
    memory, a 2-D (or 1-D) conv that is not a plain 1x1 (which reads X in place without a gather)."""
    why = xgemm_applicable(c.target)
    if why:
        return why
    if not isinstance(c.geom, ConvGeometry):
        return "not a 1-D or 2-D conv"
    if not gather_space(c.target):
        return "no xgemm configuration the device runs stages whole B columns per work-item"
    if max(c.geom.kk, c.geom.npix) >= MAX_GATHER_INDEX:
        return f"K or N of {MAX_GATHER_INDEX} or more (the gather's index arithmetic is exact below)"
    return "a 1x1 stride-1 unpadded conv (xgemm pointwise reads X in place)" if c.geom.pointwise else None


def gathers(cfg: XgemmConfig) -> bool:
    """Whether xgemm.cl's B_CONV staging runs on `cfg`: whole B columns per work-item (its
    work-group a multiple of NWG; every point of SEARCH_SPACE is)."""
    return cfg.threads % cfg.nwg == 0


def gather_space(target: Target) -> List[XgemmConfig]:
    """The configurations of xgemm's search space that the device runs and that gather B."""
    return [c for c in search_space(target) if gathers(c)]


def gather(g: ConvGeometry) -> ConvGather:
    """The kernel's view of the conv's shapes."""
    return ConvGather(g.h, g.w, g.kh, g.kw, g.ow, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)


def implicit_launch(cfg: XgemmConfig, g: ConvGeometry, x, w, y, *, bias=None, res=None, act: str = "",
                    act_alpha: float = 0.0, act_beta: float = 0.0, label: str = "", x_half: bool = False,
                    y_half: bool = False, z_half: bool = False) -> Launch:
    """One xgemm.cl B_CONV launch for the whole conv: Y[n, g] = act(W[g] @ gather(X[n, g]) + bias + Z)
    over every image n and group g (x, w, y, bias, res: the kernel arguments of X, W, Y, B, Z;
    x_half, y_half, z_half: X, Y, Z stored as half, xgemm.cl B_HALF, C_HALF, Z_HALF)."""
    c_s1, c_s2 = g.cout * g.npix, g.m * g.npix
    return tiled_launch(
        cfg, m=g.m, n=g.npix, k=g.kk, batch=g.n_img * g.groups, d2=g.groups,
        a=Operand(w, ld=g.kk, ld2=1, s2=g.m * g.kk), b=Operand(x, s1=g.cin * g.hw, s2=g.cin_g * g.hw, half=x_half),
        c=Operand(y, ld=g.npix, s1=c_s1, s2=c_s2, half=y_half),
        bias=Bias(bias, sm=1, sn=0, s2=g.m) if bias is not None else None,
        res=Operand(res, ld=g.npix, s1=c_s1, s2=c_s2, half=z_half) if res is not None else None,
        act=act, act_alpha=act_alpha, act_beta=act_beta, label=label, conv=gather(g))


def lower_implicit(ctx: LowerCtx, c: "ConvCase") -> list:
    """The conv node as one implicit-GEMM launch (its tile from the "xgemm_conv" family)."""
    g, e = c.geom, c.epi
    cfg = tuned_conv_config(c.target, g, c.label)
    return [implicit_launch(cfg, g, ctx.buf(0), ctx.buf(1), ctx.out(0), bias=ctx.buf(2) if e.has_bias else None,
                            res=ctx.buf(3) if e.has_res else None, act=e.act, act_alpha=e.alpha, act_beta=e.beta,
                            label=ctx.label(), x_half=_stored_half(ctx.inputs[0]),
                            y_half=_stored_half(ctx.outputs[0]), z_half=e.has_res and _stored_half(ctx.inputs[3]))]


def _stored_half(t) -> bool:
    """Whether tensor info `t` is stored as half (passes/precision.py)."""
    return np.dtype(t.dtype) == np.float16


# --- the tunable family: xgemm.cl's configuration per conv shape ----------------------------------------------
# Shape key: the ConvGeometry's fields (conv_key). Parameters: {"cfg": XgemmConfig.as_tuple()}.
def conv_key(g: ConvGeometry) -> ShapeKey:
    return dataclasses.astuple(g)


def _space(target: Target, key: ShapeKey = ()) -> List[Params]:
    first = _default(target, key)
    return [first] + [{"cfg": c.as_tuple()} for c in gather_space(target) if {"cfg": c.as_tuple()} != first]


def _default(target: Target, key: ShapeKey) -> Params:
    """xgemm's configuration for the device (its tuned one) when it gathers, else the first that does."""
    cfg = xgemm_config(target)
    if cfg is None or not gathers(cfg):
        cfg = (gather_space(target) or list(SEARCH_SPACE))[0]
    return {"cfg": cfg.as_tuple()}


def _bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """The implicit GEMM of conv shape `key` with configuration `p` (buffers X, W, B, Y)."""
    g = ConvGeometry(*key)
    cfg = XgemmConfig.from_tuple(p["cfg"])
    launch = implicit_launch(cfg, g, Buf("X"), Buf("W"), Buf("Y"), bias=Buf("B"), act="Relu")
    return launch, {"X": 4 * g.n_img * g.cin * g.hw, "W": 4 * g.cout * g.kk, "B": 4 * g.cout,
                    "Y": 4 * g.n_img * g.cout * g.npix}


def _flops(key: ShapeKey) -> float:
    g = ConvGeometry(*key)
    return 2.0 * g.n_img * g.cout * g.kk * g.npix


XGEMM_CONV_FAMILY = register(Family("xgemm_conv", "xgemm", _space, _default, _bench, flops=_flops,
                                    applies=lambda target: xgemm_applicable(target) is None, priority=0))


def tuned_conv_config(target: Target, g: ConvGeometry, label: str = "") -> XgemmConfig:
    """The tile of this conv's implicit GEMM: the tuning database's when the device runs it, else
    xgemm's default (callers check `implicit_applicable` first: some configuration fits)."""
    def ok(p: Params) -> bool:
        try:
            cfg = XgemmConfig.from_tuple(p["cfg"])
            return cfg.why_not(target) is None and gathers(cfg)
        except (KeyError, TypeError, ValueError):
            return False

    p, _ = choose(target, "xgemm_conv", conv_key(g), label, valid=ok)
    return XgemmConfig.from_tuple(p["cfg"])


__all__ = ["gathers", "gather_space", "implicit_applicable", "implicit_launch", "lower_implicit", "tuned_conv_config",
           "XGEMM_CONV_FAMILY"]
