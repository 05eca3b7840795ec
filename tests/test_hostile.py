"""Hostile models and inputs (issue 6): a clean, specific error every time, naming the culprit.

A generated corpus of bad models (parse, structure, ops, shapes, sizes, external data) and
bad run-time arguments. Each case asserts the clglow error class and that the message
names the node, tensor, input or file involved. The whole load-time corpus is also replayed
in a fresh child interpreter, which must exit cleanly (nothing in it may crash the process).
After every run-time failure the same session must still run a valid input correctly, and
one session run from 8 threads at once gives the same results as sequential runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import clglow
from clglow.errors import (ClglowError, InvalidArgument, InvalidModel, InvalidProtobuf,
                           UnsupportedOperator)

F = TensorProto.FLOAT


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=(), opset=13, extra_opsets=(), name="hostile"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def _good() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [_vi("x", [1, 3, 4, 4])],
                  [_vi("y", [1, 3, 4, 4])])


# ------------------------------------------------------------------------------------------------
# Load-time corpus. Each builder gets a private folder and returns what to pass to InferenceSession
# (bytes or a path). Cases: (id, builder, expected class, fragments that must be in the message).
# ------------------------------------------------------------------------------------------------
def _write(folder, model, name="model.onnx"):
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(model.SerializeToString() if isinstance(model, onnx.ModelProto) else model)
    return path


def b_truncated(d):
    data = _good().SerializeToString()
    return _write(d, data[: len(data) - 7], "truncated.onnx")


def b_garbage(d):
    return _write(d, np.random.default_rng(1234).bytes(4096), "garbage.onnx")


def b_empty_bytes(d):
    return b""


def b_empty_file(d):
    return _write(d, b"", "empty.onnx")


def b_non_model_protobuf(d):
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "t")
    return _write(d, t.SerializeToString(), "tensor.pb")


def b_graph_proto_not_model(d):
    return _write(d, _good().graph.SerializeToString(), "graph.pb")


def b_missing_path(d):
    return os.path.join(d, "no_such_model.onnx")


def b_not_a_model_object(d):
    return 12345


def b_empty_graph(d):
    return _model([], [], []).SerializeToString()


def b_output_never_produced(d):
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [_vi("x", [2])],
                  [_vi("y", [2]), _vi("ghost_out", [2])]).SerializeToString()


def b_duplicate_producer(d):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"),
             helper.make_node("Neg", ["x"], ["y"], name="second_writer")]
    return _model(nodes, [_vi("x", [2])], [_vi("y", [2])]).SerializeToString()


def b_duplicate_graph_outputs(d):
    return _model([helper.make_node("Relu", ["x"], ["dup_y"], name="relu0")], [_vi("x", [2])],
                  [_vi("dup_y", [2]), _vi("dup_y", [2])]).SerializeToString()


def b_cycle(d):
    nodes = [helper.make_node("Add", ["x", "loop_b"], ["loop_a"], name="cyc_a"),
             helper.make_node("Relu", ["loop_a"], ["loop_b"], name="cyc_b")]
    return _model(nodes, [_vi("x", [2])], [_vi("loop_b", [2])]).SerializeToString()


def b_unknown_op(d):
    return _model([helper.make_node("FrobnicateX", ["x"], ["y"], name="frob_node")], [_vi("x", [2])],
                  [_vi("y", [2])]).SerializeToString()


def b_unknown_domain(d):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok_relu"),
             helper.make_node("Mystery", ["r"], ["y"], name="mystery_node", domain="com.evil")]
    return _model(nodes, [_vi("x", [2])], [_vi("y", [2])], extra_opsets=[("com.evil", 1)]).SerializeToString()


def b_opset_999(d):
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu999")], [_vi("x", [2])], [_vi("y", [2])],
               opset=999)
    return m.SerializeToString()


def b_conv_channels(d):
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "conv_w")
    node = helper.make_node("Conv", ["x", "conv_w"], ["y"], name="bad_conv", pads=[1, 1, 1, 1])
    return _model([node], [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 8, 8])], [w]).SerializeToString()


def b_gather_oob(d):
    idx = numpy_helper.from_array(np.array([0, 7], np.int64), "gather_idx")
    node = helper.make_node("Gather", ["x", "gather_idx"], ["y"], name="bad_gather", axis=0)
    return _model([node], [_vi("x", [5, 4])], [_vi("y", [2, 4])], [idx]).SerializeToString()


def b_gather_oob_negative(d):
    idx = numpy_helper.from_array(np.array([-6], np.int64), "neg_idx")
    node = helper.make_node("Gather", ["x", "neg_idx"], ["y"], name="bad_gather_neg", axis=1)
    return _model([node], [_vi("x", [4, 5])], [_vi("y", [4, 1])], [idx]).SerializeToString()


def b_reshape_impossible(d):
    shp = numpy_helper.from_array(np.array([4, 5], np.int64), "rs_shape")
    node = helper.make_node("Reshape", ["x", "rs_shape"], ["y"], name="bad_reshape")
    return _model([node], [_vi("x", [2, 3])], [_vi("y", [4, 5])], [shp]).SerializeToString()


def b_matmul_inner(d):
    w = numpy_helper.from_array(np.ones((4, 5), np.float32), "mm_w")
    node = helper.make_node("MatMul", ["x", "mm_w"], ["y"], name="bad_matmul")
    return _model([node], [_vi("x", [2, 3])], [_vi("y", [2, 5])], [w]).SerializeToString()


def b_constant_of_shape_4tb(d):
    shp = numpy_helper.from_array(np.array([1 << 40], np.int64), "huge_shape")
    node = helper.make_node("ConstantOfShape", ["huge_shape"], ["c"], name="huge_cos",
                            value=numpy_helper.from_array(np.array([1.0], np.float32)))
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add_huge")
    return _model([node, add], [_vi("x", [1])], [_vi("y", ["M"])], [shp]).SerializeToString()


def b_initializer_over_cap(d):  # run with CLGLOW_MAX_TENSOR_BYTES=4096
    w = numpy_helper.from_array(np.ones((2048,), np.float32), "big_init")
    node = helper.make_node("Add", ["x", "big_init"], ["y"], name="add_big")
    return _model([node], [_vi("x", [2048])], [_vi("y", [2048])], [w]).SerializeToString()


def b_initializer_declared_huge(d):
    t = TensorProto(name="liar_init", data_type=F, dims=[1 << 20, 1 << 20])
    t.raw_data = b"\0" * 16
    node = helper.make_node("Add", ["x", "liar_init"], ["y"], name="add_liar")
    return _model([node], [_vi("x", [1])], [_vi("y", [1 << 20, 1 << 20])], [t]).SerializeToString()


def b_initializer_short_data(d):  # large: checked outside onnx.checker (see frontend.skeleton)
    t = TensorProto(name="short_init", data_type=F, dims=[64, 128])
    t.raw_data = b"\0" * 100
    node = helper.make_node("Add", ["x", "short_init"], ["y"], name="add_short")
    return _model([node], [_vi("x", [64, 128])], [_vi("y", [64, 128])], [t]).SerializeToString()


def b_initializer_duplicate(d):
    w = numpy_helper.from_array(np.ones((64, 128), np.float32), "dup_init")
    node = helper.make_node("Add", ["x", "dup_init"], ["y"], name="add_dup")
    return _model([node], [_vi("x", [64, 128])], [_vi("y", [64, 128])], [w, w]).SerializeToString()


def _ext_model(d, location, offset=None, length=None, data=b"\0" * 64, data_name="weights.bin"):
    if data is not None:
        with open(os.path.join(d, data_name), "wb") as f:
            f.write(data)
    t = TensorProto(name="ext_w", data_type=F, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    node = helper.make_node("Add", ["x", "ext_w"], ["y"], name="add_ext")
    sub = os.path.join(d, "model")
    os.makedirs(sub, exist_ok=True)
    return _write(sub, _model([node], [_vi("x", [4])], [_vi("y", [4])], [t]))


def b_ext_dotdot(d):
    return _ext_model(d, "../weights.bin")


def b_ext_absolute(d):
    return _ext_model(d, os.path.join(d, "weights.bin"))


def b_ext_symlink(d):
    path = _ext_model(d, "link.bin")
    os.symlink(os.path.join(d, "weights.bin"), os.path.join(d, "model", "link.bin"))
    return path


def b_ext_offset_past_end(d):
    path = _ext_model(d, "w.bin", offset=1000, length=16, data=None)
    with open(os.path.join(d, "model", "w.bin"), "wb") as f:
        f.write(b"\0" * 64)
    return path


def b_ext_length_past_end(d):
    path = _ext_model(d, "w.bin", offset=60, length=16, data=None)
    with open(os.path.join(d, "model", "w.bin"), "wb") as f:
        f.write(b"\0" * 64)
    return path


def b_ext_short_data(d):  # in range, but fewer bytes than the 4 floats the tensor declares
    path = _ext_model(d, "w.bin", offset=0, length=8, data=None)
    with open(os.path.join(d, "model", "w.bin"), "wb") as f:
        f.write(b"\0" * 64)
    return path


def b_ext_missing_file(d):
    return _ext_model(d, "not_there.bin", data=None)


def b_ext_from_bytes(d):
    with open(_ext_model(d, "weights.bin"), "rb") as f:
        return f.read()


LOAD_CASES = [
    ("truncated_protobuf", b_truncated, InvalidProtobuf, ["truncated.onnx"]),
    ("garbage_bytes", b_garbage, InvalidProtobuf, ["garbage.onnx"]),
    ("empty_bytes", b_empty_bytes, InvalidProtobuf, ["empty"]),
    ("empty_file", b_empty_file, InvalidProtobuf, ["empty.onnx"]),
    ("non_model_protobuf", b_non_model_protobuf, InvalidProtobuf, ["tensor.pb"]),
    ("graph_proto_not_model", b_graph_proto_not_model, InvalidProtobuf, ["graph.pb"]),
    ("missing_model_file", b_missing_path, InvalidModel, ["no_such_model.onnx"]),
    ("not_a_model_object", b_not_a_model_object, InvalidModel, ["int"]),
    ("empty_graph", b_empty_graph, InvalidModel, ["no outputs"]),
    ("output_never_produced", b_output_never_produced, InvalidModel, ["ghost_out"]),
    ("duplicate_producer", b_duplicate_producer, InvalidModel, ["'y'"]),
    ("duplicate_graph_outputs", b_duplicate_graph_outputs, InvalidModel, ["dup_y"]),
    ("cycle", b_cycle, InvalidModel, ["cyc_a"]),
    ("unknown_op", b_unknown_op, UnsupportedOperator, ["FrobnicateX", "frob_node"]),
    ("unknown_domain", b_unknown_domain, UnsupportedOperator, ["Mystery", "com.evil", "mystery_node"]),
    ("opset_999", b_opset_999, InvalidModel, ["999", "ai.onnx"]),
    ("conv_channel_mismatch", b_conv_channels, InvalidModel, ["bad_conv"]),
    ("gather_indices_out_of_range", b_gather_oob, InvalidModel, ["bad_gather", "gather_idx"]),
    ("gather_negative_index_out_of_range", b_gather_oob_negative, InvalidModel, ["bad_gather_neg", "neg_idx"]),
    ("impossible_reshape", b_reshape_impossible, InvalidModel, ["bad_reshape"]),
    ("matmul_inner_mismatch", b_matmul_inner, InvalidModel, ["bad_matmul"]),
    ("constant_of_shape_4tb", b_constant_of_shape_4tb, InvalidModel, ["huge_cos", "CLGLOW_MAX_TENSOR_BYTES"]),
    ("initializer_over_cap", b_initializer_over_cap, InvalidModel, ["big_init", "4096"]),
    ("initializer_declared_huge", b_initializer_declared_huge, InvalidModel, ["liar_init"]),
    ("initializer_short_data", b_initializer_short_data, InvalidModel, ["short_init"]),
    ("initializer_duplicate", b_initializer_duplicate, InvalidModel, ["dup_init"]),
    ("external_dotdot", b_ext_dotdot, InvalidModel, ["ext_w", "outside"]),
    ("external_absolute", b_ext_absolute, InvalidModel, ["ext_w", "relative"]),
    ("external_symlink_outside", b_ext_symlink, InvalidModel, ["ext_w", "outside"]),
    ("external_offset_past_end", b_ext_offset_past_end, InvalidModel, ["ext_w", "past the end"]),
    ("external_length_past_end", b_ext_length_past_end, InvalidModel, ["ext_w", "past the end"]),
    ("external_short_data", b_ext_short_data, InvalidModel, ["ext_w"]),
    ("external_missing_file", b_ext_missing_file, InvalidModel, ["ext_w", "not_there.bin"]),
    ("external_data_from_bytes", b_ext_from_bytes, InvalidModel, ["ext_w"]),
]
CAP_ENV = {"initializer_over_cap": "4096"}


def _check_load(case_id, builder, cls, fragments, folder):
    """Loads the hostile model; returns None on the expected error, else a description of what went wrong."""
    model = builder(folder)
    t0 = time.perf_counter()
    try:
        clglow.InferenceSession(model)
    except ClglowError as e:
        msg = str(e)
        if type(e) is not cls:
            return f"{case_id}: expected {cls.__name__}, got {type(e).__name__}: {msg}"
        missing = [f for f in fragments if f not in msg]
        if missing:
            return f"{case_id}: message lacks {missing}: {msg}"
        if time.perf_counter() - t0 > 10:
            return f"{case_id}: took {time.perf_counter() - t0:.1f}s to fail"
        return None
    except Exception as e:  # noqa: BLE001 - anything else is the bug we look for
        return f"{case_id}: raised a non-clglow {type(e).__name__}: {e}"
    return f"{case_id}: loaded without error"


@pytest.mark.parametrize("case_id, builder, cls, fragments", LOAD_CASES, ids=[c[0] for c in LOAD_CASES])
def test_hostile_model(case_id, builder, cls, fragments, tmp_path, monkeypatch):
    if case_id in CAP_ENV:
        monkeypatch.setenv("CLGLOW_MAX_TENSOR_BYTES", CAP_ENV[case_id])
    problem = _check_load(case_id, builder, cls, fragments, str(tmp_path))
    assert problem is None, problem
    # the process is fine and a good model still loads and runs
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 3, 4, 4)
    np.testing.assert_array_equal(clglow.InferenceSession(_good()).run(None, {"x": x})[0], np.maximum(x, 0))


def test_constant_of_shape_4tb_fails_fast(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(InvalidModel, match="huge_cos"):
        clglow.InferenceSession(b_constant_of_shape_4tb(str(tmp_path)))
    assert time.perf_counter() - t0 < 5


_CHILD = r"""
import json, os, sys, tempfile
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import numpy as np
import test_hostile as th
results = {}
for case_id, builder, cls, fragments in th.LOAD_CASES:
    if case_id in th.CAP_ENV:
        os.environ["CLGLOW_MAX_TENSOR_BYTES"] = th.CAP_ENV[case_id]
    else:
        os.environ.pop("CLGLOW_MAX_TENSOR_BYTES", None)
    print("case", case_id, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as d:
        results[case_id] = th._check_load(case_id, builder, cls, fragments, d)
x = np.ones((1, 3, 4, 4), np.float32)
results["__after__"] = float(th.clglow.InferenceSession(th._good()).run(None, {"x": x})[0].sum())
print(json.dumps(results))
"""


def test_corpus_in_child_process_exits_cleanly():
    """The whole load-time corpus in one fresh interpreter: clean exit, the same clean errors."""
    here = os.path.abspath(__file__)
    root = os.path.dirname(os.path.dirname(here))
    env = dict(os.environ)
    env.pop("CLGLOW_MAX_TENSOR_BYTES", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD, here], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"child died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results.pop("__after__") == 48.0
    problems = [p for p in results.values() if p is not None]
    assert not problems, problems
    assert len(results) == len(LOAD_CASES)


# ------------------------------------------------------------------------------------------------
# Run-time corpus: one session, bad arguments, then the same session runs a good input correctly.
# ------------------------------------------------------------------------------------------------
def _two_input_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add0"),
             helper.make_node("Relu", ["s"], ["y"], name="relu0")]
    return _model(nodes, [_vi("a", ["N", 4]), _vi("b", ["N", 4])], [_vi("y", ["N", 4])])


@pytest.fixture(scope="module")
def sess():
    return clglow.InferenceSession(_two_input_model())


def _ok(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal((n, 4)).astype(np.float32), "b": rng.standard_normal((n, 4)).astype(np.float32)}


def _f32(*shape):
    return np.zeros(shape, np.float32)


RUN_CASES = [
    ("unknown_input_name", None, {"a": _f32(2, 4), "b": _f32(2, 4), "bogus_in": _f32(2, 4)}, ["bogus_in", "unknown"]),
    ("wrong_input_name", None, {"a": _f32(2, 4), "B": _f32(2, 4)}, ["'B'"]),
    ("missing_input", None, {"a": _f32(2, 4)}, ["'b'", "missing"]),
    ("wrong_dtype", None, {"a": np.zeros((2, 4), np.float64), "b": _f32(2, 4)}, ["'a'", "float64"]),
    ("int_dtype", None, {"a": _f32(2, 4), "b": np.zeros((2, 4), np.int32)}, ["'b'", "int32"]),
    ("wrong_rank", None, {"a": _f32(2, 4, 1), "b": _f32(2, 4)}, ["'a'", "rank 2"]),
    ("scalar_input", None, {"a": np.float32(1.0), "b": _f32(2, 4)}, ["'a'", "rank 2"]),
    ("wrong_static_dim", None, {"a": _f32(2, 5), "b": _f32(2, 5)}, ["'a'", "dimension 1 must be 4"]),
    ("inconsistent_symbolic_dims", None, {"a": _f32(2, 4), "b": _f32(3, 4)}, ["'b'", "'N'", "'a'"]),
    ("string_input", None, {"a": "not an array", "b": _f32(2, 4)}, ["'a'"]),
    ("none_input", None, {"a": None, "b": _f32(2, 4)}, ["'a'"]),
    ("ragged_list_input", None, {"a": [[1.0, 2.0], [3.0]], "b": _f32(2, 4)}, ["'a'"]),
    ("object_array_input", None, {"a": np.empty((2, 4), dtype=object), "b": _f32(2, 4)}, ["'a'"]),
    ("feed_not_a_dict", None, [("a", _f32(2, 4))], ["dict"]),
    ("unknown_output_name", ["y", "no_such_out"], None, ["no_such_out"]),
    ("output_names_a_string", "y", None, ["output_names"]),
]


@pytest.mark.parametrize("case_id, outputs, feeds, fragments", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_hostile_run(sess, case_id, outputs, feeds, fragments):
    feeds = _ok() if feeds is None else feeds
    with pytest.raises(InvalidArgument) as ei:
        sess.run(outputs, feeds)
    msg = str(ei.value)
    assert all(f in msg for f in fragments), msg
    good = _ok(5, seed=1)
    np.testing.assert_allclose(sess.run(None, good)[0], np.maximum(good["a"] + good["b"], 0), rtol=1e-6)


def test_zero_size_tensors(sess):
    (y,) = sess.run(None, {"a": _f32(0, 4), "b": _f32(0, 4)})
    assert y.shape == (0, 4) and y.dtype == np.float32
    good = _ok(2, seed=2)
    np.testing.assert_allclose(sess.run(None, good)[0], np.maximum(good["a"] + good["b"], 0), rtol=1e-6)


def test_nan_and_inf_pass_through_as_data():
    """Add and Relu carry NaN and +-Inf through as data, as numpy does."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add0"), helper.make_node("Relu", ["a"], ["r"], name="r0")]
    s = clglow.InferenceSession(_model(nodes, [_vi("a", [2, 4]), _vi("b", [2, 4])], [_vi("s", [2, 4]), _vi("r", [2, 4])]))
    a = np.array([[np.inf, -np.inf, np.nan, 1.0], [-0.0, np.inf, -2.0, -np.inf]], np.float32)
    b = np.array([[1.0, np.nan, -np.inf, np.nan], [0.0, -np.inf, 5.0, np.inf]], np.float32)
    out_s, out_r = s.run(None, {"a": a, "b": b})
    with np.errstate(invalid="ignore"):
        ref_s = a + b
    np.testing.assert_array_equal(out_s, ref_s)
    assert np.isnan(out_s).sum() == np.isnan(ref_s).sum() == 5 and np.isinf(out_s).sum() == 1
    assert np.isnan(out_r[0, 2])
    np.testing.assert_array_equal(out_r, np.maximum(a, 0))
    good = {"a": np.ones((2, 4), np.float32), "b": np.ones((2, 4), np.float32)}
    np.testing.assert_array_equal(s.run(["s"], good)[0], np.full((2, 4), 2, np.float32))


