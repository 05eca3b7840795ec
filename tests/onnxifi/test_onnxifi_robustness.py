"""ONNXIFI under stress: 1,000 init/run/release cycles leak nothing, objects used from many threads
(as the THREAD_SAFE capability promises), and fuzzed arguments only ever give status codes."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import onnxifi as o
from clglow.runtime import executor

pytestmark = pytest.mark.onnxifi

F32, CPU = o.ONNXIFI_DATATYPE_FLOAT32, o.ONNXIFI_MEMORY_TYPE_CPU


def _model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, -2.0, 3.0, -4.0])
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    g = helper.make_graph(nodes, "leak", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


W = np.array([1.0, -2.0, 3.0, -4.0], np.float32)


@pytest.fixture(scope="module")
def backend():
    n = o.Ref(0)
    o.onnxGetBackendIDs(None, n)
    ids = [None] * n.value
    assert o.onnxGetBackendIDs(ids, n) == o.ONNXIFI_STATUS_SUCCESS
    b = o.Ref()
    assert o.onnxInitBackend(ids[0], None, b) == o.ONNXIFI_STATUS_SUCCESS
    yield b.value
    o.onnxReleaseBackend(b.value)
    for i in ids:
        o.onnxReleaseBackendID(i)


def _cycle(backend, data: bytes, x: np.ndarray) -> np.ndarray:
    g = o.Ref()
    assert o.onnxInitGraph(backend, None, len(data), data, 0, None, g) == o.ONNXIFI_STATUS_SUCCESS
    y = np.empty((2, 4), np.float32)
    ins = [o.TensorDescriptor("x", F32, CPU, (2, 4), x)]
    outs = [o.TensorDescriptor("y", F32, CPU, (2, 4), y)]
    assert o.onnxSetGraphIO(g.value, 1, ins, 1, outs) == o.ONNXIFI_STATUS_SUCCESS
    fin, fout = o.MemoryFence(event=0), o.MemoryFence()
    ev = o.Ref()
    assert o.onnxInitEvent(backend, ev) == o.ONNXIFI_STATUS_SUCCESS
    fin.event = ev.value
    assert o.onnxRunGraph(g.value, fin, fout) == o.ONNXIFI_STATUS_SUCCESS
    assert o.onnxSignalEvent(fin.event) == o.ONNXIFI_STATUS_SUCCESS
    assert o.onnxWaitEvent(fout.event) == o.ONNXIFI_STATUS_SUCCESS
    assert o.onnxReleaseEvent(fout.event) == o.ONNXIFI_STATUS_SUCCESS
    assert o.onnxReleaseEvent(fin.event) == o.ONNXIFI_STATUS_SUCCESS
    assert o.onnxReleaseGraph(g.value) == o.ONNXIFI_STATUS_SUCCESS
    return y


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def test_thousand_cycles_leak_nothing(backend):
    data = _model()
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    for _ in range(20):
        _cycle(backend, data, x)
    gc.collect()
    buffers0, rss0 = executor.live_buffers(), _rss_mb()
    for i in range(1000):
        y = _cycle(backend, data, x)
    gc.collect()
    np.testing.assert_array_equal(y, np.maximum(x * W, 0))
    assert executor.live_buffers() == buffers0
    assert _rss_mb() - rss0 < 20, f"resident memory grew by {_rss_mb() - rss0:.1f} MB"


def test_objects_are_thread_safe(backend):
    caps = o.Ref(8)
    buf = bytearray(8)
    n = o.Ref(0)
    o.onnxGetBackendIDs(None, n)
    ids = [None] * n.value
    o.onnxGetBackendIDs(ids, n)
    assert o.onnxGetBackendInfo(ids[0], o.ONNXIFI_BACKEND_CAPABILITIES, buf, caps) == o.ONNXIFI_STATUS_SUCCESS
    if not int.from_bytes(buf, "little") & o.ONNXIFI_CAPABILITY_THREAD_SAFE:
        pytest.skip("backend does not advertise THREAD_SAFE")
    data = _model()
    errors: list = []

    def worker(seed: int) -> None:
        try:
            x = np.random.default_rng(seed).standard_normal((2, 4)).astype(np.float32)
            for _ in range(10):
                np.testing.assert_allclose(_cycle(backend, data, x), np.maximum(x * W, 0), rtol=1e-6)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300), st.integers(min_value=-3, max_value=1 << 40))
def test_fuzzed_init_graph_gives_statuses(backend, data, weight_count):
    g = o.Ref()
    st_ = o.onnxInitGraph(backend, None, len(data), data, weight_count, None, g)
    assert isinstance(st_, int) and st_ in o.STATUS_NAMES
    if st_ == o.ONNXIFI_STATUS_SUCCESS:
        o.onnxReleaseGraph(g.value)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.binary(max_size=8)),
       st.integers(min_value=-1, max_value=0x10000))
def test_fuzzed_handles_give_statuses(handle, key):
    calls = [
        lambda: o.onnxReleaseBackendID(handle),
        lambda: o.onnxReleaseBackend(handle),
        lambda: o.onnxReleaseGraph(handle),
        lambda: o.onnxReleaseEvent(handle),
        lambda: o.onnxSignalEvent(handle),
        lambda: o.onnxWaitEvent(handle),
        lambda: o.onnxGetBackendInfo(handle, key, bytearray(8), o.Ref(8)),
        lambda: o.onnxRunGraph(handle, o.MemoryFence(), o.MemoryFence()),
        lambda: o.onnxSetGraphIO(handle, 0, [], 0, []),
    ]
    for call in calls:
        status = call()
        assert isinstance(status, int) and status in o.STATUS_NAMES
        assert status != o.ONNXIFI_STATUS_SUCCESS


def test_error_inside_a_run_reaches_the_output_event(backend):
    """A run that fails after onnxRunGraph returned (a stage planned for data-dependent shapes
    rejects them: the Compress condition's length is the count of c's nonzeros, too long for x)
    reports its status and message through the output event, and the graph stays usable."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    c = helper.make_tensor_value_info("c", TensorProto.INT64, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["k"])
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axes"], ["idx"]),
             helper.make_node("Cast", ["idx"], ["cb"], to=TensorProto.BOOL),  # [False, True, True, ...]
             helper.make_node("Compress", ["x", "cb"], ["y"], axis=0, name="compress0")]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    data = helper.make_model(helper.make_graph(nodes, "late", [x, c], [y], [axes]),
                             opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    g = o.Ref()
    assert o.onnxInitGraph(backend, None, len(data), data, 0, None, g) in (o.ONNXIFI_STATUS_SUCCESS,
                                                                           o.ONNXIFI_STATUS_FALLBACK)
    I64 = o.ONNXIFI_DATATYPE_INT64

    def run(cond: np.ndarray, out: np.ndarray) -> tuple:
        xs = np.arange(4, dtype=np.float32)
        ins = [o.TensorDescriptor("x", F32, CPU, (4,), xs), o.TensorDescriptor("c", I64, CPU, cond.shape, cond)]
        assert o.onnxSetGraphIO(g.value, 2, ins, 1, [o.TensorDescriptor("y", F32, CPU, out.shape, out)]) == 0
        ev = o.Ref()
        assert o.onnxInitEvent(backend, ev) == o.ONNXIFI_STATUS_SUCCESS
        fin, fout = o.MemoryFence(event=ev.value), o.MemoryFence()
        assert o.onnxRunGraph(g.value, fin, fout) == o.ONNXIFI_STATUS_SUCCESS  # returns before the failure
        assert o.onnxSignalEvent(ev.value) == o.ONNXIFI_STATUS_SUCCESS
        state, status, size = o.Ref(), o.Ref(), o.Ref(512)
        msg = bytearray(512)
        wait = o.onnxWaitEventFor(fout.event, 0, state, status, msg, size)
        o.onnxReleaseEvent(fout.event)
        o.onnxReleaseEvent(ev.value)
        return wait, state.value, status.value, msg.split(b"\0")[0].decode()

    wait, state, status, message = run(np.ones(6, np.int64), np.empty(4, np.float32))  # condition too long
    assert wait == o.ONNXIFI_STATUS_SUCCESS and state == o.ONNXIFI_EVENT_STATE_SIGNALLED
    assert status != o.ONNXIFI_STATUS_SUCCESS and status in o.STATUS_NAMES
    assert "compress0" in message
    out = np.empty(2, np.float32)
    wait, state, status, message = run(np.array([1, 1, 1, 0], np.int64), out)  # condition [F, T, T]
    assert status == o.ONNXIFI_STATUS_SUCCESS, message
    np.testing.assert_array_equal(out, [1.0, 2.0])
    assert o.onnxReleaseGraph(g.value) == o.ONNXIFI_STATUS_SUCCESS
