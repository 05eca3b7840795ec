"""Sub-batches (runtime/sub_batch.py): stretches of a batched CNN run a few images at a time.

Every model is checked against onnx.reference / onnxruntime, with the split forced by
CLGLOW_SUB_BATCH_BYTES (the per-piece activation budget) and compared with the same session
options and the split off."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.config import PlanOptions
from clglow.ir import Graph, Node, Value
from clglow.lower.base import DeviceInfo
from clglow.models.resnet import resnet
from clglow.runtime import sub_batch

sys.path.insert(0, os.path.dirname(__file__))
from models import mobilenet_se, ort_run  # noqa: E402  (tests/models.py)

_TAG = re.compile(r"\[(\d+):(\d+)\]$")


def _session(model: onnx.ModelProto, budget: int, monkeypatch) -> clglow.InferenceSession:
    monkeypatch.setenv("CLGLOW_SUB_BATCH_BYTES", str(budget))
    return clglow.InferenceSession(model.SerializeToString())


def _pieces(sess: clglow.InferenceSession) -> dict:
    """{original node name: [(i0, i1), ...]} of the last plan's sub-batch pieces."""
    out: dict = {}
    for node in sess._engine.last_plan.graph.nodes:
        m = _TAG.search(node.name)
        if m:
            out.setdefault(node.name[:m.start()], []).append((int(m.group(1)), int(m.group(2))))
    return out


def _run_twice(sess, feeds, want, tol=2e-4):
    for _ in range(2):  # the second run reuses every piece's buffers
        for got, ref in zip(sess.run(None, feeds), want):
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.cpu_family
def test_resnet_runs_its_stages_in_pieces(monkeypatch):
    """A bottleneck ResNet at batch 4 (64x64 images): with a 300 KB budget the stem and layer1
    (256 KB per image) run one image at a time, layer2 two, layer3-4 (64 KB and less) whole;
    residuals updated in place and padded activations still taken inside the pieces. Outputs
    match onnxruntime, and the split needs less activation memory than the whole batch."""
    model = resnet(50, batch=4, image_size=64, num_classes=10, seed=1)
    feeds = {"data": np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)}
    want = ort_run(model, feeds)
    whole = _session(model, 0, monkeypatch)
    _run_twice(whole, feeds, want)
    assert not _pieces(whole)
    split = _session(model, 300 << 10, monkeypatch)
    _run_twice(split, feeds, want)
    pieces = _pieces(split)
    assert pieces["conv1/Conv"] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert pieces["layer1.2.conv3/Conv"] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert pieces["layer2.1.conv2/Conv"] == [(0, 2), (2, 4)]
    assert "layer4.1.conv1/Conv" not in pieces
    plan, base = split._engine.last_plan, whole._engine.last_plan
    assert plan.arena_bytes < base.arena_bytes
    # the stride-1 3x3 convs read their padded inputs in every piece (no conv_phases copy), and
    # the conv3s update their residual in place inside a piece (not at a piece's exit slice)
    phases = [s.label for s in plan.steps if getattr(s, "kernel_name", "") == "conv_phases"]
    assert phases and not [lb for lb in phases if re.match(r"layer(1\.\d|\d\.[1-9])\.conv2", lb)], phases
    assert any(plan.root.get(f"layer1.1.out[{i}:{i + 1}]") for i in range(4))


@pytest.mark.parametrize("batch,budget,sizes", [(3, 1, [(0, 1), (1, 2), (2, 3)]),
                                                 (3, 40 << 10, [(0, 2), (2, 3)])])
def test_uneven_pieces(monkeypatch, batch, budget, sizes):
    """A batch the piece size does not divide: the last piece is smaller (ResNet-18, 32x32)."""
    model = resnet(18, batch=batch, image_size=32, num_classes=10, seed=2)
    feeds = {"data": np.random.default_rng(1).standard_normal((batch, 3, 32, 32)).astype(np.float32)}
    sess = _session(model, budget, monkeypatch)
    _run_twice(sess, feeds, ort_run(model, feeds))
    assert _pieces(sess)["layer1.0.conv1/Conv"] == sizes


