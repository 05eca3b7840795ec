"""RNN, GRU and LSTM on OpenCL (lower/recurrent.py, kernels_cl/recurrent.cl) against independent
oracles: onnx.reference for what it implements (directions, layouts, biases, initial states,
peepholes, linear_before_reset), onnxruntime for what it ignores (sequence_lens, activations
with alpha/beta, clip, input_forget); the two-layer language models of clglow.models.recurrent
against onnxruntime, with every node on OpenCL."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check, device_info, reference, run_node  # noqa: E402
except ImportError:
    from run_launches import check, device_info, reference, run_node  # type: ignore  # noqa: E402

from clglow.ir import Graph, Node, Value  # noqa: E402
from clglow.lower.recurrent import supports_recurrent  # noqa: E402

RNG = np.random.default_rng(11)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTS = {"RNN": ["Y", "Y_h"], "GRU": ["Y", "Y_h"], "LSTM": ["Y", "Y_h", "Y_c"]}


def r(*shape, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def case(op: str, seq: int = 4, batch: int = 3, inp: int = 5, hidden: int = 6, direction: str = "forward",
         layout: int = 0, bias: bool = True, states: bool = False, peep: bool = False, lens=None) -> tuple:
    """(input names, feeds) of one node: X, W, R and the optional inputs asked for."""
    nd, g = (2 if direction == "bidirectional" else 1), GATES[op]
    x = r(seq, batch, inp) if layout == 0 else r(batch, seq, inp)
    feeds = {"X": x, "W": r(nd, g * hidden, inp, scale=0.5), "R": r(nd, g * hidden, hidden, scale=0.5)}
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        feeds["B"], names[3] = r(nd, 2 * g * hidden, scale=0.5), "B"
    if lens is not None:
        feeds["L"], names[4] = np.asarray(lens, np.int32), "L"
    if states:
        st = (nd, batch, hidden) if layout == 0 else (batch, nd, hidden)
        feeds["H0"], names[5] = r(*st), "H0"
        if op == "LSTM":
            feeds["C0"], names[6] = r(*st), "C0"
    if peep:
        feeds["P"], names[7] = r(nd, 3 * hidden, scale=0.5), "P"
    while names and not names[-1]:
        names.pop()
    return names, feeds


def node(op: str, names: list, outs: list, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, names, outs, **attrs)


def split(feeds: dict) -> tuple:
    """(live feeds, constants): X live, the weights as initializers (packed at plan time)."""
    return {k: v for k, v in feeds.items() if k in ("X", "L", "H0", "C0")}, \
        {k: v for k, v in feeds.items() if k not in ("X", "L", "H0", "C0")}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_layouts_states(op, direction, layout):
    """Every direction and layout with biases and initial states, weights constant (packed)."""
    names, feeds = case(op, direction=direction, layout=layout, states=True, peep=op == "LSTM")
    live, consts = split(feeds)
    check(node(op, names, OUTS[op], hidden_size=6, direction=direction, layout=layout), live, consts,
          opset=14, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_live_weights(op, direction):
    """W, R, B, P as graph inputs (the ONNX node suite's form): W packed at run time, R read as it lies."""
    names, feeds = case(op, direction=direction, hidden=20, states=True, peep=op == "LSTM")
    check(node(op, names, OUTS[op], hidden_size=20, direction=direction), feeds, opset=14, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("hidden", [5, 37])
def test_gru_linear_before_reset(lbr, hidden):
    """Both GRU forms, hidden sizes that leave a partial vector of units (and several blocks)."""
    names, feeds = case("GRU", hidden=hidden, batch=5, states=True)
    live, consts = split(feeds)
    check(node("GRU", names, ["Y", "Y_h"], hidden_size=hidden, linear_before_reset=lbr), live, consts,
          opset=14, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens(op, direction, layout):
    """Per-row lengths (one of them 0): Y zero past a row's length, Y_h / Y_c its last valid step
    (onnxruntime; onnx.reference ignores sequence_lens)."""
    names, feeds = case(op, seq=5, batch=4, direction=direction, layout=layout, states=True, lens=[5, 2, 0, 3])
    live, consts = split(feeds)
    n = node(op, names, OUTS[op], hidden_size=6, direction=direction, layout=layout)
    if layout == 0:
        check(n, live, consts, opset=14, rtol=1e-4, atol=1e-5, oracle="onnxruntime")
        return
    # onnxruntime runs layout 0 only: its answer for the same data time-major, moved batch-major
    tm = dict(live, X=live["X"].transpose(1, 0, 2))
    tm.update({k: live[k].transpose(1, 0, 2) for k in ("H0", "C0") if k in live})
    exp = reference(node(op, names, OUTS[op], hidden_size=6, direction=direction), tm, consts, 14, "onnxruntime")
    exp = [exp[0].transpose(2, 0, 1, 3)] + [e.transpose(1, 0, 2) for e in exp[1:]]
    got, exp = run_node(n, live, consts, 14, expected=exp)
    for g, e in zip(got, exp):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


ACTS = [
    ("RNN", ["Relu"], [], []),
    ("RNN", ["ScaledTanh", "Affine"], [0.7, 0.5], [1.3, 0.1]),  # bidirectional: one per direction
    ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.4]),
    ("GRU", ["LeakyRelu", "Elu", "Sigmoid", "Softplus"], [0.2, 0.9], []),
    ("LSTM", ["HardSigmoid", "LeakyRelu", "Softsign"], [0.25, 0.05], [0.45]),
    ("LSTM", ["Sigmoid", "ThresholdedRelu", "Tanh", "Sigmoid", "Tanh", "Relu"], [0.1], []),
]


@pytest.mark.parametrize("op,acts,alphas,betas", ACTS)
def test_activations(op, acts, alphas, betas):
    """Activations and their alpha/beta, consumed in order (onnxruntime's reading of the ONNX text)."""
    per_dir = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    direction = "bidirectional" if len(acts) > per_dir else "forward"
    names, feeds = case(op, direction=direction, states=True)
    attrs = {"activations": acts}
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    live, consts = split(feeds)
    check(node(op, names, OUTS[op], hidden_size=6, direction=direction, **attrs), live, consts, opset=14,
          rtol=1e-4, atol=1e-5, oracle="onnxruntime")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_clip(op):
    names, feeds = case(op, states=True)
    live, consts = split(feeds)
    check(node(op, names, OUTS[op], hidden_size=6, clip=0.4), live, consts, opset=14, rtol=1e-4, atol=1e-5,
          oracle="onnxruntime")


def test_lstm_input_forget_peepholes():
    names, feeds = case("LSTM", direction="bidirectional", states=True, peep=True)
    live, consts = split(feeds)
    check(node("LSTM", names, OUTS["LSTM"], hidden_size=6, direction="bidirectional", input_forget=1), live,
          consts, opset=14, rtol=1e-4, atol=1e-5, oracle="onnxruntime")


@pytest.mark.parametrize("outs", [["Y"], ["", "Y_h"], ["", "", "Y_c"], ["Y", "", "Y_c"]])
def test_optional_outputs(outs):
    """Any subset of the outputs (absent ones are never written)."""
    names, feeds = case("LSTM", batch=9, hidden=17, states=True)
    live, consts = split(feeds)
    check(node("LSTM", names, outs, hidden_size=17), live, consts, opset=14, rtol=1e-4, atol=1e-5)


def _graph_of(n: onnx.NodeProto, dtypes: dict) -> tuple:
    values = {k: Value(k, np.dtype(v), None) for k, v in dtypes.items()}
    inode = Node(n.op_type, n.name or n.op_type, list(n.input), list(n.output),
                 {a.name: helper.get_attribute_value(a) for a in n.attribute}, "")
    return inode, Graph([inode], values, [k for k in dtypes], list(n.output), {"": 14})


@pytest.mark.parametrize("attrs,dtypes,reason", [
    ({}, {"X": np.float64}, "dtype float64"),
    ({"activations": ["Affine"]}, {}, "needs activation_alpha"),
    ({"activations": ["Swish"]}, {}, "not one of the ONNX recurrent activations"),
    ({"activations": ["Tanh", "Tanh"]}, {}, "2 activations given"),
    ({"direction": "sideways"}, {}, "direction"),
    ({"hidden_size": 1 << 22}, {}, "local memory"),
])
def test_supports_refuses_with_a_reason(attrs, dtypes, reason):
    """What the kernel does not cover goes to the host with a reason, never a wrong answer."""
    n = node("RNN", ["X", "W", "R"], ["Y"], **{"hidden_size": 4, **attrs})
    inode, graph = _graph_of(n, {"X": np.float32, "W": np.float32, "R": np.float32, "Y": np.float32, **dtypes})
    why = supports_recurrent(inode, graph, device_info())
    assert why is not None and reason in why, why


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_language_model_on_device(cell):
    """Gather embedding -> 2 recurrent layers -> MatMul head against onnxruntime, every node on OpenCL."""
    import onnxruntime as ort

    import clglow
    from clglow.models.recurrent import recurrent_lm

    model = recurrent_lm(cell, batch=2, seq=7, vocab=50, embed=24, hidden=40, layers=2, seed=3)
    ids = RNG.integers(0, 50, (2, 7)).astype(np.int64)
    sess = clglow.InferenceSession(model)
    placement = sess.explain()
    assert sum(f"{cell} " in line and line.startswith("opencl") for line in placement.splitlines()) == 2, placement
    assert "0 on the host" in placement, placement
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})
    np.testing.assert_allclose(sess.run(None, {"ids": ids})[0], ref[0], rtol=1e-4, atol=1e-4)
