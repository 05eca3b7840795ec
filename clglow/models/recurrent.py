"""A recurrent language model (token embedding -> stacked LSTM/GRU/RNN -> vocabulary logits),
built with seeded random weights, in the shape torch.onnx exports `nn.LSTM`/`nn.GRU` with
`batch_first=True`: Gather, a Transpose to time-major, one ONNX recurrent node per layer with
its Y squeezed on the direction axis, a Transpose back and a MatMul + Add head.

Why here: the kernel tests (tests/kernels/test_recurrent.py) and the benchmark zoo
(`python -m benchmarks lstm` / `gru`) measure the same graph.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ._graph import GraphBuilder

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_lm(cell: str = "LSTM", batch: int | str = 1, seq: int | str = 20, vocab: int = 1000,
                 embed: int = 128, hidden: int = 128, layers: int = 2, seed: int = 0,
                 opset: int = 14) -> onnx.ModelProto:
    """Input `ids` int64 [batch, seq] -> output `logits` float32 [batch, seq, vocab].

    Example::

        model = recurrent_lm("GRU", batch=8, seq=20)
    """
    if cell not in GATES:
        raise ValueError(f"cell must be one of {', '.join(GATES)}, got {cell!r}")
    g = GraphBuilder(f"{cell.lower()}_lm", opset=opset, seed=seed)
    ids = g.input("ids", TensorProto.INT64, [batch, seq])
    emb = g.const("embedding", g.rng.standard_normal((vocab, embed), dtype=np.float32) * np.float32(0.5))
    x = g.node("Gather", [emb, ids], "embedded")
    x = g.node("Transpose", [x], "time_major", perm=[1, 0, 2])
    gates = GATES[cell]
    width = embed
    for layer in range(layers):
        scale = np.float32(1.0 / np.sqrt(hidden))
        w = g.const(f"W{layer}", g.rng.uniform(-scale, scale, (1, gates * hidden, width)).astype(np.float32))
        r = g.const(f"R{layer}", g.rng.uniform(-scale, scale, (1, gates * hidden, hidden)).astype(np.float32))
        b = g.const(f"B{layer}", g.rng.uniform(-scale, scale, (1, 2 * gates * hidden)).astype(np.float32))
        attrs = {"linear_before_reset": 1} if cell == "GRU" else {}  # torch's GRU
        n_out = 3 if cell == "LSTM" else 2
        y = g.node_multi(cell, [x, w, r, b], f"rnn{layer}", n_out=n_out, hidden_size=hidden, **attrs)[0]
        x = g.node("Squeeze", [y, g.i64("axes", [1])], f"rnn{layer}_y")
        width = hidden
    x = g.node("Transpose", [x], "batch_major", perm=[1, 0, 2])
    head = g.const("head_w", g.he_normal((hidden, vocab), hidden, gain=1.0))
    bias = g.const("head_b", np.zeros(vocab, np.float32))
    logits = g.node("Add", [g.node("MatMul", [x, head], "head"), bias], "logits")
    g.output(logits, TensorProto.FLOAT, [batch, seq, vocab])
    return g.model(doc=f"{layers}-layer {cell} language model, hidden {hidden}, seeded random weights")


__all__ = ["recurrent_lm", "GATES"]
