"""Concat and Split of up to four small parts as one launch (lower/parts.py, kernels_cl/parts.cl)
vs onnx.reference: widths that are and are not multiples of 16 (the vector and element paths),
element sizes 1, 4 and 8, a decode step's past-key Concat and QKV Split; five parts, a large
tensor or an absent Split output take the per-part copies."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check
    from .run_launches import lower_ctx
except ImportError:
    from harness import check  # type: ignore
    from run_launches import lower_ctx  # type: ignore

RNG = np.random.default_rng(23)


def rand(shape, dtype):
    if dtype == np.bool_:
        return RNG.random(shape) > 0.5
    return (RNG.standard_normal(shape) * 100).astype(dtype)


def _kernels(node, feeds, outs):
    op, lctx = lower_ctx(node, feeds, {}, outs, 17)
    return [ln.kernel for ln in op.lower(lctx)]


CONCATS = [([(1, 4, 63, 64), (1, 4, 1, 64)], -2, np.float32),   # past keys + the new token's
           ([(2, 3), (2, 5), (2, 1)], 1, np.int64),
           ([(3, 7), (1, 7), (2, 7), (4, 7)], 0, np.uint8),
           ([(2, 16, 3), (2, 32, 3)], 1, np.bool_)]


@pytest.mark.parametrize("shapes,axis,dtype", CONCATS, ids=[str(i) for i in range(len(CONCATS))])
def test_concat_one_launch(shapes, axis, dtype):
    feeds = {f"x{i}": rand(s, dtype) for i, s in enumerate(shapes)}
    node = helper.make_node("Concat", list(feeds), ["y"], axis=axis)
    want = np.concatenate(list(feeds.values()), axis=axis)
    assert _kernels(node, feeds, {"y": (want.shape, want.dtype)}) == ["concat_parts"]
    check(node, feeds, expected=[want])


@pytest.mark.parametrize("shape,axis,split,dtype", [((1, 1, 768), 2, [256, 256, 256], np.float32),
                                                    ((5, 9), 1, [2, 3, 4], np.float32),
                                                    ((6, 2, 3), 0, [1, 5], np.int64)])
def test_split_one_launch(shape, axis, split, dtype):
    x = rand(shape, dtype)
    node = helper.make_node("Split", ["x", "s"], [f"y{i}" for i in range(len(split))], axis=axis)
    want = np.split(x, np.cumsum(split)[:-1], axis=axis)
    outs = {f"y{i}": (w.shape, w.dtype) for i, w in enumerate(want)}
    op, lctx = lower_ctx(node, {"x": x}, {"s": np.array(split, np.int64)}, outs, 17)
    assert [ln.kernel for ln in op.lower(lctx)] == ["split_parts"]
    check(node, {"x": x}, {"s": np.array(split, np.int64)}, expected=want)


@pytest.mark.parametrize("shapes", [[(2, 3)] * 5, [(300, 1000), (300, 1000)]])
def test_concat_per_part_otherwise(shapes):
    feeds = {f"x{i}": rand(s, np.float32) for i, s in enumerate(shapes)}
    node = helper.make_node("Concat", list(feeds), ["y"], axis=0)
    want = np.concatenate(list(feeds.values()), axis=0)
    assert "concat_parts" not in _kernels(node, feeds, {"y": (want.shape, want.dtype)})
    check(node, feeds, expected=[want])
