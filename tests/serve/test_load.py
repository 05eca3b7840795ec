"""Load and faults: 32 concurrent clients x 20 requests, every answer checked against
onnxruntime; dynamic batching beats the same model served request by request; a replica killed
during the load loses no retried request, gives no wrong answer, and is replaced.

The batching comparison serves a weight-bound MLP: on 2 cores a request's HTTP and Ray Serve
cost (~25 core-ms, most of it in Serve's proxy and replica wrappers) outweighed the small ResNet's
device time per row, so batching it changed throughput by less than the run-to-run noise."""
from __future__ import annotations

import time

import pytest
from serve_helpers import REPLICAS, close, wait_ready

from clglow.serve.loadgen import LoadReport, run_load
from clglow.serve.protocol import encode_request

CLIENTS, PER_CLIENT = 32, 20


def _workload(model, n: int = 8):
    """n distinct one-row requests (binary bodies) and a check of each answer against onnxruntime."""
    feeds = [model.make(100 + i, 1) for i in range(n)]
    refs = [model.reference(f) for f in feeds]
    bodies = [encode_request(f, binary=True) for f in feeds]

    def check(k: int, outs: dict) -> None:
        for name, ref in refs[k].items():
            if not close(outs[name], ref):
                raise AssertionError(f"output {name} of request {k} differs from onnxruntime's")

    return bodies, check


def _report(label: str, rep: LoadReport) -> str:
    line = f"{label}: {rep.summary()}"
    print(line)
    return line


def _batch_gain(path: str, make, rows: int = 16) -> float:
    """How much faster per row the device runs a batch of `rows` than one row, in process."""
    import clglow

    sess = clglow.InferenceSession(path)
    one, many = make(0, 1), make(0, rows)
    times = {}
    for label, feeds, n in (("one", one, 8), ("many", many, 3)):
        sess.run(None, feeds)
        t = time.perf_counter()
        for _ in range(n):
            sess.run(None, feeds)
        times[label] = (time.perf_counter() - t) / n
    return times["one"] / (times["many"] / rows)


def _assert_all_correct(rep: LoadReport) -> None:
    assert not rep.wrong, rep.wrong[:5]
    assert not rep.failed, rep.failed[:5]
    assert rep.requests == CLIENTS * PER_CLIENT


@pytest.mark.slow
def test_load_every_answer_correct_and_batching_raises_throughput(server, record_property):
    url, models = server
    bodies, check = _workload(models["mlp_dyn"])
    run_load(url, "mlp_dyn", bodies, clients=4, requests_per_client=4, check=check)  # warm both replicas
    runs: dict[str, list[LoadReport]] = {"mlp_dyn": [], "mlp_dyn_nobatch": []}
    for _ in range(3):  # alternating, best of three each: the machine is shared, timings are noisy
        for name, reps in runs.items():
            reps.append(run_load(url, name, bodies, clients=CLIENTS, requests_per_client=PER_CLIENT, check=check))
    for reps in runs.values():
        for rep in reps:
            _assert_all_correct(rep)
    batched = max(runs["mlp_dyn"], key=LoadReport.throughput)
    single = max(runs["mlp_dyn_nobatch"], key=LoadReport.throughput)
    record_property("batched", _report("dynamic batching on ", batched))
    record_property("single", _report("dynamic batching off", single))
    gain = _batch_gain(models["mlp_dyn"].path, models["mlp_dyn"].make)
    print(f"in process, a batch of 16 runs {gain:.2f}x faster per row than one row")
    if gain < 2.0:  # e.g. the GPU kernel families forced on a CPU device (CLGLOW_TARGET=gpu on pocl)
        pytest.skip(f"every answer was right, but this device runs a batch of 16 only {gain:.2f}x faster per row "
                    "than one row, so batching cannot be expected to raise throughput here")
    assert batched.throughput() > single.throughput(), (batched.summary(), single.summary(), f"gain {gain:.2f}")


def _replicas() -> list[str]:
    """Names of the live replica actors of the clglow deployment (Serve names them
    SERVE_REPLICA::<app>#<deployment>#<id>; no dashboard needed to list named actors)."""
    import ray

    named = ray.util.list_named_actors(all_namespaces=True)
    return sorted(a["name"] for a in named if a["namespace"] == "serve"
                  and a["name"].startswith("SERVE_REPLICA::clglow#ClglowServer#"))


def _running_replicas() -> int:
    from ray import serve

    app = serve.status().applications.get("clglow")
    if app is None:
        return 0
    return int(app.deployments["ClglowServer"].replica_states.get("RUNNING", 0))


@pytest.mark.slow
def test_killed_replica_loses_no_retried_request_and_is_replaced(server, ray_session):
    url, models = server
    bodies, check = _workload(models["bert_dyn"])
    before = _replicas()
    assert len(before) == REPLICAS, before
    victim = before[0]
    killed = []

    def kill_one() -> None:
        time.sleep(1.0)
        ray_session.kill(ray_session.get_actor(victim, namespace="serve"), no_restart=True)
        killed.append(time.monotonic())

    rep = run_load(url, "bert_dyn", bodies, clients=CLIENTS, requests_per_client=PER_CLIENT, check=check,
                   during=kill_one)
    print(f"replica {victim} killed during the load: {rep.summary()}")
    assert killed, "the replica was not killed"
    _assert_all_correct(rep)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 90:
        alive = set(_replicas())
        if victim not in alive and len(alive) == REPLICAS and _running_replicas() == REPLICAS:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the deployment did not get back to {REPLICAS} running replicas")
    wait_ready(url, 30)
    again = run_load(url, "bert_dyn", bodies, clients=4, requests_per_client=4, check=check)
    assert not again.wrong and not again.failed and again.requests == 16
