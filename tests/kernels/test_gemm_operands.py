"""The gemm_operands tunable family (lower/gemm.py): whether a live MatMul / Gemm operand is packed
at run time or read where it lies. Every point of the space, stored as the tuning database's
choice, is lowered with (the pack launches and gemm.cl's A_PACKED / B_PACKED follow it) and
computes the product against numpy; a stored point outside the space gives the default; the
one-node model the search measures is the product. The CPU family is pinned (its heuristics are
the defaults under test); no dependence on the tuning database."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower
except ImportError:
    from harness import check, device_info, lower  # type: ignore

from clglow.lower.gemm import OPERANDS_FAMILY_NAME, operands_key
from clglow.lower.tunable import FAMILIES, key_str, params_items

RNG = np.random.default_rng(41)
# (M, K, N): ragged everywhere; a row pitch of 1024 floats (4 KiB: the heuristics pack A there)
# and a B pitch of 512 (2 KiB: conflicting_pitch packs B); a narrow ragged B (packed only)
SHAPES = [(70, 37, 300), (64, 1024, 512), (53, 40, 21)]


def _cpu():
    return device_info().with_family("cpu")


def _stored(target, key, point):
    return dataclasses.replace(target, tuned=((OPERANDS_FAMILY_NAME, key_str(key), params_items(point)),))


def _paths(launches: list) -> dict:
    """What the launches did with each operand: packed at run time or read in place."""
    gemm = [ln for ln in launches if ln.kernel == "gemm"]
    assert len(gemm) == 1
    d = gemm[0].defines
    kernels = [ln.kernel for ln in launches]
    return {"a": "packed" if d["A_PACKED"] else "strided", "b": "packed" if d["B_PACKED"] else "inplace",
            "packs": sorted(k for k in kernels if k != "gemm")}


@pytest.mark.parametrize("m,k,n", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("live", ["ab", "a", "b"])
def test_every_point_is_lowered_and_right(m, k, n, live):
    """Each point of the space, stored, is the path the launches take, and the product is right."""
    target = _cpu()
    key = operands_key(m, n, k, "a" in live, "b" in live)
    family = FAMILIES[OPERANDS_FAMILY_NAME]
    space = family.space(target, key)
    assert space[0] == family.default(target, key)
    assert len(space) == len({params_items(p) for p in space})
    assert all(set(p) == set(live) for p in space)
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    feeds = {name: v for name, v in (("a", a), ("b", b)) if name in live}
    consts = {name: v for name, v in (("a", a), ("b", b)) if name not in live}
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    want = a.astype(np.float64) @ b
    for point in space:
        dev = _stored(target, key, point)
        got = _paths(lower(node, feeds, consts, {"y": ((m, n), np.float32)}, device=dev))
        for name in live:
            assert got[name] == point[name], (point, got)
        want_packs = sorted((["pack_rows"] if point.get("a") == "packed" else [])
                            + (["pack_b"] if point.get("b") == "packed" else []))
        assert got["packs"] == want_packs, (point, got)
        check(node, feeds, consts, expected=[want.astype(np.float32)], device=dev)


def test_defaults_follow_the_heuristics():
    """The default packs A at a 4 KiB row pitch and B at a 2 KiB one, reads them in place
    elsewhere, and packs a narrow ragged B (the only point its space has)."""
    target = _cpu()
    family = FAMILIES[OPERANDS_FAMILY_NAME]
    assert family.default(target, operands_key(64, 512, 1024, True, True)) == {"a": "packed", "b": "packed"}
    assert family.default(target, operands_key(70, 300, 37, True, True)) == {"a": "strided", "b": "inplace"}
    assert family.space(target, operands_key(53, 21, 40, False, True)) == [{"b": "packed"}]


@pytest.mark.parametrize("point", [{"b": "inplace"}, {"a": "packed"}, {"b": "sideways"}], ids=str)
def test_a_stale_point_gives_the_default(point):
    """B in place where gemm.cl cannot read it (narrow ragged), a path for an operand that is
    constant, an unknown path: the default's launches, and the right product."""
    m, k, n = 53, 40, 21
    target = _cpu()
    key = operands_key(m, n, k, False, True)
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    dev = _stored(target, key, point)
    got = _paths(lower(node, {"b": b}, {"a": a}, {"y": ((m, n), np.float32)}, device=dev))
    assert got["b"] == "packed" and got["packs"] == ["pack_b"]
    check(node, {"b": b}, {"a": a}, expected=[(a.astype(np.float64) @ b).astype(np.float32)], device=dev)


def test_gemm_node_takes_the_stored_paths():
    """A Gemm with live, untransposed operands (and a bias) takes the family's choice as MatMul does."""
    m, k, n = 40, 64, 200
    target = _cpu()
    key = operands_key(m, n, k, True, True)
    default = FAMILIES[OPERANDS_FAMILY_NAME].default(target, key)
    point = {"a": "packed" if default["a"] == "strided" else "strided",
             "b": "packed" if default["b"] == "inplace" else "inplace"}
    dev = _stored(target, key, point)
    a, b, c = (RNG.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (n,)))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5)
    got = _paths(lower(node, {"a": a, "b": b, "c": c}, {}, {"y": ((m, n), np.float32)}, device=dev))
    assert (got["a"], got["b"]) == (point["a"], point["b"])
    check(node, {"a": a, "b": b, "c": c}, expected=[(0.5 * (a.astype(np.float64) @ b) + c).astype(np.float32)],
          device=dev)


def test_the_search_measures_every_point():
    """measure_node (what `clglow tune` runs for this family) times every point of a small live x
    live product on the device, each checked against the default's output."""
    from clglow.runtime.device import select_device
    from clglow.runtime.node_bench import MODELS, measure_node

    dev = select_device()
    target = dev.target("cpu")
    key = operands_key(70, 300, 37, True, True)
    model = MODELS[OPERANDS_FAMILY_NAME](key)
    assert [i.name for i in model.graph.input] == ["A", "B"] and not model.graph.initializer
    points = FAMILIES[OPERANDS_FAMILY_NAME].space(target, key)
    times = measure_node(dev, target, OPERANDS_FAMILY_NAME, key, points, rounds=1)
    assert sorted(times) == list(range(len(points))) and all(t > 0 for t in times.values())
