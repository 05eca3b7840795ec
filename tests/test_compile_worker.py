"""Compile helpers (runtime.compile_worker): programs built in helper processes into pocl's cache.

Each test gets fresh clglow and pocl cache folders (the helpers inherit them), so nothing is
built before; results are checked against numpy / onnx.reference, and failures of the helper
(a bad job, a killed process) must leave the session building by itself.
"""
from __future__ import annotations

import concurrent.futures
import time

import numpy as np
import onnx
import pyopencl as cl
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from clglow.runtime import compile_worker as cw
from clglow.runtime.cache import driver_caches_programs
from clglow.runtime.device import Device
from clglow.runtime.selection import device_index

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def fresh(tmp_path, monkeypatch, device):
    if not driver_caches_programs(device.cl_device):
        pytest.skip("compile helpers serve pocl (a driver with its own kernel cache)")
    monkeypatch.setenv("CLGLOW_CACHE_DIR", str(tmp_path / "clglow"))
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "pocl"))
    monkeypatch.setenv("CLGLOW_COMPILE_WORKERS", "1")
    return device


def _job(nc: int = 0) -> dict:
    # global_pool's no-op launch: nc = 0 returns at once; buffers (None) become a dummy
    return {"program": "pool", "options": ["-DT=float", "-DPOOL_MAX"], "kernel": "global_pool",
            "lsize": [64], "noop": cw.encode_noop([None, None, np.int32(nc), np.int32(49)])}


def test_noop_arguments_round_trip():
    args = [None, np.int32(-3), np.float32(0.5), np.int64(1 << 40), "buffer"]
    back = cw.decode_noop(cw.encode_noop(args))
    assert back[0] is None and back[4] is None
    assert [type(a) for a in back[1:4]] == [np.int32, np.float32, np.int64]
    assert [a.item() for a in back[1:4]] == [-3, 0.5, 1 << 40]
    assert cw.encode_noop(None) is None and cw.decode_noop(None) is None


def test_helper_builds_reports_errors_and_stays_usable(fresh):
    workers = cw.CompileWorkers(device_index(fresh.cl_device), 1)
    try:
        assert workers.submit(_job()).result(timeout=120) is True
        bad = workers.submit({"program": "no_such_program", "options": [], "kernel": None, "lsize": None,
                              "noop": None})
        with pytest.raises(RuntimeError, match="no_such_program"):
            bad.result(timeout=120)
        broken = workers.submit({"program": "pool", "options": ["-DT=no_such_type", "-DPOOL_MAX"],
                                 "kernel": None, "lsize": None, "noop": None})
        with pytest.raises(RuntimeError, match="CompileError|pool"):
            broken.result(timeout=120)
        # the same helper goes on serving
        assert workers.submit({**_job(), "options": ["-DT=float", "-DPOOL_AVG"]}).result(timeout=120)
        assert workers.started == 1
    finally:
        workers.close()


def test_a_free_helper_takes_the_costliest_queued_job_first(fresh):
    """Jobs queued while the helper is busy run costliest first, not in the order they came."""
    workers = cw.CompileWorkers(device_index(fresh.cl_device), 1)
    done: list = []
    try:
        futs = []
        for tag, cost in (("first", 0.3), ("cheap", 0.3), ("dear", 1.0)):
            job = {**_job(), "options": ["-DT=float", "-DPOOL_MAX", f"-DCLG_ORDER_{tag}=1"]}
            fut = workers.submit(job, cost)
            fut.add_done_callback(lambda _f, tag=tag: done.append(tag))
            futs.append(fut)
        assert all(f.result(timeout=120) is True for f in futs)
        assert done == ["first", "dear", "cheap"]
    finally:
        workers.close()


def test_local_preparations_run_costliest_first(device):
    """Preparations waiting for the pool run costliest first (runtime.preparation)."""
    import threading

    from clglow.runtime.preparation import Preparer

    prep = Preparer(device)
    pool = prep._get_pool()
    gates = [threading.Event() for _ in range(pool._max_workers)]
    blockers = [pool.submit(g.wait) for g in gates]  # every pool thread busy
    order: list = []
    futs = [prep._ranked(cost, order.append, cost) for cost in (0.3, 1.0, 0.5, 0.3)]
    gates[0].set()  # one thread free: it runs the queue in turn
    concurrent.futures.wait(futs, timeout=30)
    for g in gates:
        g.set()
    concurrent.futures.wait(blockers, timeout=30)
    assert order == [1.0, 0.5, 0.3, 0.3]


def test_killed_helper_fails_its_jobs_and_is_replaced(fresh):
    workers = cw.CompileWorkers(device_index(fresh.cl_device), 1)
    try:
        workers.start()
        (w,) = workers._workers
        w.proc.kill()
        deadline = time.monotonic() + 30
        while workers._workers and time.monotonic() < deadline:  # the reader notices the exit
            time.sleep(0.05)
        assert not workers._workers
        assert workers.submit(_job()).result(timeout=120) is True  # a new helper
        assert workers.started == 2
    finally:
        workers.close()
    after = workers.submit(_job())  # closed: refused at once, never hangs
    with pytest.raises(RuntimeError):
        after.result(timeout=5)


