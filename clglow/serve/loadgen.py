"""A small closed-loop load generator for Open Inference Protocol servers (stdlib HTTP only).

`run_load` starts `clients` threads, each with its own keep-alive connection, sending
`requests_per_client` infer requests one after another; a request that fails on the way
(connection refused or reset, HTTP 5xx: a replica restarting) is retried, so only answers count.
Each answer goes through `check` (raise to record it as wrong). Latency is per request,
retries included.

    report = run_load("http://127.0.0.1:8000", "resnet", [encode_request({"data": x})], clients=8)
    print(report.summary())
"""
from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence
from urllib.parse import urlsplit

import numpy as np

from .protocol import HEADER_LENGTH, decode_response

Check = Callable[[int, dict], None]  # (index of the request body, outputs) -> raises when wrong


@dataclass
class LoadReport:
    """What a load run measured."""

    latencies_s: list = field(default_factory=list)
    wall_s: float = 0.0
    retries: int = 0
    wrong: list = field(default_factory=list)  # messages of answers `check` rejected
    failed: list = field(default_factory=list)  # requests that never got an answer

    @property
    def requests(self) -> int:
        return len(self.latencies_s)

    def throughput(self) -> float:
        """Answered requests per second of wall time."""
        return self.requests / self.wall_s if self.wall_s else 0.0

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000.0) if self.latencies_s else float("nan")

    def summary(self) -> str:
        return (f"{self.requests} requests in {self.wall_s:.2f} s: {self.throughput():.1f} req/s, "
                f"p50 {self.percentile_ms(50):.1f} ms, p99 {self.percentile_ms(99):.1f} ms, "
                f"{self.retries} retries, {len(self.wrong)} wrong, {len(self.failed)} failed")


class _Client:
    """One keep-alive connection, reopened after a failure."""

    def __init__(self, host: str, port: int, timeout_s: float):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.conn: Optional[http.client.HTTPConnection] = None

    def post(self, path: str, body: bytes, headers: dict) -> tuple[int, bytes, Optional[str]]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            self.conn.request("POST", path, body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
            return resp.status, data, resp.getheader(HEADER_LENGTH)
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


def _one(client: _Client, path: str, body: tuple, max_retries: int, report: LoadReport,
         lock: threading.Lock) -> Optional[dict]:
    """Send one request until it is answered (or retries run out); its outputs, or None."""
    last = ""
    for attempt in range(max_retries + 1):
        if attempt:
            with lock:
                report.retries += 1
            time.sleep(min(0.05 * attempt, 1.0))
        try:
            status, data, hlen = client.post(path, body[0], body[1])
        except (OSError, http.client.HTTPException) as e:
            last = f"{type(e).__name__}: {e}"
            continue
        if status >= 500:
            last = f"HTTP {status}: {data[:200]!r}"
            continue
        if status != 200:
            raise AssertionError(f"HTTP {status}: {data[:300]!r}")
        return decode_response(data, hlen)
    with lock:
        report.failed.append(last)
    return None


def run_load(url: str, model: str, bodies: Sequence[tuple[bytes, dict]], clients: int = 8,
             requests_per_client: int = 20, check: Optional[Check] = None, max_retries: int = 50,
             timeout_s: float = 60.0, during: Optional[Callable[[], None]] = None) -> LoadReport:
    """Closed-loop load: client c sends bodies[(c + i) % len(bodies)] for i in range(n).
    `during`, when given, runs in its own thread once the clients have started."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    path = f"/v2/models/{model}/infer"
    report, lock = LoadReport(), threading.Lock()

    def worker(c: int) -> None:
        client = _Client(parts.hostname or "127.0.0.1", parts.port or 80, timeout_s)
        for i in range(requests_per_client):
            k = (c + i) % len(bodies)
            t = time.perf_counter()
            try:
                outs = _one(client, path, bodies[k], max_retries, report, lock)
                if outs is not None and check is not None:
                    check(k, outs)
            except Exception as e:  # noqa: BLE001 - a wrong answer (or a 4xx) is recorded, not raised
                with lock:
                    report.wrong.append(f"request {k}: {type(e).__name__}: {e}")
                continue
            if outs is not None:
                with lock:
                    report.latencies_s.append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    side = threading.Thread(target=during, daemon=True) if during is not None else None
    if side is not None:
        side.start()
    for t in threads:
        t.join()
    report.wall_s = time.perf_counter() - t0
    if side is not None:
        side.join()
    return report
