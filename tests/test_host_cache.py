"""The warm-start caches of host work: runtime.blob_store (the file format), runtime.derived_cache
(packed weights) and frontend.graph_cache (the loaded, optimized graph).

Results are checked against onnx.reference and numpy, and against a session with the caches off
(CLGLOW_CACHE=0); damaged files must give the right result and no crash.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import clglow
from clglow.frontend import graph_cache
from clglow.runtime import derived_cache
from clglow.runtime.blob_store import BlobStore, array_digest, checksum, flush


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private, empty clglow cache folder for one test."""
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CLGLOW_CACHE", raising=False)
    return tmp_path / "cache"


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip_data":
        data[max(len(data) - 300, len(data) // 2)] ^= 0x10
    elif how == "flip_header":
        data[20] ^= 0x01
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "empty":
        data = bytearray()
    elif how == "garbage":
        data = bytearray(b"not a cache file at all" * 10)
    path.write_bytes(bytes(data))


# --- the file format -----------------------------------------------------------------------------
def test_store_round_trip_and_writable_arrays(cache_dir):
    st = BlobStore("t", 1 << 30)
    a = np.arange(5000, dtype=np.float32)
    b = np.arange(7, dtype=np.int8)
    assert st.put("k", {"x": 1}, [memoryview(a), memoryview(b), b""])
    header, bufs = st.get("k")
    assert header["x"] == 1 and [len(x) for x in bufs] == [a.nbytes, 7, 0]
    got = np.frombuffer(bufs[0], np.float32)
    np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(np.frombuffer(bufs[1], np.int8), b)
    got[0] = 42.0  # copy on write: the array is writable, the file unchanged
    np.testing.assert_array_equal(np.frombuffer(st.get("k")[1][0], np.float32), a)


@pytest.mark.parametrize("how", ["flip_data", "flip_header", "truncated", "empty", "garbage"])
def test_damaged_entry_is_a_miss_and_removed(cache_dir, how):
    st = BlobStore("t", 1 << 30)
    st.put("k", {}, [memoryview(np.arange(20000, dtype=np.float32))])
    path = st.directory / "k.blob"
    _damage(path, how)
    assert st.get("k") is None
    assert not path.exists()


def test_store_is_bounded_least_recently_used_first(cache_dir):
    st = BlobStore("t", 250_000)
    blob = memoryview(np.zeros(100_000, np.uint8))
    st.put("a", {}, [blob])
    st.put("b", {}, [blob])
    assert st.get("a") is not None  # a is now the most recently used
    st.put("c", {}, [blob])
    assert st.usage()[1] <= 250_000
    assert st.get("b") is None and st.get("a") is not None and st.get("c") is not None


def test_cache_off_stores_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("CLGLOW_CACHE", "0")
    st = BlobStore("t", 1 << 30)
    assert not st.put("k", {}, [b"abc"]) and st.get("k") is None
    assert not cache_dir.exists()


def test_checksum_sees_flips_and_moved_blocks():
    x = np.random.default_rng(0).integers(0, 255, 40_000, dtype=np.uint8)
    base = checksum(memoryview(x))
    y = x.copy()
    y[12345] ^= 1
    assert checksum(memoryview(y)) != base
    z = x.copy()
    z[:8192], z[8192:16384] = x[8192:16384], x[:8192]
    assert checksum(memoryview(z)) != base
    assert checksum(memoryview(x[:-1])) != base


# --- derived constants ---------------------------------------------------------------------------
_CALLS: list = []  # a global, not a closed-over value: it is not part of the fingerprint


def _packer(calls: list, scale: float):
    """A packing function closing over `scale` only; each call appends to `calls` (_CALLS)."""
    assert calls is _CALLS

    def pack(w: np.ndarray) -> np.ndarray:
        _CALLS.append(1)
        return (w.reshape(-1, 64).T * scale).copy()
    return pack


def test_derived_hit_miss_and_key(cache_dir):
    src = np.random.default_rng(1).standard_normal((256, 64)).astype(np.float32)  # 64 KiB
    calls = _CALLS
    calls.clear()
    first = derived_cache.compute(src, "t1", _packer(calls, 2.0))
    again = derived_cache.compute(src.copy(), "t1", _packer(calls, 2.0))  # same content: a hit
    np.testing.assert_array_equal(first, src.T * 2.0)
    np.testing.assert_array_equal(again, first)
    assert len(calls) == 1 and again.flags.c_contiguous
    derived_cache.compute(src, "t1", _packer(calls, 3.0))  # another closure value: another entry
    derived_cache.compute(src, "t2", _packer(calls, 2.0))  # another tag
    other = src.copy()
    other[0, 0] += 1
    np.testing.assert_array_equal(derived_cache.compute(other, "t1", _packer(calls, 2.0)), other.T * 2.0)
    assert len(calls) == 4


def test_derived_damaged_file_is_recomputed(cache_dir):
    src = np.random.default_rng(2).standard_normal((512, 64)).astype(np.float32)
    calls = _CALLS
    calls.clear()
    derived_cache.compute(src, "t", _packer(calls, 1.5))
    flush()  # the entry is written in the background
    (entry,) = list(derived_cache.store().directory.glob("*.blob"))
    _damage(entry, "flip_data")
    got = derived_cache.compute(src, "t", _packer(calls, 1.5))
    np.testing.assert_array_equal(got, src.T * 1.5)
    assert len(calls) == 2
    flush()
    assert len(list(derived_cache.store().directory.glob("*.blob"))) == 1  # stored again


def test_derived_uncacheable_closure_and_small_sources_are_computed(cache_dir):
    opaque = object()
    calls: list = []

    def pack(w: np.ndarray) -> np.ndarray:
        calls.append(opaque)
        return w + 1
    big, small = np.zeros(1 << 16, np.float32), np.zeros(8, np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(derived_cache.compute(big, "u", pack), big + 1)
        np.testing.assert_array_equal(derived_cache.compute(small, "s", lambda w: w * 2), small * 2)
    assert len(calls) == 2
    flush()
    folder = derived_cache.store().directory
    assert not folder.exists() or not list(folder.glob("*.blob"))


def test_fingerprint_follows_closures():
    fp = derived_cache.function_fingerprint
    assert fp(_packer(_CALLS, 2.0)) == fp(_packer(_CALLS, 2.0))
    assert fp(_packer(_CALLS, 2.0)) != fp(_packer(_CALLS, 2.5))
    assert fp(len) is None  # not a Python function: never cached
    a = np.arange(4.0)
    assert array_digest(a) == array_digest(a.copy()) != array_digest(a.reshape(2, 2))


# --- the graph cache through sessions ------------------------------------------------------------
def _model(seed: int) -> onnx.ModelProto:
    """Conv + BatchNorm (folded into the weights by a pass) + Relu + GEMM, weights big enough
    for the derived cache."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((64, 32, 3, 3)) * 0.1).astype(np.float32)
    scale, bias = rng.uniform(0.5, 1.5, 64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    mean, var = rng.standard_normal(64).astype(np.float32), rng.uniform(0.5, 2, 64).astype(np.float32)
    fc = (rng.standard_normal((64 * 8 * 8, 300)) * 0.02).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w, "w"), (scale, "s"), (bias, "b"), (mean, "m"), (var, "v"), (fc, "fc"),
              (np.array([1, -1], np.int64), "shape")]]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "hostcache", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 300])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(path, device, x) -> np.ndarray:
    sess = clglow.InferenceSession(str(path), clglow.SessionOptions(tune=False), device=device)
    return sess.run(None, {"x": x})[0]


def test_graph_cache_hit_gives_the_same_results(cache_dir, device, tmp_path, monkeypatch):
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", 0)
    model = _model(0)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(5).standard_normal((1, 32, 8, 8)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    before_g, before_d = graph_cache.stats(), derived_cache.stats()
    cold = _run(path, device, x)
    warm = _run(path, device, x)
    g, d = graph_cache.stats(), derived_cache.stats()
    assert g["misses"] - before_g["misses"] == 1 and g["hits"] - before_g["hits"] == 1
    assert d["hits"] > before_d["hits"]  # the packed weights came from the disk
    np.testing.assert_allclose(cold, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(warm, cold)
    monkeypatch.setenv("CLGLOW_CACHE", "0")
    np.testing.assert_array_equal(_run(path, device, x), cold)  # without any cache: the same


@pytest.mark.parametrize("how", ["flip_data", "truncated"])
def test_graph_cache_damaged_entry_loads_the_model(cache_dir, device, tmp_path, monkeypatch, how):
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", 0)
    model = _model(1)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(6).standard_normal((1, 32, 8, 8)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    _run(path, device, x)
    flush()
    for entry in list(graph_cache.store().directory.glob("*.blob")) + \
            list(derived_cache.store().directory.glob("*.blob")):
        _damage(entry, how)
    np.testing.assert_allclose(_run(path, device, x), want, rtol=1e-4, atol=1e-4)


def test_graph_cache_sees_a_rewritten_file_and_bytes(cache_dir, device, tmp_path, monkeypatch):
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", 0)
    path = tmp_path / "m.onnx"
    x = np.random.default_rng(7).standard_normal((1, 32, 8, 8)).astype(np.float32)
    for seed in (2, 3):  # the same path, other weights: never the old graph
        model = _model(seed)
        onnx.save(model, str(path))
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_allclose(_run(path, device, x), want, rtol=1e-4, atol=1e-4)
        data = model.SerializeToString()
        for _ in range(2):  # bytes: keyed by their content
            sess = clglow.InferenceSession(data, clglow.SessionOptions(tune=False), device=device)
            np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)


def test_graph_cache_skips_weights_overrides_and_small_models(cache_dir, monkeypatch):
    data = _model(4).SerializeToString()
    assert graph_cache.model_key(data, None, ()) is not None
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", len(data) + 1)
    assert graph_cache.model_key(data, None, ()) is None  # under MIN_MODEL_BYTES
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", 0)
    assert graph_cache.model_key(data, {"w": np.zeros(1)}, ()) is None
    assert graph_cache.model_key(_model(4), None, ()) is None  # a ModelProto


def test_warm_start_prefetches_the_programs_of_the_last_plan(cache_dir, device, tmp_path, monkeypatch):
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", 0)
    path = tmp_path / "m.onnx"
    onnx.save(_model(8), str(path))
    x = np.random.default_rng(8).standard_normal((1, 32, 8, 8)).astype(np.float32)
    asked: list = []
    real = type(device).prefetch
    monkeypatch.setattr(type(device), "prefetch", lambda self, programs: (asked.append(list(programs)),
                                                                         real(self, programs)))
    with device.recording() as used:
        first = _run(path, device, x)
    second = _run(path, device, x)
    assert asked[0] == [] and asked[1]  # nothing known at the first start; the plan's list then
    assert set(asked[1]) <= set(used) and all(isinstance(o, tuple) for _, o in asked[1])
    np.testing.assert_array_equal(second, first)


def test_graph_cache_sees_changed_external_data(cache_dir, device, tmp_path, monkeypatch):
    """The model file unchanged, its external-data file rewritten: the entry is not used."""
    monkeypatch.setattr(graph_cache, "MIN_MODEL_BYTES", 0)
    x = np.random.default_rng(9).standard_normal((1, 32, 8, 8)).astype(np.float32)
    a, b = _model(10), _model(11)
    (want_b,) = ReferenceEvaluator(b).run(None, {"x": x})
    for folder, m in (("a", a), ("b", b)):
        (tmp_path / folder).mkdir()
        onnx.save(m, str(tmp_path / folder / "m.onnx"), save_as_external_data=True, location="w.bin",
                  size_threshold=0)
    path = tmp_path / "a" / "m.onnx"
    _run(path, device, x)
    flush()
    (tmp_path / "a" / "w.bin").write_bytes((tmp_path / "b" / "w.bin").read_bytes())  # same sizes, other weights
    hits = graph_cache.stats()["hits"]
    np.testing.assert_allclose(_run(path, device, x), want_b, rtol=1e-4, atol=1e-4)
    assert graph_cache.stats()["hits"] == hits
