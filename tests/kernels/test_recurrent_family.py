"""The "recurrent" tunable family (lower/recurrent.py, kernels_cl/recurrent.cl): the CPU family's
streamed path's units per work-item VU, k chains KS and batch rows per work-group BB per
(op, hidden, batch, directions, steps, linear_before_reset). Every point of the space, lowered
from a tuning-database entry, against onnx.reference (ragged hidden sizes: a partial last vector;
batches that leave a partial last group of rows; both directions); a stale entry falls back to the
default; the benchmark launch is the lowering's launch; the default's chains fit the accumulator
budget."""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import lower, run
    from .run_launches import device_info
    from .test_recurrent import OUTS, case, node, split
except ImportError:  # pragma: no cover
    from harness import lower, run  # type: ignore
    from run_launches import device_info  # type: ignore
    from test_recurrent import OUTS, case, node, split  # type: ignore

from clglow.lower import recurrent as rec
from clglow.lower.tunable import FAMILIES, key_str


def _target(key: tuple, point: dict = None):
    """The test device under the CPU family, with `point` as its database entry for `key`."""
    base = device_info().with_family("cpu")
    if point is None:
        return base
    return dataclasses.replace(base, tuned=(("recurrent", key_str(key), tuple(sorted(point.items()))),))


def _node_case(op: str, hidden: int, batch: int, direction: str, lbr: int = 0):
    names, feeds = case(op, seq=4, batch=batch, inp=5, hidden=hidden, direction=direction, states=True,
                        peep=op == "LSTM")
    attrs = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    ndir = 2 if direction == "bidirectional" else 1
    return node(op, names, OUTS[op], **attrs), feeds, (op, hidden, batch, ndir, 4, lbr)


def _lowered(n, feeds, target) -> "rec.Launch":
    live, consts = split(feeds)
    nd = 2 if any(a.name == "direction" and a.s == b"bidirectional" for a in n.attribute) else 1
    x = live["X"]
    seq, batch, hidden = x.shape[0], x.shape[1], consts["R"].shape[-1]
    outs = {"Y": ((seq, nd, batch, hidden), np.float32), "Y_h": ((nd, batch, hidden), np.float32),
            "Y_c": ((nd, batch, hidden), np.float32)}
    launches = lower(n, live, consts, {o: outs[o] for o in n.output if o}, opset=14, device=target)
    return next(ln for ln in launches if ln.kernel == "recurrent")


CASES = [("LSTM", 37, 5, "forward", 0), ("GRU", 21, 3, "bidirectional", 1), ("GRU", 40, 9, "reverse", 0),
         ("RNN", 19, 6, "forward", 0)]


def _points_match(op, hidden, batch, direction, lbr, pick) -> None:
    """The points `pick(space)` of the declared space, each as a database entry, lower with their
    defines and compute the node as onnx.reference does."""
    n, feeds, key = _node_case(op, hidden, batch, direction, lbr)
    family = FAMILIES["recurrent"]
    space = family.space(_target(key), key)
    assert space[0] == family.default(_target(key), key)
    assert len(space) == len({tuple(sorted(p.items())) for p in space})
    live, consts = split(feeds)
    for p in pick(space):
        target = _target(key, p)
        ln = _lowered(n, feeds, target)
        assert (ln.defines["VU"], ln.defines["KS"], ln.defines["BB"]) == (p["vu"], p["ks"], p["bb"]), p
        got, exp = run(n, live, consts, opset=14, device=target)
        for g, e in zip(got, exp):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=str(p))


SAMPLED = 9  # points a case checks besides the default (27-36 in each space, a build each)


@pytest.mark.slow
@pytest.mark.parametrize("op,hidden,batch,direction,lbr", CASES)
def test_sampled_points_match_the_reference(op, hidden, batch, direction, lbr):
    """The default and SAMPLED points of the space drawn with a seed of the case (each a program
    build: every point of every case took 3 minutes of CI; the cases draw different points, and
    test_corner_points_match_the_reference takes the extremes)."""
    def sample(space):
        rng = np.random.default_rng(zlib.crc32(repr((op, hidden, batch, direction, lbr)).encode()))
        rest = space[1:]
        return [space[0]] + [rest[i] for i in rng.choice(len(rest), min(SAMPLED, len(rest)), replace=False)]
    _points_match(op, hidden, batch, direction, lbr, sample)


@pytest.mark.parametrize("op,hidden,batch,direction,lbr", CASES[:2])
def test_corner_points_match_the_reference(op, hidden, batch, direction, lbr):
    """The narrowest vector with the most chains and the most rows, and the widest with one chain
    and one row (the quick subset of the test above)."""
    def corners(space):
        lo = min(space, key=lambda p: (p["vu"], -p["ks"], -p["bb"]))
        hi = max(space, key=lambda p: (p["vu"], -p["ks"], -p["bb"]))
        return [lo, hi]
    _points_match(op, hidden, batch, direction, lbr, corners)


def test_stale_entry_falls_back_to_the_default():
    """A stored point outside the space (a width of 5, more rows than the batch needs) is ignored."""
    n, feeds, key = _node_case("LSTM", 24, 2, "forward")
    default = FAMILIES["recurrent"].default(_target(key), key)
    for stale in ({"vu": 5, "ks": 1, "bb": 1}, {"vu": default["vu"], "ks": 1, "bb": 64}, {"vu": 4, "ks": 3, "bb": 1}):
        ln = _lowered(n, feeds, _target(key, stale))
        assert (ln.defines["VU"], ln.defines["KS"], ln.defines["BB"]) == (default["vu"], default["ks"], default["bb"])


@pytest.mark.parametrize("op,hidden,batch,direction,lbr", CASES[:2])
def test_bench_launch_is_the_lowered_launch(op, hidden, batch, direction, lbr):
    """What the search times is what the node runs: same program, defines, sizes and argument count."""
    n, feeds, key = _node_case(op, hidden, batch, direction, lbr)
    p = FAMILIES["recurrent"].space(_target(key), key)[-1]
    ln = _lowered(n, feeds, _target(key, p))
    bench, sizes = FAMILIES["recurrent"].bench(_target(key), key, p)
    assert (bench.program, bench.kernel, bench.gsize, bench.lsize) == (ln.program, ln.kernel, ln.gsize, ln.lsize)
    assert len(bench.args) == len(ln.args)
    assert bench.defines == ln.defines
    vu = p["vu"]
    assert sizes["R"] == 4 * key[3] * rec.GATES[op] * -(-hidden // vu) * vu * hidden


def test_default_chains_fit_the_accumulators():
    """The default's accumulators (gates x rows x chains vectors) stay within ACC_VECTORS, with
    the most chains that do; the GPU family is not searched."""
    for gates in (1, 3, 4):
        for bb in (1, 2, 4, 8):
            ks = rec.default_ks(gates, bb)
            assert ks in rec.KS_SPACE
            assert gates * bb * ks <= rec.ACC_VECTORS or ks == 1
            assert all(gates * bb * k > rec.ACC_VECTORS for k in rec.KS_SPACE if k > ks)
    assert FAMILIES["recurrent"].applies(device_info().with_family("cpu"))
    assert not FAMILIES["recurrent"].applies(device_info().with_family("gpu"))
