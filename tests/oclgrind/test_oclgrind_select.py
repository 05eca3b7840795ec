"""NonZero, Compress, Unique and NonMaxSuppression sized at run time (lower/select.py,
kernels_cl/select.cl) on Oclgrind: out-of-bounds accesses and data races (NMS's one work-group
loop, its local reductions) checked (tests/test_sized_outputs.py, the device cases only: the
host NMS tests are left out).

The uninitialised-value checker stays off: under it (Oclgrind 21.10) these sessions' inputs read
as uninitialised in every kernel of the run, the existing ones too (gather_nd, strided_copy,
fused_flat), and the values kernels read change (a Compress gathered zeros); without it every case
matches onnx.reference and no report is made.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


def test_sized_output_kernels(oclgrind_env):  # noqa: F811
    # target="gpu" cases left out: Oclgrind's own family is the GPU one
    skip = "not host_nms and not many_boxes and not large_unique and not gpu"
    args = pytest_args("tests/test_sized_outputs.py") + ["-k", skip]
    run_checked(oclgrind_env, args, uninitialized=False)
