"""MatMul asks the gemm family for its tiles as Gemm does (lower/gemm.py tuned_operands): a live A with
constant weights takes the family's "strided" key, weights as A its packed-A key, a batched
product none; the tiles the family answers are the ones launched, and the product stays right
(vs numpy). The family is stubbed: no dependence on the tuning database."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import execute, lower_ctx
except ImportError:
    from run_launches import execute, lower_ctx  # type: ignore

from clglow.lower import gemm as gm
from clglow.lower.gemm_kernel import GemmConfig
from clglow.target import Target

CPU = Target(family="cpu", preferred_vector_width_float=16)
RNG = np.random.default_rng(29)


@pytest.mark.parametrize("a_shape,b_shape,const,key", [
    ((1, 64, 96), (96, 200), "b", (64, 200, 96, "packed", "strided")),   # a vocabulary head's shape
    ((48, 96), (96, 40), "a", (48, 40, 96, "packed")),                    # weights as A, a narrow B packed
    ((3, 20, 16), (3, 16, 24), "b", None),                                # batched: no key
])
def test_tiles_from_the_family(monkeypatch, a_shape, b_shape, const, key):
    asked = []
    chosen = GemmConfig(8, 16, 3, (1, 1, 1))

    def family(target, k, fallback, label="", valid=None):
        asked.append(k)
        return (chosen if valid is None or valid(chosen) else fallback), "db"

    monkeypatch.setattr(gm, "tuned_tiles", family)
    a, b = RNG.standard_normal(a_shape).astype(np.float32), RNG.standard_normal(b_shape).astype(np.float32)
    feeds, consts = ({"a": a}, {"b": b}) if const == "b" else ({"b": b}, {"a": a})
    want = np.matmul(a, b)
    op, lctx = lower_ctx(helper.make_node("MatMul", ["a", "b"], ["y"]), feeds, consts,
                         {"y": (want.shape, np.float32)}, 17, CPU)
    launches = op.lower(lctx)
    assert asked == ([] if key is None else [key])
    gemm = [ln for ln in launches if ln.kernel == "gemm"]
    if key is not None:
        assert gemm and all(ln.defines["MR"] == 8 and ln.defines["NV"] == 3 for ln in gemm)
    got = execute(launches, {**feeds, **consts}, {"y": np.empty(want.shape, np.float32)})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
