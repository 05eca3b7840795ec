"""Half storage (SessionOptions.precision="fp16") on Oclgrind: the half paths of gemm.cl,
elementwise.cl, fused_elementwise.cl, softmax.cl, norm.cl, the moves and storage.h's conversions
(tests/test_precision.py's kernel cases), bounds, races and uninitialised values checked, under
the CPU family (gemm.cl, softmax.cl rows) and Oclgrind's own GPU family (xgemm and the work-group
softmax on float32 copies, lower/half.py).

Left out, as for float32: the session-level cases (a session's warm-up launches of the GEMV with
dummy buffers report uninitialised values in float32 too). The CPU family's GEMMs with an
in-place B prefetch it (PFB): Oclgrind builds them with -DCLG_NO_PREFETCH (Target.prefetch).
Under the GPU family the MatMul and softmax cases run on half storage in xgemm.cl and
gpu_softmax.cl themselves (no float32 copies any more, whose kernels were reported uninitialised
when several cases ran in one process): every checker on.

The GPU family's kernels on half storage (test_precision.py's test_gpu_* node cases: xgemm.cl's
conv rows, MatMul and FusedMatMul views and epilogue, gpu_gemv.cl, gpu_dwconv.cl, gpu_softmax.cl,
gpu_reduce.cl, global pools, gpu_attention.cl): every checker on, zero reports, but for the
im2col-panel and Winograd rows, which run with the uninitialised-value checker off (im2col.cl's
stride-2 shuffle and the grown scratch buffer: the false positives of test_oclgrind.py and
test_oclgrind_gpu_conv.py).

Convolutions and pools on half storage (test_precision.py's conv_half / pool_half cases): im2col.cl's
im2col with its GEMM on packed panels, dwconv.cl and pool.cl under the CPU family, bounds and
races (the other conv paths' GEMMs read X or the pixel rows in place: the prefetch above); the
uninitialised-value checker is off there because it segfaults in dwconv_rows (Oclgrind's bug on
lane arithmetic: test_oclgrind.py's test_checker_crashes_on_lane_arithmetic) and reports pool2d_rows'
stores in float32 too (tests/kernels/test_pool.py on Oclgrind: "Uninitialized value written" at
the first case)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_oclgrind import oclgrind_env, pytest_args, run_checked  # noqa: E402,F401  (oclgrind_env: the fixture)

pytestmark = [pytest.mark.oclgrind, pytest.mark.slow]

CASES = ("storage_conversions or matmul_half_storage or binary_half or unary_half or moves_and_select "
         "or softmax_half_storage")


@pytest.mark.parametrize("family", ["cpu", "gpu"])
def test_half_storage_kernels(oclgrind_env, family):  # noqa: F811
    cases = f"({CASES}) and not gpu_" if family == "gpu" else f"({CASES}) and not 37-50 and not gpu_"
    run_checked(dict(oclgrind_env, CLGLOW_TARGET=family), pytest_args("tests/test_precision.py") + ["-k", cases])


# the node cases (the models run on pocl); the convs with their residual and activation only (the
# plain ones add no code path the simulator would check differently: they run on pocl)
GPU_CASES = "test_gpu_ and not encoder and not decoder and (not conv_half_storage or Relu)"


def test_gpu_family_half_storage(oclgrind_env):  # noqa: F811
    """The GPU family's kernels reading and writing half storage (module docstring): 23 cases with
    every checker on, then the im2col-panel and Winograd convs with bounds and races; zero reports
    (about 30 s)."""
    out = run_checked(oclgrind_env, pytest_args("tests/test_precision.py")
                      + ["-k", f"{GPU_CASES} and not im2col and not winograd"])
    assert "23 passed" in out and "skipped" not in out, out[-2000:]
    run_checked(oclgrind_env, pytest_args("tests/test_precision.py")
                + ["-k", "test_gpu_conv_half_storage and Relu and (im2col or winograd)"], uninitialized=False)


def test_half_storage_layernorm(oclgrind_env):  # noqa: F811
    """Bounds and races: Oclgrind's uninitialised-value checker segfaults in norm.cl's layernorm,
    the float32 one too (its 16-lane row sums, lanes.h), as in global_pool: Oclgrind's bug on the
    sum of a vector's lanes (test_oclgrind.py's test_checker_crashes_on_lane_arithmetic)."""
    run_checked(oclgrind_env, pytest_args("tests/test_precision.py") + ["-k", "layernorm_half"], uninitialized=False)


def test_half_storage_convs_and_pools(oclgrind_env):  # noqa: F811
    """Half X, residual and Y through im2col / pack_b + gemm.cl (packed B), depthwise (dwconv,
    dwconv_rows), conv_gemv, the regions' scatter, every pool kernel and reduce.cl's reduce, CPU
    family: bounds and races (33 cases, zero reports)."""
    cases = "(conv_half_storage and (im2col or depthwise or gemv or regions)) or pool_half_storage or reduce_half"
    out = run_checked(dict(oclgrind_env, CLGLOW_TARGET="cpu"), pytest_args("tests/test_precision.py") + ["-k", cases],
                      uninitialized=False)
    assert " passed" in out and "skipped" not in out, out[-2000:]  # the CPU family's paths ran, none skipped
