"""Shared helpers of the end-to-end tests: comparison with the oracle and placement checks."""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/ for `models`
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/e2e for `light_models`


def assert_close(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-3, atol_rel: float = 1e-4) -> None:
    """The issue's tolerance: rtol 1e-3 and atol 1e-4 x max|reference|."""
    assert got.shape == ref.shape, (got.shape, ref.shape)
    atol = atol_rel * max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


def assert_all_on_device(sess) -> None:
    hosts = [str(p) for p in sess.placement if p.where != "opencl"]
    assert not hosts, "nodes fell back to the host:\n" + "\n".join(hosts)
