"""Loop on the device: staging unrolls it (clglow/passes/unroll_loop.py), checked against
onnxruntime (onnx.reference runs no iteration when the condition input is absent, against the
spec) with host fallback off, and the host path for loops that stay there."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper

import clglow
from clglow.passes.unroll_loop import LOOP_MAX_UNROLL


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _body(extra_outputs: bool = True, cond_from_data: bool = False, scalar_scan: bool = True) -> onnx.GraphProto:
    """s_out = s_in + x * i + x (x read from the outer scope); scan: s_out * x and i; condition:
    passed through, or sum(s_out) < limit (limit from the outer scope)."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
             helper.make_node("Mul", ["x", "fi"], ["s1"]),
             helper.make_node("Add", ["s_in", "s1"], ["s2"]),
             helper.make_node("Add", ["s2", "x"], ["s_out"])]
    if cond_from_data:
        nodes += [helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
                  helper.make_node("Less", ["tot", "limit"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    outs = [_vi("c_out", T.BOOL, []), _vi("s_out", T.FLOAT, [3])]
    if extra_outputs:
        nodes.append(helper.make_node("Mul", ["s_out", "x"], ["sc"]))
        outs.append(_vi("sc", T.FLOAT, [3]))
        if scalar_scan:
            nodes.append(helper.make_node("Identity", ["i"], ["it"]))
            outs.append(_vi("it", T.INT64, []))
    return helper.make_graph(nodes, "body", [_vi("i", T.INT64, []), _vi("c_in", T.BOOL, []),
                                             _vi("s_in", T.FLOAT, [3])], outs)


def _model(m_in: str, cond_in: str, scans: bool = True, cond_from_data: bool = False, trip: int = 4,
           cond: bool = True, scalar_scan: bool = True) -> onnx.ModelProto:
    """(onnx.reference, the host's Loop, stacks scalar scan slices as [n, 1]: host cases have none)"""
    outs = (["s", "scan", "its"] if scalar_scan else ["s", "scan"]) if scans else ["s"]
    loop = helper.make_node("Loop", [m_in, cond_in, "s0"], outs, body=_body(scans, cond_from_data, scalar_scan),
                            name="L")
    inits = [helper.make_tensor("M", T.INT64, [], [trip]), helper.make_tensor("C", T.BOOL, [], [cond]),
             helper.make_tensor("limit", T.FLOAT, [], [200.0])]
    g = helper.make_graph([loop, helper.make_node("Relu", ["s"], ["y"])], "loop",
                          [_vi("x", T.FLOAT, [3]), _vi("s0", T.FLOAT, [3])],
                          [_vi("y", T.FLOAT, [3])] + [_vi("scan", T.FLOAT, ["n", 3]), _vi("its", T.INT64, ["n"])][
                              :len(outs) - 1], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


_FEEDS = {"x": np.array([1.0, -2.0, 3.0], np.float32), "s0": np.array([0.5, 1.0, 2.0], np.float32)}


def _check(model: onnx.ModelProto, host_fallback: bool = False, feeds: dict = _FEEDS) -> clglow.InferenceSession:
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(host_fallback=host_fallback))
    got = sess.run(None, feeds)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=1e-6)
    return sess


@pytest.mark.parametrize("m_in, cond_in, data", [("M", "", False),   # trip count only
                                                  ("", "C", True),   # condition only, from the data
                                                  ("M", "C", False),  # both, condition passed through
                                                  ("M", "C", True)])  # both, condition from the data
def test_loop_unrolled_on_the_device(m_in, cond_in, data):
    sess = _check(_model(m_in, cond_in, cond_from_data=data, trip=6))
    ops = {p.op_type for p in sess.placement}
    assert "Loop" not in ops and {p.where for p in sess.placement} == {"opencl"}, sess.explain()
    if not data:  # every iteration in one stage: one Concat per scan output (the chain joined)
        assert sum(p.op_type == "Concat" for p in sess.placement) <= 2, sess.explain()  # 6 unjoined


def test_loop_without_scan_outputs_and_false_condition():
    _check(_model("M", "C", scans=False, cond=False))  # no iteration: s0 passed through
    _check(_model("M", "C", scans=False, trip=0))


def test_loop_past_the_unroll_bound_runs_on_the_host():
    """A counted loop past the bound stays one host node, and says why; without host fallback it
    is refused."""
    model = _model("M", "", trip=LOOP_MAX_UNROLL + 1, scalar_scan=False)
    sess = _check(model, host_fallback=True)
    loops = [p for p in sess.placement if p.op_type == "Loop"]
    assert loops and loops[0].where == "host" and str(LOOP_MAX_UNROLL) in sess.explain()
    with pytest.raises(clglow.ClglowError):
        _check(model)


def test_loop_condition_running_past_the_bound_continues_on_the_host():
    """A condition-driven loop unrolled LOOP_MAX_UNROLL times, the rest run by the host as a
    continuation Loop whose body still sees the original iteration numbers."""
    model = _model("", "C", cond_from_data=True, scalar_scan=False)
    # sum(s) grows as 1e-3 * i^2 / 2: about 100 iterations to pass the limit 5
    feeds = {"x": np.array([1e-3, 0.0, 0.0], np.float32), "s0": np.zeros(3, np.float32)}
    model.graph.initializer[2].CopyFrom(helper.make_tensor("limit", T.FLOAT, [], [5.0]))
    sess = _check(model, host_fallback=True, feeds=feeds)
    assert any(p.op_type == "Loop" and p.where == "host" for p in sess.placement), sess.explain()


def test_loop_with_an_if_in_its_body():
    """Nested subgraphs reading the body's values are renamed with the iteration's names."""
    then_g = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["t"])], "then", [], [_vi("t", T.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["s_in", "x"], ["e"])], "else", [], [_vi("e", T.FLOAT, [3])])
    body = helper.make_graph([helper.make_node("Mod", ["i", "two"], ["r"]),
                              helper.make_node("Equal", ["r", "zero"], ["even"]),
                              helper.make_node("If", ["even"], ["s_out"], then_branch=then_g, else_branch=else_g),
                              helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [_vi("i", T.INT64, []), _vi("c_in", T.BOOL, []), _vi("s_in", T.FLOAT, [3])],
                             [_vi("c_out", T.BOOL, []), _vi("s_out", T.FLOAT, [3])],
                             [helper.make_tensor("two", T.INT64, [], [2]), helper.make_tensor("zero", T.INT64, [], [0])])
    g = helper.make_graph([helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body)], "loop_if",
                          [_vi("x", T.FLOAT, [3]), _vi("s0", T.FLOAT, [3])], [_vi("s", T.FLOAT, [3])],
                          [helper.make_tensor("M", T.INT64, [], [5])])
    sess = _check(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()


def test_loop_trip_count_from_a_graph_input():
    """M and cond fed at run time become plan constants (engine.SHAPE_INPUTS): one plan each."""
    model = _model("M", "C", cond_from_data=False)
    g = model.graph
    del g.initializer[:2]
    g.input.extend([_vi("M", T.INT64, []), _vi("C", T.BOOL, [])])
    for trip in (1, 3):
        _check(model, feeds={**_FEEDS, "M": np.array(trip, np.int64), "C": np.array(True)})


@pytest.mark.parametrize("in_axis, in_dir, out_axis, out_dir", [(0, 0, 0, 0), (1, 1, 0, 0), (-1, 0, 1, 1),
                                                                (0, 1, -1, 0)])
def test_scan_unrolled_on_the_device(in_axis, in_dir, out_axis, out_dir):
    """Scan (opset 9 on): every step unrolled (slices by Gather, outputs by one Concat), scan
    axes and directions as onnxruntime takes them, a state and an outer-scope read."""
    body = helper.make_graph([helper.make_node("Add", ["acc_in", "xs"], ["acc_out"]),
                              helper.make_node("Mul", ["acc_out", "w"], ["ys"])], "body",
                             [_vi("acc_in", T.FLOAT, [2]), _vi("xs", T.FLOAT, [2])],
                             [_vi("acc_out", T.FLOAT, [2]), _vi("ys", T.FLOAT, [2])])
    shape = [5, 2] if in_axis == 0 else [2, 5]
    scan = helper.make_node("Scan", ["acc0", "x"], ["acc", "y"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    g = helper.make_graph([scan], "scan", [_vi("acc0", T.FLOAT, [2]), _vi("x", T.FLOAT, shape)],
                          [_vi("acc", T.FLOAT, [2]), _vi("y", T.FLOAT, [None, None])],
                          [helper.make_tensor("w", T.FLOAT, [2], [2.0, -1.0])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    feeds = {"acc0": np.array([0.5, 1.0], np.float32),
             "x": np.arange(10, dtype=np.float32).reshape(shape)}
    sess = _check(model, feeds=feeds)
    assert {p.where for p in sess.placement} == {"opencl"}, sess.explain()
