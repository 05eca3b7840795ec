"""The activation planner: tensors live at the same time never share bytes; the arena stays
close to the largest set of simultaneously live tensors; scratch buffers join the plan."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import clglow
from clglow.runtime.memory import Interval, assign_buffers, plan_offsets


def _overlap(a: Interval, b: Interval) -> bool:
    return not (a.end < b.start or b.end < a.start)


def _peak_live(ivs, align):
    steps = range(min(iv.start for iv in ivs), max(iv.end for iv in ivs) + 1)
    need = lambda iv: max(align, -(-iv.nbytes // align) * align)  # noqa: E731
    return max(sum(need(iv) for iv in ivs if iv.start <= t <= iv.end) for t in steps)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 8), st.integers(0, 5000)), min_size=1, max_size=40))
def test_offsets_never_overlap_in_time_and_space(spec):
    ivs = [Interval(f"t{i}", nb, s, s + d) for i, (s, d, nb) in enumerate(spec)]
    offs, total = plan_offsets(ivs, align=64)
    for i, a in enumerate(ivs):
        oa, sa = offs[a.name]
        assert oa % 64 == 0 and sa >= a.nbytes and oa + sa <= total
        for b in ivs[i + 1:]:
            ob, sb = offs[b.name]
            if _overlap(a, b):
                assert oa + sa <= ob or ob + sb <= oa, (a, b, offs[a.name], offs[b.name])
    assert total >= _peak_live(ivs, 64)


def test_offsets_beat_whole_buffer_reuse_on_a_chain_with_scratch():
    """A conv chain where a big scratch lives next to small activations: whole-buffer reuse
    grows slots; offsets pack it within the live peak."""
    ivs = [Interval("x", 3_000_000, 0, 1), Interval("a", 800_000, 1, 2), Interval("s1", 7_000_000, 2, 2),
           Interval("b", 800_000, 2, 3), Interval("c", 3_000_000, 3, 4), Interval("s2", 1_000_000, 4, 4),
           Interval("y", 3_000_000, 4, 5)]
    _, total = plan_offsets(ivs, align=256)
    _, slots = assign_buffers(ivs, align=256)
    assert total <= _peak_live(ivs, 256) * 1.05
    assert total <= sum(slots)


def test_resnet_arena_within_the_live_peak_and_scratch_small():
    """ResNet-50's plan: activations + scratch within 1.5x of the largest live activation set."""
    from clglow.models import resnet50
    sess = clglow.InferenceSession(resnet50())
    sess.run(None, {"data": np.zeros((1, 3, 224, 224), np.float32)})
    (plan,) = sess._engine._plans.values()
    live = 1 * 256 * 56 * 56 * 4 * 2 + 64 * 56 * 56 * 4  # a layer1 block: input, output, one 64-ch map
    assert plan.arena_bytes <= 1.5 * live, (plan.arena_bytes, live)


def _residual_model(z_out: bool = False, z_later: bool = False, z_input: bool = False):
    """z = Relu(zin); y = Relu(Conv(x) + z) (fused into one FusedConv reading z as its residual);
    optionally z handed back too, read again after the conv, or the graph input itself."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32) * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")
    nodes = [helper.make_node("Identity" if z_input else "Relu", ["zin"], ["z"]),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "z"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    outs = ["y"] + (["z"] if z_out else [])
    if z_later:
        nodes.append(helper.make_node("Mul", ["y", "z"], ["y2"]))
        outs = ["y2"]
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    g = helper.make_graph(nodes, "res", [f("x", [1, 8, 10, 30]), f("zin", [1, 24, 10, 30])],
                          [f(o, [1, 24, 10, 30]) for o in outs], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_residual_updated_in_place_when_nothing_reads_it_later():
    """The fused conv writes its output into the residual's buffer when the residual dies there
    (no buffer of its own), and computes what onnx.reference does; not when the residual is
    handed back or read later (then both values stay right)."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((1, 8, 10, 30)).astype(np.float32),
             "zin": rng.standard_normal((1, 24, 10, 30)).astype(np.float32)}
    cases = [(False, False, False, True), (True, False, False, False), (False, True, False, False),
             (False, False, True, False)]  # the last: z is the caller's input (Identity is a view)
    for z_out, z_later, z_input, in_place in cases:
        model = _residual_model(z_out, z_later, z_input)
        sess = clglow.InferenceSession(model.SerializeToString())
        got = sess.run(None, feeds)
        want = ReferenceEvaluator(model).run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        plan = sess._engine.last_plan
        assert (plan.root.get("y") in ("z", "zin")) == in_place, (z_out, z_later, z_input, plan.root)
        for g, w in zip(sess.run(None, feeds), got):  # a second run: nothing it reads was overwritten
            np.testing.assert_array_equal(g, w)
        assert [s.op_type for s in plan.steps if hasattr(s, "op_type")].count("FusedConv") >= 1


def _bottleneck_model(mid_out: bool = False, mid_again: bool = False):
    """x -> 1x1 conv -> Relu -> mid -> 3x3 conv (pad 1) -> y, three times in a row (the padded
    activations share buffers); optionally the first mid handed back too, or read again."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    inits, nodes, prev = [], [], "x"
    for i in range(3):
        inits += [numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3, f"w1_{i}"),
                  numpy_helper.from_array(rng.standard_normal((8, 16, 3, 3)).astype(np.float32) * 0.1, f"w2_{i}")]
        nodes += [helper.make_node("Conv", [prev, f"w1_{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"mid{i}"]),
                  helper.make_node("Conv", [f"mid{i}", f"w2_{i}"], [f"y{i}"], pads=[1, 1, 1, 1])]
        prev = f"y{i}"
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    outs = [f("y2", [2, 8, 20, 30])] + ([f("mid0", [2, 16, 20, 30])] if mid_out else [])
    if mid_again:
        nodes.append(helper.make_node("ReduceMean", ["mid0"], ["m"], keepdims=0))
        outs.append(f("m", [2, 20, 30]))
    g = helper.make_graph(nodes, "bottleneck", [f("x", [2, 8, 20, 30])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.cpu_family
def test_conv_writes_the_next_convs_padded_input():
    """A 1x1 conv's output that only a stride-1 3x3 conv reads is written as that conv's zero-
    padded image (no conv_phases copy; the three of one layout share a zeroed buffer); not when it
    is handed back or read elsewhere. Every run computes what onnx.reference does."""
    from onnx.reference import ReferenceEvaluator
    feeds = {"x": np.random.default_rng(6).standard_normal((2, 8, 20, 30)).astype(np.float32)}
    for mid_out, mid_again, copies in [(False, False, 0), (True, False, 1), (False, True, 1)]:
        model = _bottleneck_model(mid_out, mid_again)
        sess = clglow.InferenceSession(model.SerializeToString())
        want = ReferenceEvaluator(model).run(None, feeds)
        for _ in range(2):  # the second run reuses the padded buffers: their zeros must hold
            for g, w in zip(sess.run(None, feeds), want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        plan = sess._engine.last_plan
        kernels = [s.kernel_name for s in plan.steps if hasattr(s, "kernel_name")]
        assert kernels.count("conv_phases") == copies, (mid_out, mid_again, kernels)
        if not copies:
            assert len({id(plan.device_tensors[f"mid{i}"]) for i in range(3)}) == 1
