"""TopK's radix select (kernels_cl/topk.cl topk_radix: local digit counts, a work-group's scans
and ranks) and the sorted NMS (kernels_cl/select.cl: bitonic steps in local memory, the merge
sort, the greedy walk over x windows) on Oclgrind under both families: out-of-bounds accesses
and data races. The uninitialised-value checker stays off, as for the other sized ops
(test_oclgrind_select.py: under it the sessions' inputs read as uninitialised everywhere)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]


@pytest.mark.parametrize("family", ["gpu", "cpu"])
def test_topk_radix_and_sorted_nms(oclgrind_env, family):  # noqa: F811
    env = dict(oclgrind_env, CLGLOW_TARGET=family)
    topk = pytest_args("tests/kernels/test_topk.py") + ["-k", "radix_float_edges or one_pass_limit"]
    run_checked(env, topk, uninitialized=False)
    nms = pytest_args("tests/test_sized_outputs.py") + ["-k", "many_boxes"]
    run_checked(env, nms, uninitialized=False)