# ------------------------------------------------------------------------------------------------
# Concurrency: one session from 8 threads at once.
# ------------------------------------------------------------------------------------------------
def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "cw"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "cb"),
             numpy_helper.from_array((rng.standard_normal((10, 8 * 8 * 8)) * 0.05).astype(np.float32), "gw"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "gb")]
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], name="fc", transB=1)]
    return _model(nodes, [_vi("x", [1, 3, 16, 16])], [_vi("y", [1, 10])], inits)


def test_one_session_from_8_threads():
    from onnx.reference import ReferenceEvaluator

    model = _cnn()
    s = clglow.InferenceSession(model)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(8 * 4)]
    sequential = [s.run(None, {"x": x})[0] for x in xs]
    ref = ReferenceEvaluator(model)
    for x, y in zip(xs[:4], sequential[:4]):
        np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    results: dict = {}
    errors: list = []
    barrier = threading.Barrier(8)

    def worker(t):
        try:
            barrier.wait()
            for i in range(t, len(xs), 8):
                results[i] = s.run(None, {"x": xs[i]})[0]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(results) == list(range(len(xs)))
    for i, y in enumerate(sequential):
        np.testing.assert_array_equal(results[i], y)


def test_folded_node_with_a_repeated_input():
    """Concat(a, a, b) of constants folds to [2, 2, 3] (a repeated input once shifted the later ones)."""
    inits = [numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([3], np.int64), "three")]
    nodes = [helper.make_node("Concat", ["two", "two", "three"], ["shape"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")]
    s = clglow.InferenceSession(_model(nodes, [_vi("x", [12])], [_vi("y", [2, 2, 3])], inits))
    x = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x.reshape(2, 2, 3))
