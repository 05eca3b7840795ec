"""Narrow-type casts (float8, float4, int4/int2, bfloat16) and BitCast vs onnx.reference, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("pyopencl")
ml_dtypes = pytest.importorskip("ml_dtypes")
try:  # tests/kernels may or may not be a package
    from .run_launches import run_node  # noqa: E402
except ImportError:
    from run_launches import run_node  # type: ignore  # noqa: E402

RNG = np.random.default_rng(31)
X = np.concatenate([RNG.standard_normal(200) * 4, RNG.standard_normal(50) * 1000, [0.0, -0.0, 448, 449, 464,
                                                                                  57344, 1e9, -1e9, np.inf,
                                                                                  -np.inf, np.nan]])


def _same_bits(node, feeds, opset):
    got, exp = run_node(node, feeds, {}, opset)
    for g, e in zip(got, exp):
        assert g.shape == e.shape
        np.testing.assert_array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(e).view(np.uint8))


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                                TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT4E2M1, TensorProto.BFLOAT16])
@pytest.mark.parametrize("src", [np.float32, np.float16])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_narrow_and_back(to, src, saturate):
    x = X.astype(src)
    attrs = {"saturate": saturate} if to != TensorProto.BFLOAT16 else {}
    _same_bits(helper.make_node("Cast", ["x"], ["y"], to=to, **attrs), {"x": x}, 23)
    back = np.asarray(x[:200]).astype(helper.tensor_dtype_to_np_dtype(to))
    _same_bits(helper.make_node("Cast", ["x"], ["y"], to=helper.np_dtype_to_tensor_dtype(np.dtype(src))),
               {"x": back}, 23)


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2])
def test_cast_lowint(to):
    x = (RNG.standard_normal(100) * 3).astype(np.float32)
    _same_bits(helper.make_node("Cast", ["x"], ["y"], to=to), {"x": x}, 25)


@pytest.mark.parametrize("src,to", [(np.float32, TensorProto.INT32), (np.int64, TensorProto.DOUBLE),
                                    (np.uint16, TensorProto.INT16)])
def test_bitcast(src, to):
    x = (RNG.standard_normal((3, 4)) * 100).astype(src)
    _same_bits(helper.make_node("BitCast", ["x"], ["y"], to=to), {"x": x}, 26)
