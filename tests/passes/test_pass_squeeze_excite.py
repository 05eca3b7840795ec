"""passes/fuse_squeeze_excite.py + lower/squeeze_excite.py: a squeeze-and-excitation block's
spatial mean and its two 1x1 FusedConvs are one clglow.SqueezeExcite launch (the Mul stays);
results against onnxruntime (ReduceMean with axes as an attribute and as an input,
GlobalAveragePool, with and without biases, channel counts with vector tails, several images,
a Swish or Sigmoid after the first FC as EfficientNet has), what must not fuse (a mean over other
axes)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(8)


def _se(n, c, cm, hw, mean="reducemean", bias=True, act1="Relu", opset=17, axes=(2, 3)):
    """x -> dw-like Relu -> SE gate (mean, FC c->cm, act1, FC cm->c, HardSigmoid) -> Mul."""
    inits = [numpy_helper.from_array((RNG.standard_normal((cm, c, 1, 1)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((RNG.standard_normal((c, cm, 1, 1)) * 0.3).astype(np.float32), "w2")]
    if bias:
        inits += [numpy_helper.from_array(RNG.standard_normal(cm).astype(np.float32), "b1"),
                  numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "b2")]
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    if mean == "gap":
        nodes.append(helper.make_node("GlobalAveragePool", ["r"], ["m"]))
    elif opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "ax"))
        nodes.append(helper.make_node("ReduceMean", ["r", "ax"], ["m"], keepdims=1))
    else:
        nodes.append(helper.make_node("ReduceMean", ["r"], ["m"], axes=list(axes), keepdims=1))
    nodes += [helper.make_node("Conv", ["m", "w1"] + (["b1"] if bias else []), ["f1"]),
              helper.make_node(act1, ["f1"], ["a1"]) if act1 != "Swish" else helper.make_node("Sigmoid", ["f1"], ["g1"]),
              helper.make_node("Conv", ["a1", "w2"] + (["b2"] if bias else []), ["f2"]),
              helper.make_node("HardSigmoid", ["f2"], ["s"], alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", ["r", "s"], ["y"])]
    if act1 == "Swish":
        nodes.insert(4, helper.make_node("Mul", ["f1", "g1"], ["a1"]))
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", T.FLOAT, [n, c, hw, hw])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [n, c, hw, hw])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m, {"x": RNG.standard_normal((n, c, hw, hw)).astype(np.float32)}


def _run(m, feeds, launches=None):
    """The optimized graph's op types, after checking the outputs against onnxruntime and, with
    `launches`, that the plan has that many launches (a fused node whose program fails to build
    runs its original nodes instead: more launches)."""
    sess = clglow.InferenceSession(m.SerializeToString())
    for got, want in zip(sess.run(None, feeds), models.ort_run(m, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if launches is not None:
        assert sess._last_plan.n_launches == launches, sess._last_plan.n_launches
    return [n.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("n,c,cm,hw,mean,bias,opset,act1", [
    (1, 16, 8, 56, "reducemean", True, 17, "Relu"),     # MobileNetV3-small's first block
    (2, 72, 24, 7, "reducemean", True, 18, "Relu"),     # axes as an input; two images
    (1, 37, 9, 5, "gap", False, 17, "Relu"),            # tails of the 16-lane loops, no biases
    (1, 576, 144, 7, "reducemean", True, 17, "Relu"),   # the last blocks' wide FCs
    (1, 96, 24, 28, "gap", True, 17, "Swish"),          # EfficientNet / MobileNet-style: SiLU first
    (2, 40, 10, 6, "reducemean", False, 17, "Sigmoid"),
    (1, 24, 8, 9, "gap", True, 17, "HardSwish"),
])
def test_fused(n, c, cm, hw, mean, bias, opset, act1):
    ops = _run(*_se(n, c, cm, hw, mean, bias, act1=act1, opset=opset), launches=3)  # Relu, the squeeze, Mul
    assert ops.count("SqueezeExcite") == 1 and "ReduceMean" not in ops and "FusedConv" not in ops, ops
    assert "Mul" in ops or "FusedElementwise" in ops, ops


def test_not_fused():
    """A mean over H only: the nodes stay."""
    m, feeds = _se(1, 16, 8, 6, axes=(2,))
    m.graph.node[-1].CopyFrom(helper.make_node("Mul", ["r", "s"], ["y"]))
    ops = [n.op_type for n in clglow.InferenceSession(m.SerializeToString()).graph.nodes]
    assert "SqueezeExcite" not in ops, ops