def test_device_prepares_through_helper_then_warm_start_skips_it(fresh):
    dev = Device(cl.Context([fresh.cl_device]), fresh.cl_device)
    dev.start_compile_helpers_if_cold()
    assert dev.preparation.workers is not None and dev.preparation.workers.started == 1
    args = [None, None, np.int32(0), np.int32(49)]
    dev.prepare("pool", ["-DT=float", "-DPOOL_MAX"], "global_pool", (64,), args)
    assert ("pool", ("-DT=float", "-DPOOL_MAX")) in dev.preparation.remote  # the first program goes to the helper
    dev.wait_prepared(timeout=120)
    assert dev.preparation.remote[("pool", ("-DT=float", "-DPOOL_MAX"))].result(timeout=1) is True
    # the program the session uses is this process's own, built from pocl's cache: check it computes
    x = np.random.default_rng(0).standard_normal((6, 49)).astype(np.float32)
    xb = cl.Buffer(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(dev.context, cl.mem_flags.WRITE_ONLY, 6 * 4)
    knl = cl.Kernel(dev.program("pool", ["-DT=float", "-DPOOL_MAX"]), "global_pool")
    knl.set_args(xb, yb, np.int32(6), np.int32(49))
    cl.enqueue_nd_range_kernel(dev.queue, knl, (64,), (64,))
    y = np.empty(6, np.float32)
    cl.enqueue_copy(dev.queue, y, yb)
    np.testing.assert_array_equal(y, x.max(axis=1))
    assert dev.preparation.marker("pool", ("-DT=float", "-DPOOL_MAX"), "global_pool", (64,)).exists()
    dev.preparation.workers.close()

    again = Device(cl.Context([fresh.cl_device]), fresh.cl_device)  # a later process, same caches
    again.start_compile_helpers_if_cold()
    again.prepare("pool", ["-DT=float", "-DPOOL_MAX"], "global_pool", (64,), args)
    again.wait_prepared(timeout=120)
    assert again.preparation.workers is None and not again.preparation.remote  # warm: built here, no helper started


def test_cold_start_warms_the_compiler_once_and_a_warm_start_not(fresh, monkeypatch):
    """A device that never prepared a program here warms its process's compiler once on the
    background pool (later sessions of the process do not); once a preparation is done, a new
    process (Device) does not. The warm-up kernel itself builds and runs."""
    from clglow.runtime import preparation

    calls: list = []
    monkeypatch.setattr(preparation, "warm_compiler", lambda *a: (calls.append(a), cw.warm_compiler(*a)))
    monkeypatch.setenv("CLGLOW_COMPILE_WORKERS", "0")
    dev = Device(cl.Context([fresh.cl_device]), fresh.cl_device)
    dev.start_compile_helpers_if_cold()
    dev.start_compile_helpers_if_cold()  # a second session of the process
    dev.prepare("pool", ["-DT=float", "-DPOOL_AVG"], "global_pool", (64,), [None, None, np.int32(0), np.int32(9)])
    dev.wait_prepared(timeout=120)
    assert len(calls) == 1
    again = Device(cl.Context([fresh.cl_device]), fresh.cl_device)
    again.start_compile_helpers_if_cold()
    again.wait_prepared(timeout=120)
    assert len(calls) == 1


def test_helpers_off(fresh, monkeypatch):
    monkeypatch.setenv("CLGLOW_COMPILE_WORKERS", "0")
    dev = Device(cl.Context([fresh.cl_device]), fresh.cl_device)
    dev.start_compile_helpers_if_cold()
    dev.prepare("pool", ["-DT=float", "-DPOOL_AVG"], "global_pool", (64,), [None, None, np.int32(0), np.int32(9)])
    dev.wait_prepared(timeout=120)
    assert dev.preparation.workers is None and not dev.preparation.remote


def _small_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    fc = rng.standard_normal((8, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(fc, "fc")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_session_with_helpers_matches_reference(fresh):
    import clglow

    model = _small_cnn()
    dev = Device(cl.Context([fresh.cl_device]), fresh.cl_device)
    sess = clglow.InferenceSession(model.SerializeToString(), device=dev)
    x = np.random.default_rng(2).standard_normal((1, 3, 20, 20)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert dev.preparation.workers is not None and dev.preparation.workers.started >= 1 and dev.preparation.remote
    futs = list(dev.preparation.remote.values())
    concurrent.futures.wait(futs, timeout=120)
    assert all(f.exception() is None for f in futs)
    dev.preparation.workers.close()


def test_no_helpers_outside_a_python_interpreter(monkeypatch):
    # embedded in a C/C++ host (ONNXIFI), sys.executable is the host: it must never be spawned
    monkeypatch.setenv("CLGLOW_COMPILE_WORKERS", "2")
    monkeypatch.setattr(cw.sys, "executable", "/usr/local/bin/onnxifi_test_driver")
    assert cw.default_count() == 0
    monkeypatch.setattr(cw.sys, "executable", "")
    assert cw.default_count() == 0
    monkeypatch.setattr(cw.sys, "executable", "/usr/bin/python3.11")
    assert cw.default_count() == 2
    monkeypatch.delenv("CLGLOW_COMPILE_WORKERS")
    assert 0 <= cw.default_count() <= 4