def _chain_model(batch: int, extra_output: bool = False, batched_const: bool = False) -> onnx.ModelProto:
    """x -> conv -> relu -> conv (+ x) -> GAP -> Mul(SE-style [N, C, 1, 1] scale) -> Add(c) -> y,
    optionally with the relu's output handed back too, or Add's constant carrying a batch axis."""
    rng = np.random.default_rng(3)
    c = 8
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal((batch if batched_const else 1, c, 1, 1)).astype(np.float32),
                                     "k")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["g"]),
             helper.make_node("Sigmoid", ["g"], ["gate"]),
             helper.make_node("Mul", ["s", "gate"], ["m"]),
             helper.make_node("Add", ["m", "k"], ["y"])]
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    outs = [f("y", [batch, c, 12, 12])] + ([f("r1", [batch, c, 12, 12])] if extra_output else [])
    g = helper.make_graph(nodes, "chain", [f("x", [batch, c, 12, 12])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("extra_output", [False, True])
def test_graph_input_and_outputs_are_sliced_in_place(monkeypatch, extra_output):
    """The graph input is read and the outputs (the last one, and a tensor inside the segment
    handed back too) are written piece by piece in place; broadcast operands (an SE gate
    [N, C, 1, 1], a constant [1, C, 1, 1]) stay per piece."""
    model = _chain_model(4, extra_output)
    feeds = {"x": np.random.default_rng(4).standard_normal((4, 8, 12, 12)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)
    sess = _session(model, 1, monkeypatch)
    _run_twice(sess, feeds, want)
    assert len(_pieces(sess)) >= 4
    assert all(v == [(i, i + 1) for i in range(4)] for v in _pieces(sess).values())


def test_constant_with_a_batch_axis_is_not_split(monkeypatch):
    """An Add whose constant has its own batch axis is not per-image: its block runs whole (the
    convs before it still in pieces)."""
    model = _chain_model(4, batched_const=True)
    feeds = {"x": np.random.default_rng(5).standard_normal((4, 8, 12, 12)).astype(np.float32)}
    sess = _session(model, 1, monkeypatch)
    _run_twice(sess, feeds, ReferenceEvaluator(model).run(None, feeds))
    readers = [n.name for n in sess._engine.last_plan.graph.nodes if "k" in n.inputs]
    assert readers and not any(_TAG.search(r) for r in readers)
    assert _pieces(sess)


def test_live_weights_are_not_images(monkeypatch):
    """A conv whose weights are a graph input shaped [N, ...] (Cout = N) is not per-image: it runs
    whole, and the result is the reference's."""
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    # sizes whose per-image slices would be sub-buffer aligned (W: 1 KB per "image")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 2, 2]),
                           helper.make_node("Relu", ["c"], ["r"]),
                           helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                           helper.make_node("Sigmoid", ["p"], ["y"])], "live_w",
                          [f("x", [4, 16, 8, 8]), f("w", [4, 16, 4, 4])], [f("y", [4, 4, 4, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((4, 16, 8, 8)).astype(np.float32),
             "w": rng.standard_normal((4, 16, 4, 4)).astype(np.float32)}
    sess = _session(model, 1, monkeypatch)
    _run_twice(sess, feeds, ReferenceEvaluator(model).run(None, feeds))
    assert "Conv_0" not in _pieces(sess)


def test_mobilenet_se_in_pieces(monkeypatch):
    """Depthwise convs, squeeze-excite gates and residual Adds inside pieces (batch 2)."""
    model = mobilenet_se(batch=2, image_size=32, num_classes=10, seed=3)
    feeds = {"input": np.random.default_rng(6).standard_normal((2, 3, 32, 32)).astype(np.float32)}
    sess = _session(model, 1, monkeypatch)
    _run_twice(sess, feeds, ort_run(model, feeds), tol=1e-3)
    assert _pieces(sess)


def _graph(nodes: list, shapes: dict, inputs: list, outputs: list) -> Graph:
    values = {k: Value(k, np.dtype(np.float32), s) for k, s in shapes.items()}
    return Graph(nodes, values, inputs, outputs, {"": 13})


def test_segments_cut_where_one_tensor_is_live():
    """Blocks end where a single tensor is live; a skip connection keeps its block together,
    a node that is not per-image ends the segment, blocks of one piece size merge."""
    n = 4
    big = (n, 16, 32, 32)  # 64 KB per image
    shapes = {k: big for k in ("x", "a", "b", "c", "d", "e")}
    shapes["f"] = (n, 16 * 32 * 32)
    nodes = [Node("Relu", "r1", ["x"], ["a"]),
             Node("Relu", "r2", ["a"], ["b"]),
             Node("Add", "add", ["a", "b"], ["c"]),  # a is live across r2: {a, b} before add
             Node("Relu", "r3", ["c"], ["d"]),
             Node("Relu", "r4", ["d"], ["e"]),
             Node("Flatten", "flat", ["e"], ["f"], {"axis": 1})]
    g = _graph(nodes, shapes, ["x"], ["f"])
    segs = sub_batch._segments(g, {nd.name for nd in nodes}, 64 << 10)
    assert segs == [(0, 5, 1, n)]
    # budget for two images: pieces of 2; for the whole batch: no segment
    assert sub_batch._segments(g, {nd.name for nd in nodes}, 128 << 10) == [(0, 5, 2, n)]
    assert sub_batch._segments(g, {nd.name for nd in nodes}, 256 << 10) == []
    # a host node in the middle splits the run
    assert sub_batch._segments(g, {"r1", "r2", "add", "r4"}, 64 << 10) == [(0, 3, 1, n)]


def test_split_graph_slices_and_alignment():
    """Boundary tensors become slices at image offsets; pieces whose offsets would not be
    sub-buffer aligned grow until they are (or the segment runs whole)."""
    n = 4
    shapes = {"x": (n, 8, 4, 4), "a": (n, 8, 4, 4), "b": (n, 8, 4, 4)}  # 512 bytes per image
    nodes = [Node("Relu", "r1", ["x"], ["a"]), Node("Sigmoid", "s1", ["a"], ["b"])]
    g = _graph(nodes, shapes, ["x"], ["b"])
    info = DeviceInfo(type="cpu", base_align=512, cache_bytes=0)
    g2, slices = sub_batch.split(g, {"r1", "s1"}, ["b"], info, PlanOptions())
    assert g2 is g and not slices  # no cache size known: no split
    forced = PlanOptions(sub_batch_bytes=1)
    g2, slices = sub_batch.split(g, {"r1", "s1"}, ["b"], info, forced)
    assert [nd.name for nd in g2.nodes] == [f"{nm}[{i}:{i + 1}]" for i in range(4) for nm in ("r1", "s1")]
    assert slices["x[2:3]"] == sub_batch.Slice("x", 1024, 512) and slices["b[3:4]"].offset == 1536
    assert "a[0:1]" not in slices and g2.values["a[0:1]"].shape == (1, 8, 4, 4)
    g3, slices3 = sub_batch.split(g, {"r1", "s1"}, ["b"], DeviceInfo(type="cpu", base_align=1024), forced)
    assert [nd.name for nd in g3.nodes][:2] == ["r1[0:2]", "s1[0:2]"] and slices3["b[2:4]"].offset == 1024
    g4, slices4 = sub_batch.split(g, {"r1", "s1"}, ["b"], DeviceInfo(type="cpu", base_align=4096), forced)
    assert g4 is g and not slices4


def test_budget_follows_the_target_and_options():
    """The budget is a policy of the target (its family and cache) unless the options force one;
    the environment only gives the options' default."""
    cpu = DeviceInfo(type="cpu", cache_bytes=32 << 20)
    assert sub_batch.budget(cpu, PlanOptions()) == 2 << 20
    assert sub_batch.budget(DeviceInfo(type="gpu", cache_bytes=32 << 20), PlanOptions()) == 0
    assert sub_batch.budget(cpu.with_family("gpu"), PlanOptions()) == 0  # the GPU family on a CPU device
    assert sub_batch.budget(DeviceInfo(type="cpu", cache_bytes=0), PlanOptions()) == 0
    # a huge reported cache (a guest's view of the host's L3) is capped: 480 MB gives 4 MiB, not 30 MB
    assert sub_batch.budget(DeviceInfo(type="cpu", cache_bytes=480 << 20), PlanOptions()) == 4 << 20
    assert sub_batch.budget(cpu, PlanOptions(sub_batch_bytes=0)) == 0
    assert sub_batch.budget(DeviceInfo(type="gpu"), PlanOptions(sub_batch_bytes=4096)) == 4096


def test_budget_default_from_the_environment(monkeypatch):
    monkeypatch.setenv("CLGLOW_SUB_BATCH_BYTES", "0")
    assert sub_batch.budget(DeviceInfo(type="cpu", cache_bytes=32 << 20), PlanOptions.from_env()) == 0
    monkeypatch.setenv("CLGLOW_SUB_BATCH_BYTES", "65536")
    assert sub_batch.budget(DeviceInfo(type="gpu"), PlanOptions.from_env()) == 65536


def _chain(n: int = 4):
    """Five per-image Relus on [n, 16, 64, 64] (256 KB an image), then a Flatten that is not."""
    big = (n, 16, 64, 64)
    shapes = {k: big for k in ("x", "a", "b", "c", "d", "e")}
    shapes["f"] = (n, 16 * 64 * 64)
    names = ["x", "a", "b", "c", "d", "e"]
    nodes = [Node("Relu", f"r{i}", [names[i]], [names[i + 1]]) for i in range(5)]
    nodes.append(Node("Flatten", "flat", ["e"], ["f"], {"axis": 1}))
    return _graph(nodes, shapes, ["x"], ["f"]), {nd.name for nd in nodes}


def test_budget_from_the_tuning_database():
    """A stored sub_batch entry for the graph's key is the budget (before the cache fraction);
    forced options still win; another key, a malformed entry or a GPU target ignore it."""
    from clglow.lower.tunable import key_str, params_items

    g, dev_nodes = _chain()
    key = sub_batch.graph_key(g, dev_nodes)
    assert key == (4, 256 << 10, 5)

    def entry(k, p):
        return (("sub_batch", key_str(k), params_items(p)),)

    cpu = DeviceInfo(type="cpu", cache_bytes=32 << 20)
    tuned = cpu.__class__(**{**cpu.__dict__, "tuned": entry(key, {"bytes": 512 << 10})})
    assert sub_batch.budget(cpu, PlanOptions(), key) == 2 << 20
    assert sub_batch.budget(tuned, PlanOptions(), key) == 512 << 10
    assert sub_batch.budget(tuned, PlanOptions(), (4, 1, 5)) == 2 << 20
    assert sub_batch.budget(tuned, PlanOptions(sub_batch_bytes=4096), key) == 4096
    bad = cpu.__class__(**{**cpu.__dict__, "tuned": entry(key, {"bytes": "x"})})
    assert sub_batch.budget(bad, PlanOptions(), key) == 2 << 20
    assert sub_batch.budget(tuned.with_family("gpu"), PlanOptions(), key) == 0
    # the stored budget decides the split: 512 KB a piece is pieces of two images
    g2, slices = sub_batch.split(g, dev_nodes, ["f"], tuned, PlanOptions())
    assert [nd.name for nd in g2.nodes][:2] == ["r0[0:2]", "r1[0:2]"] and slices
    assert sub_batch.split(g, dev_nodes, ["f"], cpu, PlanOptions())[0] is g  # 2 MB: the whole batch fits


def test_budget_candidates_are_distinct_segmentations():
    """The tuner measures one budget per distinct segmentation, the profile's default first."""
    from clglow.runtime.sub_batch_tune import candidates

    g, dev_nodes = _chain()
    cpu = DeviceInfo(type="cpu", cache_bytes=32 << 20)
    key = sub_batch.graph_key(g, dev_nodes)
    got = candidates(cpu, g, dev_nodes, key)
    assert got[0] == 2 << 20  # the default: no split (as 0 and every budget of >= 1 MB)
    segs = [sub_batch.segmentation(g, dev_nodes, b) for b in got]
    assert got[1:] == [256 << 10, 512 << 10]  # single images, pairs
    assert segs == [(), ((0, 5, 1),), ((0, 5, 2),)]
    assert sub_batch.SUB_BATCH_FAMILY.applies(cpu) is False  # never in the per-shape search


@pytest.mark.slow
def test_tune_budget_stores_a_measured_choice(tmp_path, monkeypatch):
    """tune_budget on a small batched CNN: the candidates run, agree, and the database gets an
    entry that later sessions read (their outputs unchanged)."""
    from clglow.runtime.device import select_device
    from clglow.runtime.sub_batch_tune import tune_budget
    from clglow.runtime.tuning_db import TuningDB

    monkeypatch.delenv("CLGLOW_SUB_BATCH_BYTES", raising=False)
    model = resnet(18, batch=4, image_size=64, num_classes=10, seed=3)
    dev = select_device()
    target = dev.target("cpu")
    if not target.sub_batching:
        pytest.skip("the device does not sub-batch")
    db = TuningDB(tmp_path / "db.json", {"device": "test"})
    res = tune_budget(dev, target, model, rounds=2, db=db)
    assert res is not None and res.key[0] == 4 and res.default in res.times and res.chosen in res.times
    entries = db.entries()
    assert len(entries) == 1 and next(iter(entries.values()))["params"] == {"bytes": res.chosen}
    assert tune_budget(dev, target, model, rounds=2, db=db).source == "db"
