"""The "gemv" tunable family (lower/gemv.py, kernels_cl/gemv.cl): panel width VW, unroll KU,
panels per work-item PP and work-group size per (K, N). Every point's benchmark launch computes
x @ W + b against numpy on ragged shapes (N not a multiple of VW * PP: work-items whose later
panels lie past the last one; K not a multiple of KU), a tuning-database hit sets the defines of a
MatMul's launch, and a stored point outside the space falls back to the default."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:
    from .harness import check, device_info, lower
    from .run_launches import execute
except ImportError:  # run as a plain module
    from harness import check, device_info, lower  # type: ignore
    from run_launches import execute  # type: ignore

from clglow.lower.gemm_kernel import pack_b
from clglow.lower.gemv import KU_SPACE, LS_SPACE, PP_SPACE, widths
from clglow.lower.tunable import FAMILIES, key_str

RNG = np.random.default_rng(23)
SHAPES = [(37, 70), (64, 16), (9, 200), (300, 1)]  # (K, N)


@pytest.mark.parametrize("k,n", SHAPES, ids=[f"{k}x{n}" for k, n in SHAPES])
def test_every_point_computes_the_product(k, n):
    """Each point's benchmark launch (what the search times), weights packed as lowering packs them."""
    target, key = device_info().with_family("cpu"), (k, n)
    family = FAMILIES["gemv"]
    space = family.space(target, key)
    assert space[0] == family.default(target, key)
    assert len(space) == len(widths(target)) * len(KU_SPACE) * len(PP_SPACE) * len(LS_SPACE)
    x = RNG.standard_normal(k).astype(np.float32)
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    want = x.astype(np.float64) @ w + b
    for p in space:
        launch, sizes = family.bench(target, key, p)
        assert launch.kernel == "gemv" and (launch.defines["VW"], launch.defines["KU"], launch.defines["PP"]) == (
            p["vw"], p["ku"], p["pp"])
        packed = np.asarray(pack_b(w, p["vw"]), np.float32)
        assert packed.nbytes == sizes["W"]
        got = execute([launch], {"X": x, "W": packed, "B": b}, {"Y": np.empty(n, np.float32)})["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(p))


@pytest.mark.parametrize("stored,want", [({"vw": 8, "ku": 2, "pp": 4, "ls": 8}, (8, 2, 4)),
                                         ({"vw": 5, "ku": 2, "pp": 4, "ls": 8}, None)])
def test_database_hit_sets_the_defines(stored, want):
    """A stored point of the space is lowered with; a stale one (width 5) gives the default; both
    compute the product."""
    k, n = 40, 75
    x, w = RNG.standard_normal((1, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    base = device_info().with_family("cpu")
    if want is not None and stored["vw"] not in widths(base):
        pytest.skip("the device's preferred width is below 8")
    target = dataclasses.replace(base, tuned=(("gemv", key_str((k, n)), tuple(sorted(stored.items()))),))
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    launches = lower(node, {"x": x}, {"w": w}, {"y": ((1, n), np.float32)}, device=target)
    default = FAMILIES["gemv"].default(target, (k, n))
    expect = want or (default["vw"], default["ku"], default["pp"])
    assert [(ln.kernel, ln.defines["VW"], ln.defines["KU"], ln.defines["PP"]) for ln in launches] == [
        ("gemv",) + tuple(expect)]
    check(node, {"x": x}, {"w": w}, expected=[x @ w], device=target)


@pytest.mark.parametrize("point", [{"width": 0, "ku": 8, "pp": 4, "ls": 8}, {"width": -1, "ku": 2, "pp": 2, "ls": 1}],
                         ids=["widest", "narrowest"])
def test_prologue_and_epilogue_under_other_points(point, monkeypatch):
    """A FusedMatMul with the LayerNormalization prologue and an elementwise epilogue (tanh(2 y)) at
    stored points with PP > 1 (x normalised once for PP panels; a partial last group of panels).
    The CPU family pinned (the harness's support check reads CLGLOW_TARGET: the GEMV's prologue
    is the CPU family's only)."""
    monkeypatch.setenv("CLGLOW_TARGET", "cpu")
    k, n = 50, 7 * 16 + 3
    base = device_info().with_family("cpu")
    point = dict(point, vw=widths(base)[point["width"]])
    del point["width"]
    x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((1, k), (k, n), (n,)))
    g, beta = RNG.standard_normal(k).astype(np.float32), RNG.standard_normal(k).astype(np.float32)
    # a prologue's product is keyed (K, N, 1): its groups normalise x once each
    target = dataclasses.replace(base, tuned=(("gemv", key_str((k, n, 1)), tuple(sorted(point.items()))),))
    node = helper.make_node("FusedMatMul", ["x", "w", "b", "", "g", "beta"], ["y"], domain="clglow",
                            ln_epsilon=1e-5, epilogue="TANH(ADD(X0,X0))")
    launches = lower(node, {"x": x}, {"w": w, "b": b, "g": g, "beta": beta}, {"y": ((1, n), np.float32)},
                     device=target)
    assert [(ln.defines["PP"], "LN_PRO" in ln.defines, ln.lsize) for ln in launches] == [(point["pp"], True, (point["ls"],))]
    xd = x.astype(np.float64)
    xn = (xd - xd.mean()) / np.sqrt(xd.var() + 1e-5) * g + beta
    want = np.tanh(2 * (xn @ w + b)).astype(np.float32)
    check(node, {"x": x}, {"w": w, "b": b, "g": g, "beta": beta}, expected=[want], device=target)
