"""The serve extra stays optional (clglow and its pure serving modules import without Ray; the
CLI names the extra when Ray is missing), and the replicas' device policy."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

BLOCK_RAY = "import sys; sys.modules['ray'] = None; sys.modules['fastapi'] = None\n"


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_RAY + code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def test_clglow_imports_without_ray():
    out = _python("import clglow, clglow.cli, clglow.ray, clglow.serve.protocol, clglow.serve.batching, "
                  "clglow.serve.loadgen, clglow.serve.cli\nprint('ok')")
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_serve_without_ray_names_the_extra(served_models):
    path = served_models["resnet_fixed"].path
    out = _python(f"from clglow.cli import main\nraise SystemExit(main(['serve', {path!r}]))")
    assert out.returncode == 2, out.stderr[-2000:]
    assert 'pip install "clglow[serve]"' in out.stderr


def test_replica_devices(monkeypatch):
    pytest.importorskip("ray.serve")
    from clglow.serve import app
    from clglow.serve.app import ModelSpec, ServeConfig

    config = ServeConfig(models=(ModelSpec("m", "m.onnx"),))
    monkeypatch.setattr(app, "dedicated_devices", lambda: ["0:0", "0:1", "1:0"])
    assert [app.replica_device(config, r) for r in range(4)] == ["0:0", "0:1", "1:0", "0:0"]
    assert app.default_replicas() == 3
    assert app.replica_device(ServeConfig(models=config.models, device="1:0"), 0) == "1:0"
    monkeypatch.setattr(app, "dedicated_devices", lambda: [])
    assert app.replica_device(config, 5) is None and app.default_replicas() == 1


def test_build_app_refuses_bad_configs():
    pytest.importorskip("ray.serve")
    from clglow.errors import InvalidArgument
    from clglow.serve.app import ModelSpec, ServeConfig, build_app

    with pytest.raises(InvalidArgument, match="at least one model"):
        build_app(ServeConfig(models=()))
    with pytest.raises(InvalidArgument, match="same name"):
        build_app(ServeConfig(models=(ModelSpec("m", "a.onnx"), ModelSpec("m", "b.onnx"))))
