"""The activation planner: tensors live at the same time never share bytes; the arena stays
close to the largest set of simultaneously live tensors; scratch buffers join the plan."""
from __future__ import annotations

import numpy as np
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
