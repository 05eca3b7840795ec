"""`clglow serve` end to end: a folder of models and a NAME=FILE pair served by the CLI's own
local Ray instance, answered by tritonclient, then stopped by Ctrl-C (SIGINT to its process
group, as a terminal sends it) with exit status 0 and nothing left running."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from serve_clients import triton_client, triton_infer
from serve_helpers import close, free_port, wait_ready


def _start(args: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "clglow", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)


def _wait_line(proc: subprocess.Popen, word: str, timeout_s: float) -> list:
    lines, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line.rstrip())
        if word in line:
            return lines
    proc.kill()
    raise AssertionError(f"no {word!r} from clglow serve:\n" + "\n".join(lines[-40:]))


@pytest.mark.slow
def test_clglow_serve_folder_and_named_model_then_ctrl_c(served_models, tmp_path):
    pytest.importorskip("ray.serve")
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("resnet_fixed", "bert_dyn"):
        shutil.copy(served_models[name].path, folder / f"{name}.onnx")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), RAY_DEDUP_LOGS="0")
    proc = _start([str(folder), f"extra={served_models['resnet_dyn'].path}", "--port", str(port),
                   "--num-cpus", "1", "--replicas", "1", "--replica-cpus", "0.5", "--max-batch-size", "8"], env)
    try:
        lines = _wait_line(proc, "Ctrl-C stops", 150)
        url = f"http://127.0.0.1:{port}"
        assert any(f"{url}/v2/models/bert_dyn" in line for line in lines), lines
        wait_ready(url, 30)
        client = triton_client(url)
        for name, model in (("resnet_fixed", "resnet_fixed"), ("bert_dyn", "bert_dyn"), ("extra", "resnet_dyn")):
            m = served_models[model]
            feeds = m.make(11, 2 if model.endswith("_dyn") else 1)
            got = triton_infer(client, name, feeds)
            for k, ref in m.reference(feeds).items():
                assert close(got[k], ref), (name, k)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest[-3000:]
        assert "shutting down" in rest
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:  # Ray's processes (in the CLI's process group) are gone too
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("processes of clglow serve's Ray instance outlived it")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_missing_model_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "clglow", "serve", str(tmp_path / "nope.onnx")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                         timeout=60)
    assert out.returncode == 2 and "no model file or folder" in out.stderr
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    out = subprocess.run([sys.executable, "-m", "clglow", "serve", str(tmp_path / "bad.onnx")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                         timeout=60)
    assert out.returncode == 2 and "bad.onnx" in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
