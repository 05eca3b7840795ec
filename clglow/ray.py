"""clglow in Ray Data: `Predictor`, a callable class for ``Dataset.map_batches``.

Ray Data builds one Predictor per worker (the session loads once there) and calls it with numpy
batches, dicts of columns; the model's inputs are read from the columns of the same names and
its outputs come back as new columns (the input columns too with ``keep_columns=True``).

    import ray
    from clglow.ray import Predictor
    ds = ray.data.from_items([{"data": x} for x in images])
    out = ds.map_batches(Predictor, fn_constructor_kwargs={"model": "model.onnx"},
                         batch_size=32, concurrency=2, batch_format="numpy")
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .errors import InvalidArgument
from .session import InferenceSession, SessionOptions


class Predictor:
    """One InferenceSession per Ray Data worker, mapping numpy batches to the model's outputs.

    A model with a fixed first dimension (batch 1) runs a batch in pieces of that many rows;
    one with a symbolic first dimension runs each batch in one go. This module never imports
    Ray: Ray imports it.
    """

    def __init__(self, model: Any, device: Optional[str] = None, outputs: Optional[Sequence[str]] = None,
                 target: Optional[str] = None, keep_columns: bool = False):
        self.session = InferenceSession(model, SessionOptions(target=target), device=device)
        self.inputs = self.session.get_inputs()
        self.outputs = list(outputs) if outputs is not None else [a.name for a in self.session.get_outputs()]
        self.keep_columns = keep_columns

    def _feeds(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        feeds = {}
        for a in self.inputs:
            if a.name not in batch:
                raise InvalidArgument(f"the batch has no column for this input; its columns are {sorted(batch)}",
                                      tensor=a.name)
            col = batch[a.name]
            arr = np.stack(list(col)) if isinstance(col, np.ndarray) and col.dtype == object else np.asarray(col)
            feeds[a.name] = arr.astype(a.dtype, copy=False) if a.dtype is not None else arr
        return feeds

    def _piece_rows(self, n: int) -> int:
        """Rows per run: the model's fixed first dimension when every input has one, else all."""
        firsts = {a.shape[0] for a in self.inputs if a.shape}
        if len(firsts) == 1 and isinstance(next(iter(firsts)), int):
            fixed = next(iter(firsts))
            if fixed and n % fixed:
                raise InvalidArgument(f"the model's batch dimension is fixed at {fixed}; a batch of {n} rows "
                                      "is not a multiple of it (choose batch_size accordingly)")
            return fixed or n
        return n

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The model's outputs for one batch (one row per input row)."""
        feeds = self._feeds(batch)
        n = int(next(iter(feeds.values())).shape[0]) if feeds else 0
        step = self._piece_rows(n) if n else 1
        pieces = [self.session.run(self.outputs, {k: v[i:i + step] for k, v in feeds.items()})
                  for i in range(0, n, step)]
        out: dict[str, np.ndarray] = dict(batch) if self.keep_columns else {}
        for j, name in enumerate(self.outputs):
            out[name] = np.concatenate([p[j] for p in pieces], axis=0) if pieces else np.empty((0,))
        return out
