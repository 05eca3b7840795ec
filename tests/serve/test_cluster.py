"""`clglow serve --address`: joining a Ray cluster that something else started (`ray start
--head`), serving there, and on Ctrl-C deleting only its own application — the cluster stays up.

The head runs with `--block` in its own process group so that the test can end it (and only it:
`ray stop` would end every Ray process of the machine, the suite's own local instance too). Both
sides get the same RAY_AUTH_MODE: since Ray 2.59 a locally started cluster may require a token,
and a client must then present the same one (RAY_AUTH_TOKEN), which is Ray's business, not
clglow's; the test runs the cluster without token authentication."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from serve_clients import triton_client, triton_infer
from serve_helpers import close, free_port, wait_ready
from test_cli import _start, _wait_line


def _head(port: int, env: dict) -> subprocess.Popen:
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    cmd = [ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
           "--include-dashboard=false", "--disable-usage-stats", f"--ray-client-server-port={free_port()}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)


def _connects(address: str, env: dict, timeout_s: float) -> bool:
    code = f"import ray; ray.init(address={address!r}); print(ray.cluster_resources().get('CPU'))"
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        if p.returncode == 0:
            return True
        time.sleep(2)
    return False


def _applications(address: str, env: dict) -> str:
    code = (f"import ray; ray.init(address={address!r}); from ray import serve; "
            "print('APPS', sorted(serve.status().applications))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=90)
    return p.stdout + p.stderr


@pytest.mark.slow
def test_serve_joins_an_existing_cluster_and_leaves_it_running(served_models):
    pytest.importorskip("ray.serve")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), RAY_AUTH_MODE="disabled", RAY_DEDUP_LOGS="0")
    env.pop("RAY_ADDRESS", None)
    gcs = free_port()
    address = f"127.0.0.1:{gcs}"
    head = _head(gcs, env)
    serve_proc = None
    try:
        assert _connects(address, env, 90), "the test's Ray head did not come up"
        port = free_port()
        serve_proc = _start([served_models["resnet_dyn"].path, "--name", "joined", "--address", address,
                             "--port", str(port), "--replicas", "1", "--replica-cpus", "0.5"], env)
        _wait_line(serve_proc, "Ctrl-C stops", 150)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, 30)
        m = served_models["resnet_dyn"]
        feeds = m.make(5, 3)
        got = triton_infer(triton_client(url), "joined", feeds)
        for k, ref in m.reference(feeds).items():
            assert close(got[k], ref), k
        os.killpg(serve_proc.pid, signal.SIGINT)
        rest, _ = serve_proc.communicate(timeout=60)
        assert serve_proc.returncode == 0, rest[-3000:]
        assert head.poll() is None, "clglow serve took the cluster down with it"
        apps = _applications(address, env)
        assert "APPS []" in apps, apps[-2000:]
    finally:
        for proc in (serve_proc, head):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
