"""Dynamic batching as pure functions: which models can batch, and concatenating requests along
their symbolic first dimension and splitting the outputs back (no Ray, no OpenCL).

A model batches when every input and every output starts with the same symbolic dimension
(``N`` of ``data [N,3,224,224] -> logits [N,1000]``): its rows are then independent requests.
Requests whose other dimensions differ (two sequence lengths of a BERT-style model) cannot share
one run, so `group` puts them in separate batches.

    sym = batch_symbol(sess.get_inputs(), sess.get_outputs())
    for idx in group(feeds_list):
        feeds, sizes = concat([feeds_list[i] for i in idx])
        parts = split(outputs, sizes)
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

Feeds = Mapping[str, np.ndarray]


def batch_symbol(inputs: Sequence[Any], outputs: Sequence[Any]) -> Optional[str]:
    """The symbolic first dimension every input and output shares, or None (no batching)."""
    firsts = [a.shape[0] if a.shape else None for a in list(inputs) + list(outputs)]
    sym = firsts[0] if firsts else None
    if not isinstance(sym, str) or sym == "?" or any(f != sym for f in firsts):
        return None
    return sym


def rows(feeds: Feeds) -> int:
    """A request's batch size: the first dimension of its inputs (the same for all of them)."""
    return int(next(iter(feeds.values())).shape[0])


def signature(feeds: Feeds) -> tuple:
    """What two requests must share to run as one batch: each input's dtype and trailing dims."""
    return tuple((name, x.dtype.str, x.shape[1:]) for name, x in sorted(feeds.items()))


def group(items: Sequence[Feeds], max_rows: int) -> list[list[int]]:
    """Indices of `items` in batches: same signature, at most `max_rows` rows each (a request
    with more rows than that runs alone), in arrival order within a batch."""
    open_batches: dict[tuple, list[int]] = {}
    open_rows: dict[tuple, int] = {}
    out: list[list[int]] = []
    for i, feeds in enumerate(items):
        key, n = signature(feeds), rows(feeds)
        if key in open_batches and open_rows[key] + n > max_rows:
            out.append(open_batches.pop(key))
            del open_rows[key]
        if key not in open_batches:
            open_batches[key], open_rows[key] = [], 0
        open_batches[key].append(i)
        open_rows[key] += n
    out.extend(open_batches.values())
    return out


def concat(items: Sequence[Feeds]) -> tuple[dict[str, np.ndarray], list[int]]:
    """One feed of the requests' inputs concatenated along the first dimension, and each one's rows."""
    sizes = [rows(f) for f in items]
    if len(items) == 1:
        return dict(items[0]), sizes
    return {name: np.concatenate([f[name] for f in items], axis=0) for name in items[0]}, sizes


def split(outputs: Mapping[str, np.ndarray], sizes: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """The outputs of a batched run cut back into one dict per request (`sizes` rows each)."""
    total = int(sum(sizes))
    for name, y in outputs.items():
        if y.ndim == 0 or y.shape[0] != total:
            raise ValueError(f"output {name!r} has shape {list(y.shape)}, not {total} rows: the model "
                             "does not keep its batch dimension, so it cannot be batched")
    bounds = np.cumsum([0] + list(sizes))
    return [{name: y[bounds[i]:bounds[i + 1]] for name, y in outputs.items()} for i in range(len(sizes))]


def bucket(n: int, max_rows: int) -> int:
    """The batch size a batch of `n` rows runs at: the next power of two, at most `max_rows`
    (and never below n). Few distinct sizes mean few plans to build and keep per replica."""
    b = 1
    while b < n:
        b *= 2
    return max(n, min(b, max_rows))


def buckets(max_rows: int) -> list[int]:
    """Every size `bucket` can give for batches of 1..max_rows rows (the warm-up sizes)."""
    return sorted({bucket(n, max_rows) for n in range(1, max_rows + 1)})


def pad(feeds: Feeds, total: int) -> dict[str, np.ndarray]:
    """`feeds` grown to `total` rows by repeating the last row (the extra outputs are dropped)."""
    n = rows(feeds)
    if n >= total:
        return dict(feeds)
    return {name: np.concatenate([x, np.repeat(x[-1:], total - n, axis=0)], axis=0) for name, x in feeds.items()}
