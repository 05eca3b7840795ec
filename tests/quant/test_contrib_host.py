"""The host references of the com.microsoft ops (runtime/contrib_host.py): what runs a contrib node
that no kernel covers. The non-GEMM ones against onnxruntime's literal run (1 step); the GEMM ones
against an exact numpy product written here (onnxruntime's own int8 GEMM can saturate int16 pair
sums on CPUs without VNNI, so it is not the truth for them)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from clglow.frontend.onnx_model import import_model
from clglow.runtime.host import HostKernel, host_supported
from quant_oracle import assert_within_steps, ort_literal_run

MS = "com.microsoft"
ELEM = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}


def _model(op, ins, feeds, consts, out_dtype, out_rank, **attrs):
    node = helper.make_node(op, ins, ["y"], name="n", domain=MS, **attrs)
    gin = [helper.make_tensor_value_info(k, ELEM[v.dtype], list(v.shape)) for k, v in feeds.items()]
    out = helper.make_tensor_value_info("y", ELEM[np.dtype(out_dtype)], [f"d{i}" for i in range(out_rank)])
    g = helper.make_graph([node], "g", gin, [out], [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def _host(m, feeds):
    graph = import_model(m)
    node = graph.nodes[0]
    assert host_supported(node, 1) is None
    kernel = HostKernel(node, graph)
    arrays = [feeds[n] if n in feeds else graph.const(n) for n in kernel.input_names]
    return kernel.run(arrays)[0]


U8, I8 = np.uint8, np.int8
S = lambda v: np.array(v, np.float32)  # noqa: E731


def _rand(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, int(info.max) + 1, size=shape).astype(dt)


CASES = [
    ("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], {}, {"a": (2, 3, 4), "b": (3, 1)},
     {"as": S(0.02), "az": 120, "bs": S(0.03), "bz": 130, "cs": S(0.04), "cz": 128}),
    ("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], {}, {"a": (2, 3, 4), "b": (4,)},
     {"as": S(0.02), "az": 120, "bs": S(0.03), "bz": 130, "cs": S(0.2), "cz": 128}),
    ("QLinearSigmoid", ["a", "as", "az", "ys", "yz"], {}, {"a": (4, 64)}, {"as": S(0.05), "az": 128, "ys": S(1 / 256),
                                                                          "yz": 0}),
    ("QLinearLeakyRelu", ["a", "as", "az", "ys", "yz"], {"alpha": 0.2}, {"a": (4, 64)},
     {"as": S(0.05), "az": 128, "ys": S(0.04), "yz": 100}),
    ("QLinearGlobalAveragePool", ["a", "as", "az", "ys", "yz"], {}, {"a": (2, 3, 5, 5)},
     {"as": S(0.05), "az": 128, "ys": S(0.02), "yz": 120}),
    ("QLinearAveragePool", ["a", "as", "az", "ys", "yz"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
     {"a": (1, 2, 6, 6)}, {"as": S(0.05), "az": 128, "ys": S(0.02), "yz": 120}),
    ("QLinearAveragePool", ["a", "as", "az", "ys", "yz"], {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]},
     {"a": (1, 2, 4, 4, 4)}, {"as": S(0.05), "az": 128, "ys": S(0.02), "yz": 120}),
    ("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], {"axis": 1}, {"a": (2, 3), "b": (2, 2)},
     {"ys": S(0.04), "yz": 128, "as": S(0.02), "az": 120, "bs": S(0.05), "bz": 130}),
    ("QLinearSoftmax", ["a", "as", "az", "ys", "yz"], {"axis": -1, "opset": 13}, {"a": (3, 7)},
     {"as": S(0.02), "az": 128, "ys": S(1 / 256), "yz": 0}),
]


@pytest.mark.parametrize("op,ins,attrs,shapes,consts", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_host_reference_matches_onnxruntime(op, ins, attrs, shapes, consts):
    rng = np.random.default_rng(0)
    feeds = {k: _rand(rng, s, U8) for k, s in shapes.items()}
    consts = {k: (np.array(v, U8) if isinstance(v, int) else v) for k, v in consts.items()}
    rank = max(len(s) for s in shapes.values())
    m = _model(op, ins, feeds, consts, U8, rank, **attrs)
    assert_within_steps(_host(m, feeds), ort_literal_run(m, feeds)[0], 1)


def _exact(a, az, b, bz):
    return (a.astype(np.int64) - np.int64(az)) @ (b.astype(np.int64) - np.asarray(bz, np.int64))


@pytest.mark.parametrize("requantize", [False, True])
def test_host_qgemm_exact(requantize):
    rng = np.random.default_rng(1)
    a, b = _rand(rng, (5, 16), U8), _rand(rng, (16, 7), I8)  # all 8 bits of the weights
    c = rng.integers(-1000, 1000, size=(7,)).astype(np.int32)
    consts = {"as": S(0.02), "az": np.array(131, U8), "b": b, "bs": S(0.01), "bz": np.array(0, I8), "c": c}
    ins = ["a", "as", "az", "b", "bs", "bz", "c"]
    if requantize:
        consts.update(ys=S(0.5), yz=np.array(10, U8))
        ins += ["ys", "yz"]
    m = _model("QGemm", ins, {"a": a}, consts, U8 if requantize else np.float32, 2)
    got = _host(m, {"a": a})
    acc = _exact(a, 131, b, 0) + c
    real = acc.astype(np.float64) * np.float32(0.02) * np.float32(0.01)
    if requantize:
        want = np.clip(np.rint(real / 0.5) + 10, 0, 255)
        assert np.abs(got.astype(np.int64) - want).max() <= 1
    else:
        np.testing.assert_allclose(got, real, rtol=1e-6, atol=1e-6)


def test_host_matmul_integer_to_float_and_dynamic_exact():
    rng = np.random.default_rng(2)
    a, b = _rand(rng, (2, 3, 8), U8), _rand(rng, (8, 5), I8)
    bs = rng.uniform(0.01, 0.02, size=(5,)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    consts = {"b": b, "as": S(0.03), "bs": bs, "az": np.array(100, U8), "bz": np.array(0, I8), "bias": bias}
    m = _model("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], {"a": a}, consts, np.float32, 3)
    want = _exact(a, 100, b, 0) * (np.float64(np.float32(0.03)) * bs.astype(np.float64)) + bias
    np.testing.assert_allclose(_host(m, {"a": a}), want, rtol=1e-5, atol=1e-5)

    x = rng.standard_normal((4, 8)).astype(np.float32)
    m = _model("DynamicQuantizeMatMul", ["x", "b", "bs", "bz", "bias"], {"x": x},
               {"b": b, "bs": bs, "bz": np.array(0, I8), "bias": bias}, np.float32, 2)
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    s = np.float32((hi - lo) / 255)
    z = np.clip(np.rint(-lo / s), 0, 255)
    q = np.clip(np.rint(x / s) + z, 0, 255)
    want = _exact(q, z, b, 0) * (np.float64(s) * bs) + bias
    np.testing.assert_allclose(_host(m, {"x": x}), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_host_com_microsoft_qlinear_conv(channels_last):
    """Against an exact numpy convolution (int64 sums) requantised here."""
    rng = np.random.default_rng(3)
    x = _rand(rng, (1, 3, 6, 6), U8)
    w = _rand(rng, (4, 3, 3, 3), I8)
    bias = rng.integers(-500, 500, size=(4,)).astype(np.int32)
    consts = {"xs": S(0.02), "xz": np.array(120, U8), "w": w, "ws": S(0.01), "wz": np.array(0, I8),
              "ys": S(0.3), "yz": np.array(100, U8), "b": bias}
    feed = np.moveaxis(x, 1, -1).copy() if channels_last else x
    m = _model("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], {"x": feed}, consts, U8, 4,
               pads=[1, 1, 1, 1], channels_last=channels_last)
    got = _host(m, {"x": feed})
    xp = np.pad(x.astype(np.int64) - 120, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((1, 4, 6, 6), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 6, j:j + 6], w[:, :, i, j].astype(np.int64))
    acc += bias.reshape(1, 4, 1, 1)
    want = np.clip(np.rint(acc * (np.float64(np.float32(0.02)) * np.float32(0.01) / np.float32(0.3))) + 100, 0, 255)
    if channels_last:
        want = np.moveaxis(want, 1, -1)
    assert np.abs(got.astype(np.int64) - want).max() <= 1
