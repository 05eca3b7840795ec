"""Dynamic batching's pure half (clglow.serve.batching) against numpy slicing."""
from __future__ import annotations

import numpy as np
import pytest

from clglow.serve.batching import batch_symbol, concat, group, split


class Arg:
    def __init__(self, shape):
        self.shape = shape


def test_batch_symbol_needs_one_symbol_on_every_input_and_output():
    assert batch_symbol([Arg(["N", 3]), Arg(["N"])], [Arg(["N", 10])]) == "N"
    assert batch_symbol([Arg([1, 3])], [Arg([1, 10])]) is None
    assert batch_symbol([Arg(["N", 3])], [Arg(["M", 10])]) is None
    assert batch_symbol([Arg(["N", 3])], [Arg([])]) is None
    assert batch_symbol([Arg(["?", 3])], [Arg(["?", 3])]) is None


def _req(rows: int, seq: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"ids": rng.integers(0, 9, (rows, seq)), "x": rng.random((rows, 4), np.float32)}


def test_group_keeps_signatures_apart_and_caps_rows():
    items = [_req(2, 5, 0), _req(3, 7, 1), _req(2, 5, 2), _req(1, 5, 3), _req(9, 5, 4)]
    batches = group(items, max_rows=5)
    assert sorted(i for b in batches for i in b) == list(range(5))
    for b in batches:
        assert len({items[i]["ids"].shape[1] for i in b}) == 1
        assert sum(items[i]["ids"].shape[0] for i in b) <= 5 or len(b) == 1
    assert [0, 2, 3] in batches and [1] in batches and [4] in batches


@pytest.mark.parametrize("sizes", [[1], [2, 1, 3], [1] * 8])
def test_concat_then_split_gives_each_request_its_rows(sizes):
    items = [_req(n, 5, i) for i, n in enumerate(sizes)]
    feeds, got_sizes = concat(items)
    assert got_sizes == sizes and feeds["x"].shape[0] == sum(sizes)
    outs = {"y": feeds["x"] * 2.0, "ids": feeds["ids"]}  # a row-wise "model"
    for item, part in zip(items, split(outs, sizes)):
        np.testing.assert_array_equal(part["y"], item["x"] * 2.0)
        np.testing.assert_array_equal(part["ids"], item["ids"])


def test_split_refuses_outputs_without_the_batch_rows():
    with pytest.raises(ValueError, match="does not keep its batch dimension"):
        split({"y": np.zeros((1, 3))}, [2, 1])


def test_buckets_are_powers_of_two_up_to_the_cap():
    from clglow.serve.batching import bucket, buckets, pad

    assert [bucket(n, 32) for n in (1, 2, 3, 5, 17, 32)] == [1, 2, 4, 8, 32, 32]
    assert bucket(40, 32) == 40 and buckets(12) == [1, 2, 4, 8, 12]
    item = _req(3, 5, 0)
    grown = pad(item, 8)
    np.testing.assert_array_equal(grown["x"][:3], item["x"])
    np.testing.assert_array_equal(grown["x"][3:], np.repeat(item["x"][-1:], 5, axis=0))
