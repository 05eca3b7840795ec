"""Helpers shared by the ONNXIFI tests (a uniquely named module: tests/ has several conftest.py)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER_CANDIDATES = [Path("/usr/include/onnx/onnxifi.h"),
                     Path("/usr/lib/python3/dist-packages/onnx/onnxifi.h")]


def onnxifi_header() -> Path | None:
    """onnx/onnxifi.h from Debian's libonnx-dev (ONNXIFI_HEADER overrides)."""
    env = os.environ.get("ONNXIFI_HEADER")
    if env:
        return Path(env) if Path(env).exists() else None
    return next((p for p in HEADER_CANDIDATES if p.exists()), None)


def run(cmd: list, timeout: float, env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run a child process; its output is shown when it fails."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if p.returncode != 0:
        print(p.stdout[-20000:])
        print(p.stderr[-20000:])
    return p
