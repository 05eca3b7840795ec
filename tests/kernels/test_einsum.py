"""Einsum kernel vs onnx.reference (numpy.einsum): matmul, batch, transpose, diagonal, ellipsis, 3 operands."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .run_launches import check  # noqa: E402
except ImportError:
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]), ("ij", [(3, 4)]), ("ij->", [(3, 4)]), ("i,i", [(5,), (5,)]),
    ("...ij,...jk", [(2, 1, 3, 4), (3, 4, 2)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("i,j->ij", [(3,), (4,)])], ids=str)
def test_einsum(eq, shapes):
    feeds = {f"x{k}": RNG.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    check(helper.make_node("Einsum", list(feeds), ["y"], equation=eq), feeds, opset=12, rtol=1e-4, atol=1e-5)


def test_einsum_int():
    feeds = {"a": RNG.integers(-5, 5, (3, 4)).astype(np.int64), "b": RNG.integers(-5, 5, (4, 2)).astype(np.int64)}
    check(helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik"), feeds, opset=12)
