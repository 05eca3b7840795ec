"""passes/fuse_rotary.py + lower/rotate_half.py: a Llama-style rotary embedding, x * cos +
rotate_half(x) * sin written as torch.onnx exports it (two Slices, Neg, Concat, two Muls, Add), is
one clglow.RotateHalf launch; results against onnxruntime for cos / sin of the shapes exports use
([B, 1, S, D] computed per run, [S, D] constant tables, [1, S, 1, D] on a [B, S, H, D] layout),
operand orders, Slice bounds as exports write them (INT64_MAX ends, negative axes), opsets with
the bounds as attributes; what must not fuse (unequal halves, a reversed Concat, an intermediate
read elsewhere)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(23)
BIG = np.iinfo(np.int64).max


def _slice(name: str, x: str, start: int, end: int, axis: int, opset: int, inits: list) -> object:
    """A Slice of x's `axis` from start to end, its bounds as inputs (opset 10+) or attributes."""
    if opset < 10:
        return helper.make_node("Slice", [x], [name], starts=[start], ends=[end], axes=[axis])
    for suffix, v in (("s", start), ("e", end), ("a", axis)):
        inits.append(numpy_helper.from_array(np.array([v], np.int64), f"{name}_{suffix}"))
    return helper.make_node("Slice", [x, f"{name}_s", f"{name}_e", f"{name}_a"], [name])


def _rotary(x_shape, cos_shape, opset=17, const_tables=False, swap=False, split=None, reversed_cat=False,
            leak=False):
    """y = x * cos + rotate_half(x) * sin (Relu before x, so that x is an activation); with
    `swap` the Muls' and the Add's operands in the other order; `leak` makes the Neg a second
    output of the graph (its value read elsewhere)."""
    d = x_shape[-1]
    h = d // 2 if split is None else split
    inits: list = []
    nodes = [helper.make_node("Relu", ["x"], ["q"]),
             _slice("x1", "q", 0, h, -1 if opset >= 11 else len(x_shape) - 1, opset, inits),  # negative axes: opset 11+
             _slice("x2", "q", h, BIG if opset >= 10 else d, len(x_shape) - 1, opset, inits),
             helper.make_node("Neg", ["x2"], ["n2"]),
             helper.make_node("Concat", ["x1", "n2"] if reversed_cat else ["n2", "x1"], ["r"], axis=-1)]
    nodes += [helper.make_node("Mul", ["cos", "q"] if swap else ["q", "cos"], ["qc"]),
              helper.make_node("Mul", ["sin", "r"] if swap else ["r", "sin"], ["rs"]),
              helper.make_node("Add", ["rs", "qc"] if swap else ["qc", "rs"], ["y"])]
    cs = RNG.standard_normal(cos_shape).astype(np.float32)
    sn = RNG.standard_normal(cos_shape).astype(np.float32)
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, list(x_shape))]
    if const_tables:
        inits += [numpy_helper.from_array(cs, "cos"), numpy_helper.from_array(sn, "sin")]
    else:
        inputs += [helper.make_tensor_value_info(n, T.FLOAT, list(cos_shape)) for n in ("cos", "sin")]
        feeds.update(cos=cs, sin=sn)
    outputs = [helper.make_tensor_value_info("y", T.FLOAT, list(x_shape))]
    if leak:
        outputs.append(helper.make_tensor_value_info("n2", T.FLOAT, list(x_shape[:-1]) + [x_shape[-1] - (d // 2 if split is None else split)]))
    g = helper.make_graph(nodes, "rotary", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset >= 9 else 3
    return m, feeds


def _run(m, feeds) -> list:
    """The optimized graph's op types, after checking the outputs against onnxruntime."""
    sess = clglow.InferenceSession(m.SerializeToString())
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert all(p.where == "opencl" for p in sess.placement), [str(p) for p in sess.placement]
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("x_shape,cos_shape,opset,const_tables,swap", [
    ((1, 4, 7, 64), (1, 1, 7, 64), 17, False, False),   # Llama prefill: [B, H, S, D], cos [B, 1, S, D]
    ((2, 3, 1, 32), (2, 1, 1, 32), 17, False, True),    # a decode step of two sequences, operands swapped
    ((1, 4, 5, 16), (5, 16), 13, True, False),          # constant [S, D] tables
    ((2, 6, 2, 8), (1, 6, 1, 8), 17, False, False),     # [B, S, H, D] layout, cos [1, S, 1, D]
    ((3, 10), (3, 10), 9, True, True),                  # rank 2, bounds as attributes (opset 9)
])
def test_fused(x_shape, cos_shape, opset, const_tables, swap):
    ops = _run(*_rotary(x_shape, cos_shape, opset, const_tables, swap))
    assert ops == ["Relu", "RotateHalf"], ops


@pytest.mark.parametrize("kw", [dict(split=3), dict(reversed_cat=True), dict(leak=True)],
                         ids=["unequal_halves", "reversed_concat", "intermediate_read"])
def test_not_fused(kw):
    """Other rotations, or an intermediate another node reads: the nodes stay, results unchanged."""
    ops = _run(*_rotary((1, 2, 5, 8), (1, 1, 5, 8), **kw))
    assert "RotateHalf" not in ops and "Concat" in ops, ops


def test_half_storage():
    """precision="fp16": RotateHalf reads x (the Relu's half output) as stored and the result
    stays within half rounding of onnxruntime's float32 run (fp32 arithmetic, bound 2e-3)."""
    m, feeds = _rotary((1, 4, 7, 64), (1, 1, 7, 64), const_tables=True)
    sess = clglow.InferenceSession(m.SerializeToString(), clglow.SessionOptions(precision="fp16"))
    rot = next(n for n in sess.graph.nodes if n.op_type == "RotateHalf")
    assert sess.graph.values[rot.inputs[0]].dtype == np.float16  # no Cast between the Relu and it
    assert sess.graph.values[rot.inputs[1]].dtype == np.float16  # the constant tables converted once
    (got,), (want,) = sess.run(None, feeds), models.ort_run(m, feeds)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * float(np.abs(want).max()))
