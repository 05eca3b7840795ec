"""passes/fuse_channel_shuffle.py + lower/channel_shuffle.py: ShuffleNetV2's Concat -> Reshape ->
Transpose -> Reshape (-> two channel-half Slices) is one clglow.ChannelShuffle launch; results
against onnxruntime (the whole shuffled tensor, its halves, int64 data, several images), what must
not fuse (another permutation, a Slice that is not a half), and the fallback to the originals."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.ir import Node
from clglow.partition import unfuse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(5)


def _shuffle(n, c, h, w, split=True, perm=(0, 2, 1, 3, 4), halves=True, dtype=T.FLOAT):
    """ShuffleNetV2's block end: y = shuffle(concat(relu(a), b)); with `split` its two halves
    (Slices as torch exports chunk), each through a Relu so that they are not graph outputs."""
    c2 = 2 * c
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             {"s5": [n, 2, c, h, w], "s4": [n, c2, h, w], "z": [0], "m": [c if halves else c - 1],
              "e": [c2], "ax": [1]}.items()]
    first = [helper.make_node("Relu", ["a"], ["ra"])] if dtype == T.FLOAT else [helper.make_node("Identity", ["a"], ["ra"])]
    nodes = first + [helper.make_node("Concat", ["ra", "b"], ["cat"], axis=1),
                     helper.make_node("Reshape", ["cat", "s5"], ["r5"]),
                     helper.make_node("Transpose", ["r5"], ["tr"], perm=list(perm)),
                     helper.make_node("Reshape", ["tr", "s4"], ["y"])]
    if split:
        lo = c if halves else c - 1
        nodes += [helper.make_node("Slice", ["y", "z", "m", "ax"], ["lo"]),
                  helper.make_node("Slice", ["y", "m", "e", "ax"], ["hi"])]
        outs = [helper.make_tensor_value_info("lo", dtype, [n, lo, h, w]),
                helper.make_tensor_value_info("hi", dtype, [n, c2 - lo, h, w])]
    else:
        outs = [helper.make_tensor_value_info("y", dtype, [n, c2, h, w])]
    ins = [helper.make_tensor_value_info(k, dtype, [n, c, h, w]) for k in ("a", "b")]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits), opset_imports=[helper.make_opsetid("", 17)])
    if dtype == T.FLOAT:
        feeds = {k: RNG.standard_normal((n, c, h, w)).astype(np.float32) for k in ("a", "b")}
    else:
        feeds = {k: RNG.integers(-1000, 1000, (n, c, h, w)).astype(np.int64) for k in ("a", "b")}
    return m, feeds


def _run(m, feeds):
    sess = clglow.InferenceSession(m.SerializeToString())
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_array_equal(got, want)
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("n,c,h,w,split", [(1, 24, 28, 28, True), (2, 5, 7, 3, True), (1, 3, 5, 9, False),
                                           (3, 8, 1, 1, True)])
def test_fused(n, c, h, w, split):
    ops = _run(*_shuffle(n, c, h, w, split))
    assert ops.count("ChannelShuffle") == 1 and not {"Concat", "Transpose", "Slice"} & set(ops), ops


def test_fused_int64():
    """Moves bits: an 8-byte element type takes the same kernel."""
    ops = _run(*_shuffle(1, 4, 3, 5, True, dtype=T.INT64))
    assert "ChannelShuffle" in ops, ops


@pytest.mark.parametrize("case", ["perm", "not_halves"])
def test_not_fused(case):
    """Another permutation is no shuffle; a Slice that is not a channel half keeps the Slices
    (the shuffle of the whole tensor still fuses)."""
    if case == "perm":
        ops = _run(*_shuffle(1, 4, 6, 6, True, perm=(0, 1, 2, 4, 3)))
        assert "ChannelShuffle" not in ops and "Transpose" in ops, ops
    else:
        ops = _run(*_shuffle(1, 4, 6, 6, True, halves=False))
        assert ops.count("ChannelShuffle") == 1 and ops.count("Slice") == 2, ops


def test_unfuse_restores_the_originals():
    """The fallback rule: partition.unfuse gives back the Concat, Reshapes, Transpose, Slices."""
    m, _ = _shuffle(1, 4, 6, 6, True)
    sess = clglow.InferenceSession(m.SerializeToString())
    fused = [n for n in sess.graph.nodes if n.op_type == "ChannelShuffle"]
    assert len(fused) == 1 and isinstance(fused[0], Node)
    back = [n.op_type for n in unfuse(sess.graph, {fused[0].name}).nodes]
    assert back.count("Slice") == 2 and back.count("Reshape") == 2 and "Concat" in back and "Transpose" in back, back


def test_half_storage():
    """precision fp16: both inputs and both halves stored as half (the kernel moves 2-byte elements);
    the values are the float32 ones rounded to half."""
    m, feeds = _shuffle(1, 6, 5, 7, True)
    sess = clglow.InferenceSession(m.SerializeToString(), clglow.SessionOptions(precision="fp16"))
    fused = [n for n in sess.graph.nodes if n.op_type == "ChannelShuffle"]
    assert len(fused) == 1
    stored = [sess.graph.values[v].dtype for v in fused[0].inputs + fused[0].outputs]
    assert all(np.dtype(d) == np.float16 for d in stored), stored
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
