"""The buffer planner (runtime/planning.py), without OpenCL: small hand-built graphs with fake
lowerings, checked against hand-computed steps, lifetimes and offsets, plus properties of random
graphs (every read and write lies inside its buffer's lifetime; tensors live at the same time
never share arena bytes).

The lowerings here are made up (one launch per node reading each input and writing each
output, offers set by hand): the planner only sees Launch arguments and LowerCtx offers."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from clglow.config import PlanOptions
from clglow.errors import OutOfDeviceMemory
from clglow.ir import Graph, Node, Value
from clglow.lower.base import Buf, Launch, LowerCtx, PaddedLayout, Scratch, TensorInfo
from clglow.partition import DEVICE, HOST
from clglow.runtime import lowered, planning
from clglow.runtime.memory import Interval
from clglow.runtime.planning import HostNodeStep, KernelLaunchStep, NoopStep, Staged, UploadStep, scratch_name
from clglow.target import Target

F32 = np.dtype(np.float32)
TARGET = Target(type="cpu", base_align=256, max_alloc_size=1 << 28, global_mem_size=1 << 30)


def _graph(nodes: list, shapes: dict, inputs: list, outputs: list, consts: Optional[dict] = None) -> Graph:
    values = {k: Value(k, F32, s) for k, s in shapes.items()}
    for k, arr in (consts or {}).items():
        values[k] = Value(k, arr.dtype, arr.shape, arr)
    return Graph(nodes, values, inputs, outputs, {"": 13})


class FakeLowerer:
    """One launch per node (Buf of every input and output); `offers[node](ctx)` sets a node's
    offers, `launches[node](ctx)` replaces its launches. Records every call."""

    def __init__(self, graph: Graph, offers: Optional[dict] = None, launches: Optional[dict] = None):
        self.graph, self.offers, self.launches = graph, offers or {}, launches or {}
        self.calls: list = []

    def __call__(self, node: Node, in_layout: Optional[PaddedLayout] = None,
                 out_layout: Optional[PaddedLayout] = None) -> tuple:
        self.calls.append((node.name, in_layout, out_layout))
        info = lambda n: TensorInfo(n, F32, tuple(self.graph.values[n].shape)) if n else None  # noqa: E731
        ctx = LowerCtx(node, self.graph, [info(i) for i in node.inputs], [info(o) for o in node.outputs if o],
                       TARGET, PlanOptions())
        ctx.in_layout, ctx.out_layout = in_layout, out_layout
        if node.name in self.offers:
            self.offers[node.name](ctx)
        if node.name in self.launches:
            return self.launches[node.name](ctx), ctx
        args = [Buf(i) for i in node.inputs if i] + [Buf(o) for o in node.outputs if o]
        return [Launch("fake", f"k_{node.name}", (1,), args)], ctx


def _plan(graph: Graph, where: Optional[dict] = None, lowerer: Optional[Callable] = None,
          zero_copy: bool = False, target: Target = TARGET) -> planning.BufferPlan:
    where = where or {}
    staged = Staged(graph, [], {n.name: where.get(n.name, DEVICE) for n in graph.nodes})
    return planning.plan_buffers(staged, graph.outputs, lowerer or FakeLowerer(graph), target, zero_copy)


def _iv(bp: planning.BufferPlan) -> dict:
    return {iv.name: (iv.start, iv.end) for iv in bp.intervals}


def _kinds(bp: planning.BufferPlan) -> list:
    names = {UploadStep: "upload", KernelLaunchStep: "kernel", HostNodeStep: "host", NoopStep: "noop"}
    return [(names[type(s)], s.name if isinstance(s, UploadStep) else s.node.name) for s in bp.steps]


def _chain(n: int = 256) -> Graph:
    s = (n,)
    nodes = [Node("Relu", "A", ["x"], ["a"]), Node("Relu", "B", ["a"], ["b"]), Node("Relu", "C", ["b"], ["y"])]
    return _graph(nodes, {k: s for k in "xaby"}, ["x"], ["y"])


def test_chain_liveness_and_arena():
    """x -> A -> a -> B -> b -> C -> y: each tensor lives from its writer to its last reader (the
    input from step 0, the output to the end); 1 KiB each, two live at a time -> a 2 KiB arena."""
    bp = _plan(_chain())
    assert _kinds(bp) == [("kernel", "A"), ("kernel", "B"), ("kernel", "C")]
    assert bp.device_inputs == ["x"] and bp.host_inputs == []
    assert _iv(bp) == {"x": (0, 0), "a": (0, 1), "b": (1, 2), "y": (2, 3)}
    assert bp.use_arena and bp.arena_size == 2048 and bp.planned_bytes == 2048
    # largest first, then earliest start, then name, each at the lowest free offset: a, x, b, y
    assert bp.offsets == {"a": (0, 1024), "x": (1024, 1024), "b": (1024, 1024), "y": (0, 1024)}
    assert bp.storage == {t: ("arena", t) for t in "xaby"}
    assert bp.zero_copy == {} and bp.bind_outputs_at == -1


def test_uploads_at_host_to_device_borders():
    """A host node between device nodes: its input is read back (live until the host step), its
    output uploaded once before the first device reader; a graph input the host reads is a host
    input, one the device reads too is uploaded as well."""
    s = (64,)
    nodes = [Node("Relu", "A", ["x"], ["a"]), Node("Det", "H", ["a", "w"], ["h"]),
             Node("Add", "C", ["h", "w"], ["c"]), Node("Mul", "D", ["h", "c"], ["y"])]
    g = _graph(nodes, {k: s for k in ("x", "a", "w", "h", "c", "y")}, ["x", "w"], ["y"])
    bp = _plan(g, {"H": HOST})
    assert _kinds(bp) == [("kernel", "A"), ("host", "H"), ("upload", "h"), ("kernel", "C"), ("kernel", "D")]
    assert bp.host_inputs == ["w"] and bp.device_inputs == ["x", "w"]
    assert _iv(bp) == {"x": (0, 0), "a": (0, 1), "h": (2, 4), "w": (0, 3), "c": (3, 4), "y": (4, 5)}


def test_views_share_their_owners_buffer():
    """A Reshape on the device is a view: no interval of its own, its owner's storage, and its
    reads keep the owner live; the view step is a NoopStep. Views of views point at the owner."""
    nodes = [Node("Relu", "A", ["x"], ["a"]), Node("Reshape", "R", ["a", "shape"], ["v"]),
             Node("Flatten", "R2", ["v"], ["v2"]), Node("Relu", "C", ["x"], ["c"]),
             Node("Add", "D", ["v2", "c"], ["y"])]
    shape = np.array([16, 16], np.int64)
    g = _graph(nodes, {"x": (256,), "a": (256,), "v": (16, 16), "v2": (16, 16), "c": (256,), "y": (16, 16)},
               ["x"], ["y"], {"shape": shape})
    bp = _plan(g)
    assert _kinds(bp) == [("kernel", "A"), ("noop", "R"), ("noop", "R2"), ("kernel", "C"), ("kernel", "D")]
    assert bp.root == {"v": "a", "v2": "a"}
    assert bp.storage["v"] == bp.storage["v2"] == bp.storage["a"] == ("arena", "a")
    assert "v" not in _iv(bp) and _iv(bp)["a"] == (0, 4)
    assert bp.consts == []  # the shape is never bound by a launch


def _residual(z_out: bool = False, z_later: bool = False, z_input: bool = False, twice: bool = False,
              n_z: int = 256) -> tuple:
    """x -> A (Relu) -> c; zin -> B (Relu) -> z; F: Add(c, z) -> s (offers s in z's place); G -> y."""
    nodes = [Node("Relu", "A", ["x"], ["c"]),
             Node("Identity" if z_input else "Relu", "B", ["zin"], ["z"]),
             Node("Add", "F", ["z" if twice else "c", "z"], ["s"]),
             Node("Mul" if z_later else "Relu", "G", ["s", "z"] if z_later else ["s"], ["y"])]
    g = _graph(nodes, {"x": (256,), "zin": (n_z,), "c": (256,), "z": (n_z,), "s": (256,), "y": (256,)},
               ["x", "zin"], ["y"] + (["z"] if z_out else []))
    return g, FakeLowerer(g, offers={"F": lambda ctx: ctx.may_update(0, 1)})


def test_in_place_offer_taken():
    g, lower = _residual()
    bp = _plan(g, lowerer=lower)
    assert bp.root == {"s": "z"} and bp.storage["s"] == bp.storage["z"]
    assert "s" not in _iv(bp) and _iv(bp)["z"] == (1, 3)  # z's buffer lives on as s until G reads it


@pytest.mark.parametrize("case", ["z_out", "z_later", "z_input", "twice", "size"])
def test_in_place_offer_refused(case):
    """Not when the input is handed back, read later, a graph input (through a view), read twice
    by the node, or of another size."""
    g, lower = _residual(z_out=case == "z_out", z_later=case == "z_later", z_input=case == "z_input",
                         twice=case == "twice", n_z=128 if case == "size" else 256)
    bp = _plan(g, lowerer=lower)
    assert "s" not in bp.root and "s" in _iv(bp)


def test_view_of_an_output_written_in_place_follows_the_owner():
    """s is written in z's place and a view of s is read afterwards: the view points at z, whose
    lifetime covers that read."""
    nodes = [Node("Relu", "A", ["x"], ["c"]), Node("Relu", "B", ["x"], ["z"]), Node("Add", "F", ["c", "z"], ["s"]),
             Node("Flatten", "V", ["s"], ["sv"]), Node("Relu", "G", ["sv"], ["y"])]
    g = _graph(nodes, {"x": (256,), "c": (256,), "z": (256,), "s": (256,), "sv": (256,), "y": (256,)}, ["x"], ["y"])
    bp = _plan(g, lowerer=FakeLowerer(g, offers={"F": lambda ctx: ctx.may_update(0, 1)}))
    assert bp.root == {"sv": "z", "s": "z"}
    assert _iv(bp)["z"] == (1, 4)


LAYOUT = PaddedLayout(rows=18, pitch=20, top=1, left=1, slack=64)


def _bottleneck(pairs: int = 2, mid_out: bool = False, mid_again: bool = False) -> tuple:
    """Per pair i: P_i (1x1 conv, offers a padded output) -> m_i -> Q_i (3x3 conv, reads m_i padded)."""
    nodes, shapes, prev = [], {"x": (1, 4, 16, 16)}, "x"
    for i in range(pairs):
        nodes += [Node("Conv", f"P{i}", [prev], [f"m{i}"]), Node("Conv", f"Q{i}", [f"m{i}"], [f"y{i}"])]
        shapes.update({f"m{i}": (1, 4, 16, 16), f"y{i}": (1, 4, 16, 16)})
        prev = f"y{i}"
    outs = [prev] + (["m0"] if mid_out else [])
    if mid_again:
        nodes.append(Node("Relu", "E", ["m0"], ["e"]))
        shapes["e"] = (1, 4, 16, 16)
        outs.append("e")
    g = _graph(nodes, shapes, ["x"], outs)

    def offer_out(ctx: LowerCtx) -> None:
        ctx.offer_padded_out = True

    def offer_in(ctx: LowerCtx) -> None:
        ctx.offer_padded_in = LAYOUT

    offers = {f"P{i}": offer_out for i in range(pairs)}
    offers.update({f"Q{i}": offer_in for i in range(pairs)})
    return g, FakeLowerer(g, offers=offers)


def test_padded_offers_taken_and_slots_shared():
    """Both members of a pair are lowered again with the layout fixed; the padded tensors get
    zeroed buffers of their own (outside the arena), one shared by the two of disjoint lifetime."""
    g, lower = _bottleneck()
    bp = _plan(g, lowerer=lower)
    assert bp.padded == {"m0": LAYOUT, "m1": LAYOUT}
    relowered = [c for c in lower.calls if c[1] is not None or c[2] is not None]
    assert relowered == [("P0", None, LAYOUT), ("Q0", LAYOUT, None), ("P1", None, LAYOUT), ("Q1", LAYOUT, None)]
    assert "m0" not in _iv(bp) and "m1" not in _iv(bp)
    assert bp.pad_slot == {"m0": 0, "m1": 0} and bp.pad_sizes == [LAYOUT.nbytes(1, 4)]
    assert bp.storage["m0"] == bp.storage["m1"] == ("pad", 0)
    assert bp.planned_bytes == bp.arena_size + LAYOUT.nbytes(1, 4)


@pytest.mark.parametrize("mid_out,mid_again", [(True, False), (False, True)])
def test_padded_offer_refused(mid_out, mid_again):
    """Not for a tensor handed back or read by another node."""
    g, lower = _bottleneck(1, mid_out, mid_again)
    bp = _plan(g, lowerer=lower)
    assert bp.padded == {} and "m0" in _iv(bp)
    assert all(c[1] is None and c[2] is None for c in lower.calls)


def test_scratch_lives_over_its_nodes_launches():
    """A node of three launches with two scratch buffers: each lives from the node's first
    launch to its last use, at the largest size asked; both share the arena with activations."""
    def three(ctx: LowerCtx) -> list:
        s0, s1 = ctx.scratch(3000), ctx.scratch(100)
        return [Launch("fake", "k1", (1,), [ctx.buf(0), s0]),
                Launch("fake", "k2", (1,), [Scratch(5000, 0), s1]),
                Launch("fake", "k3", (1,), [s0, ctx.out(0)])]

    g = _chain()
    bp = _plan(g, lowerer=FakeLowerer(g, launches={"B": three}))
    s0, s1 = scratch_name("B", 0), scratch_name("B", 1)
    assert {(iv.name, iv.nbytes, iv.start, iv.end) for iv in bp.scratch} == {(s0, 5000, 1, 3), (s1, 100, 1, 2)}
    # b is written from the node's first step; C, the next node, comes after B's three launches
    assert _iv(bp)["a"] == (0, 1) and _iv(bp)["b"] == (1, 4)
    assert bp.scratch_bytes == 5100
    _assert_no_overlap(bp)


def test_constants_read_by_kernels_and_views_of_constants():
    nodes = [Node("Add", "A", ["x", "w"], ["y"]), Node("Reshape", "R", ["w", "shape"], ["wv"]),
             Node("Mul", "B", ["y", "wv"], ["z"])]
    w = np.ones(256, np.float32)
    g = _graph(nodes, {"x": (256,), "y": (256,), "wv": (256,), "z": (256,)}, ["x"], ["z"],
               {"w": w, "shape": np.array([256], np.int64)})
    bp = _plan(g)
    assert bp.consts == ["w"]  # "shape" is never bound
    assert bp.storage["w"] == bp.storage["wv"] == ("const", "w")
    assert "w" not in _iv(bp)


def test_zero_copy_candidates():
    """Inputs read only with unaligned loads, and outputs no host step or other output shares,
    may be bound to host arrays; an input read with aligned loads, one handed back (through a
    view) and a host-read tensor may not. Outputs are bound from the first step that holds them."""
    def unaligned_read(ctx: LowerCtx) -> list:
        return [Launch("fake", "mm", (1,), [Buf(ctx.node.inputs[0], unaligned=True),
                                            Buf(ctx.node.inputs[1], unaligned=True), ctx.out(0)])]

    nodes = [Node("MatMul", "M", ["a", "b"], ["ab"]), Node("Relu", "R", ["c"], ["cr"]),
             Node("Flatten", "V", ["d"], ["dv"]), Node("Relu", "H", ["cr"], ["h"]),
             Node("Relu", "E", ["ab"], ["e"])]
    g = _graph(nodes, {k: (64,) for k in ("a", "b", "ab", "c", "cr", "d", "dv", "h", "e")},
               ["a", "b", "c", "d"], ["e", "dv", "h", "ab"])
    bp = _plan(g, {"H": HOST}, FakeLowerer(g, launches={"M": unaligned_read}), zero_copy=True)
    assert set(bp.zero_copy) == {"a", "b", "e", "ab"}
    assert bp.zero_copy["a"] == [(0, 0)] and bp.zero_copy["b"] == [(0, 1)]
    assert sorted(bp.zero_copy["ab"]) == [(0, 2), (4, 0)]  # written by M, read by E
    assert bp.bind_outputs_at == 0
    assert _plan(g, {"H": HOST}, FakeLowerer(g, launches={"M": unaligned_read})).zero_copy == {}


def test_limits_from_the_target():
    g = _chain(1 << 16)  # 256 KiB tensors
    with pytest.raises(OutOfDeviceMemory, match="largest allocation"):
        _plan(g, target=Target(type="cpu", max_alloc_size=100 << 10))
    with pytest.raises(OutOfDeviceMemory, match="device's memory"):
        _plan(g, target=Target(type="cpu", global_mem_size=300 << 10))
    # an arena over the largest allocation: whole buffers shared by disjoint lifetimes instead
    bp = _plan(g, target=Target(type="cpu", max_alloc_size=300 << 10))
    assert not bp.use_arena and bp.offsets == {}
    assert bp.slot_of == {"x": 0, "a": 1, "b": 0, "y": 1} and bp.slot_sizes == [256 << 10, 256 << 10]
    assert bp.storage["x"] == bp.storage["b"] == ("slot", 0)


def test_stage_places_splits_and_stops():
    """stage(): the last node of a stage runs on the host; sub-batches only where the options or
    the target's policy give a budget (not on the GPU family)."""
    n = 4
    nodes = [Node("Relu", "r1", ["x"], ["a"]), Node("Sigmoid", "s1", ["a"], ["b"])]
    g = _graph(nodes, {k: (n, 8, 4, 4) for k in "xab"}, ["x"], ["b"])
    st0 = planning.stage(g, None, ["b"], TARGET, PlanOptions(sub_batch_bytes=0))
    assert st0.where == {"r1": DEVICE, "s1": DEVICE} and not st0.slices
    split = planning.stage(g, None, ["b"], TARGET, PlanOptions(sub_batch_bytes=1))
    assert [nd.name for nd in split.graph.nodes][:2] == ["r1[0:1]", "s1[0:1]"] and split.slices
    assert all(w == DEVICE for w in split.where.values()) and len(split.placement) == 2
    gpu = planning.stage(g, None, ["b"], Target(type="cpu", cache_bytes=1 << 10).with_family("gpu"),
                         PlanOptions())
    assert not gpu.slices
    assert planning.stage(g, None, ["b"], Target(type="cpu", cache_bytes=1 << 10), PlanOptions()).slices
    g.values["b"] = Value("b", F32, (n, "k", 4, 4))  # a stage's node whose output shape depends on data
    staged = planning.stage(g, 2, ["b"], TARGET, PlanOptions())
    assert staged.where == {"r1": DEVICE, "s1": HOST}


# --- properties on random graphs -------------------------------------------------------------------
def _assert_no_overlap(bp: planning.BufferPlan) -> None:
    ivs = bp.intervals
    for i, a in enumerate(ivs):
        oa, sa = bp.offsets[a.name]
        assert sa >= a.nbytes and oa + sa <= bp.arena_size and oa % TARGET.base_align == 0
        for b in ivs[i + 1:]:
            if not (a.end < b.start or b.end < a.start):
                ob, sb = bp.offsets[b.name]
                assert oa + sa <= ob or ob + sb <= oa, (a, b)


def _assert_uses_inside_lifetimes(bp: planning.BufferPlan) -> None:
    """Every buffer a step reads or writes is live at that step (scratch included)."""
    life = {iv.name: iv for iv in bp.intervals}
    host_made = {o for s in bp.steps if isinstance(s, HostNodeStep) for o in s.node.outputs}
    for k, s in enumerate(bp.steps):
        names = []
        if isinstance(s, KernelLaunchStep):
            for a in s.launch.args:
                if isinstance(a, Buf) and bp.graph.values[a.name].const is None:
                    names.append(bp.resolve(a.name))
                elif isinstance(a, Scratch):
                    names.append(scratch_name(s.node.name, a.slot))
        elif isinstance(s, HostNodeStep):
            # what a host step reads from the device (a host step's output is read on the host)
            names = [bp.resolve(i) for i in s.node.inputs if i and i not in host_made and bp.resolve(i) in life]
        elif isinstance(s, UploadStep):
            names = [s.name]
        for t in names:
            assert t in life and life[t].start <= k <= life[t].end, (k, t, life.get(t))
    for o in bp.outputs:  # outputs made on the device live to the end
        if bp.resolve(o) in life:
            assert life[bp.resolve(o)].end == len(bp.steps)


@st.composite
def _random_graph(draw) -> tuple:
    """A random DAG of unary/binary nodes over [1..6] KiB tensors, some on the host, some offering
    in-place updates, some views."""
    n_nodes = draw(st.integers(1, 12))
    sizes = {"x0": draw(st.integers(1, 6)) * 256, "x1": draw(st.integers(1, 6)) * 256}
    avail = ["x0", "x1"]
    nodes, where, offers = [], {}, {}
    for k in range(n_nodes):
        kind = draw(st.sampled_from(["unary", "binary", "view", "host"]))
        a = draw(st.sampled_from(avail))
        out = f"t{k}"
        if kind == "view":
            nodes.append(Node("Flatten", f"n{k}", [a], [out]))
            sizes[out] = sizes[a]
        elif kind == "binary":
            b = draw(st.sampled_from(avail))
            nodes.append(Node("Add", f"n{k}", [a, b], [out]))
            sizes[out] = max(sizes[a], sizes[b])
            if draw(st.booleans()):
                offers[f"n{k}"] = lambda ctx: ctx.may_update(0, 1)
        else:
            nodes.append(Node("Relu", f"n{k}", [a], [out]))
            sizes[out] = sizes[a]
            where[f"n{k}"] = HOST if kind == "host" else DEVICE
        avail.append(out)
    outputs = draw(st.lists(st.sampled_from(avail[2:] or ["x0"]), min_size=1, max_size=3, unique=True))
    g = _graph(nodes, {k: (v,) for k, v in sizes.items()}, ["x0", "x1"], outputs)
    return g, where, offers


@settings(max_examples=150, deadline=None)
@given(_random_graph())
def test_random_graphs_keep_every_use_live_and_never_overlap(spec):
    g, where, offers = spec
    bp = _plan(g, where, FakeLowerer(g, offers=offers))
    _assert_uses_inside_lifetimes(bp)
    _assert_no_overlap(bp)
    # a buffer written in place is one the node read, of the same size
    for t, owner in bp.root.items():
        assert lowered.nbytes(g, t) == lowered.nbytes(g, owner) or t in bp.slices
    # the arena holds at least the largest set of simultaneously live buffers
    steps = range(len(bp.steps) + 1)
    peak = max((sum(-(-iv.nbytes // 256) * 256 for iv in bp.intervals if iv.start <= s <= iv.end) for s in steps),
               default=0)
    assert bp.arena_size >= peak


def test_interval_is_memory_interval():
    """The planner hands runtime.memory its own Interval type (one liveness record everywhere)."""
    bp = _plan(_chain())
    assert all(isinstance(iv, Interval) for iv in bp.intervals)
