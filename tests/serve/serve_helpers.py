"""Helpers of the serving tests (a module of its own: test files import it, never `conftest`,
which other test folders also have): the test models, tolerances, ports, readiness."""
from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/ for `models`

from models import mlp, transformer_encoder  # noqa: E402

from clglow.models.resnet import resnet  # noqa: E402

MAX_BODY = 4 << 20
REPLICAS = 2


@dataclass
class Served:
    """One model of the test server: its proto, file, and a seeded input maker."""

    name: str
    proto: onnx.ModelProto
    path: str
    make: Callable[[int, int], dict]  # (seed, batch) -> feeds
    max_batch_size: int = 32

    def reference(self, feeds: dict) -> dict:
        """onnxruntime's outputs: the independent oracle (one onnxruntime session per model)."""
        import onnxruntime as ort

        if getattr(self, "_ort", None) is None:
            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            self._ort = ort.InferenceSession(self.proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in self.proto.graph.output]
        return dict(zip(names, self._ort.run(names, dict(feeds))))


def resnet_feeds(seed: int, batch: int, size: int = 32) -> dict:
    return {"data": np.random.default_rng(seed).standard_normal((batch, 3, size, size), dtype=np.float32)}


def resnet64_feeds(seed: int, batch: int) -> dict:
    return resnet_feeds(seed, batch, 64)


def mlp_feeds(seed: int, batch: int) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((batch, 1024), dtype=np.float32)}


def bert_feeds(seed: int, batch: int, seq: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.float32)
    mask[-1, -2:] = 0.0
    return {"input_ids": rng.integers(0, 100, size=(batch, seq), dtype=np.int64), "attention_mask": mask}


def close(got: np.ndarray, ref: np.ndarray) -> bool:
    """rtol 1e-3 and atol 1e-4 x max|reference| (the suite's end-to-end tolerance)."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    atol = 1e-4 * max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    return bool(np.allclose(got, ref, rtol=1e-3, atol=atol))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_models(folder: str) -> list[Served]:
    specs = [
        ("resnet_fixed", resnet(18, batch=1, image_size=32, num_classes=10, seed=1), resnet_feeds, 32),
        # 64x64: enough work per row that batching's gain shows through the HTTP overhead
        ("resnet_dyn", resnet(18, batch="N", image_size=64, num_classes=10, seed=1), resnet64_feeds, 32),
        ("bert_fixed", transformer_encoder(batch=1, seq="seq", vocab=100, layers=1, seed=2), bert_feeds, 32),
        ("bert_dyn", transformer_encoder(batch="batch", seq="seq", vocab=100, layers=1, seed=2), bert_feeds, 32),
    ]
    out = []
    for name, proto, make, mbs in specs:
        path = os.path.join(folder, f"{name}.onnx")
        onnx.save(proto, path)
        out.append(Served(name, proto, path, make, mbs))
    dyn = next(m for m in out if m.name == "resnet_dyn")
    out.append(Served("resnet_dyn_nobatch", dyn.proto, dyn.path, resnet64_feeds, 0))
    # The batching load test's model: weight-bound (256 MB of weights, ~20 ms a row on a 2-core
    # CPU), so a row's device time outweighs a request's HTTP and Ray cost (~25 core-ms on 2
    # cores, measured) and batching's gain shows through it; the conv nets' does not reliably.
    proto = mlp(batch="N", blocks=8, seed=3)
    path = os.path.join(folder, "mlp_dyn.onnx")
    onnx.save(proto, path)
    out += [Served("mlp_dyn", proto, path, mlp_feeds, 32), Served("mlp_dyn_nobatch", proto, path, mlp_feeds, 0)]
    return out


def wait_ready(url: str, timeout_s: float) -> float:
    """Poll /v2/health/ready until it answers 200; the seconds it took."""
    import requests

    t0 = time.monotonic()
    last: Optional[str] = None
    while time.monotonic() - t0 < timeout_s:
        try:
            r = requests.get(url + "/v2/health/ready", timeout=5)
            if r.status_code == 200:
                return time.monotonic() - t0
            last = f"{r.status_code} {r.text[:200]}"
        except requests.RequestException as e:
            last = str(e)
        time.sleep(0.5)
    raise AssertionError(f"server at {url} not ready after {timeout_s} s: {last}")
