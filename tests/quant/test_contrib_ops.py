"""The com.microsoft quantized ops on OpenCL (lower/qlinear.py, lower/quant.py) against onnxruntime's
literal run (ORT_DISABLE_ALL), with host fallback off: every node must run on the device.

Tolerance: 1 quantization step. clglow follows onnxruntime's float arithmetic (same order, no
fused multiply-add, round half to even, the zero point added after rounding where MLAS does so),
and every case here is equal to onnxruntime's output; a step can still differ where a value lies
within a float rounding of a half step (OpenCL's division and exp need not round as glibc's do;
onnxruntime's sigmoid is MLAS's polynomial, clglow's table uses numpy's exp).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quant_oracle import assert_within_steps, clglow_session_run, ort_exact_weights, ort_literal_run

MS = "com.microsoft"
NP_TO_ONNX = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.float32): TensorProto.FLOAT}


def _out(name: str, dtype: np.dtype, rank: int) -> onnx.ValueInfoProto:
    """A graph output of `dtype` and rank, its dims left symbolic (the test does not presume them)."""
    return helper.make_tensor_value_info(name, NP_TO_ONNX[np.dtype(dtype)], [f"{name}_d{i}" for i in range(rank)])


def _model(node: onnx.NodeProto, inputs: dict, consts: dict, opset: int = 17,
           out: tuple = None) -> onnx.ModelProto:
    """One contrib node; `inputs` graph inputs {name: array}, `consts` initializers; the output of
    `out` (dtype, rank), by default the first input's."""
    ins = [helper.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    first = next(iter(inputs.values()))
    dtype, rank = out if out is not None else (first.dtype, max(v.ndim for v in inputs.values()))
    outs = [_out(o, dtype, rank) for o in node.output]
    g = helper.make_graph([node], "g", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def _check(node, inputs, consts, steps=1, opset=17):
    m = _model(node, inputs, consts, opset)
    ref = ort_literal_run(m, inputs)
    got, sess = clglow_session_run(m, inputs, device_only=True)
    assert all(p.where == "opencl" for p in sess.placement), [str(p) for p in sess.placement]
    for g, r in zip(got, ref):
        assert_within_steps(g, r, steps)
    return got, ref


def _q(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, size=shape).astype(dtype)


def _params(rng, dtype, prefix, scale=None):
    zp = np.array(rng.integers(100, 156) if dtype == np.uint8 else rng.integers(-28, 28), dtype)
    return {f"{prefix}_s": np.array(scale if scale is not None else rng.uniform(0.01, 0.05), np.float32),
            f"{prefix}_z": zp}


DTYPES = [np.uint8, np.int8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("shapes", [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 5)), ((3, 1, 7), (6, 1)),
                                    ((4, 9), ()), ((1,), (3, 5, 64)), ((128, 64), (1, 1)),  # one element
                                    ((1, 16, 4, 16), (1, 16, 1, 1)), ((16, 1), (2, 16, 48)),  # qbinary_rows
                                    ((2, 8, 32), (32,)), ((1, 8, 7, 7), (1, 8, 1, 1))])  # rows of 49: ROW_DIV
def test_qlinear_binary(op, dtype, shapes):
    rng = np.random.default_rng(1)
    inputs = {"a": _q(rng, shapes[0], dtype), "b": _q(rng, shapes[1], dtype)}
    consts = {**_params(rng, dtype, "a"), **_params(rng, dtype, "b"),
              **_params(rng, dtype, "c", 0.3 if op == "QLinearMul" else 0.04)}
    node = helper.make_node(op, ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"], domain=MS)
    _check(node, inputs, consts)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("const_side", ["a", "b"])
def test_qlinear_binary_with_a_constant_element(op, dtype, const_side):
    """A constant one-element operand (GELU's + 1, * 0.5) makes the op a table of the other one's
    byte (qlut): within a step of onnxruntime, and equal to the elementwise kernel given the same
    element as a full-shape input."""
    rng = np.random.default_rng(5)
    live = _q(rng, (2, 16, 40), dtype)
    one = _q(rng, (1,), dtype)
    params = {**_params(rng, dtype, "a"), **_params(rng, dtype, "b"),
              **_params(rng, dtype, "c", 0.3 if op == "QLinearMul" else 0.04)}
    node = helper.make_node(op, ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"], domain=MS)
    inputs, consts = ({"b": live}, {"a": one}) if const_side == "a" else ({"a": live}, {"b": one})
    got, _ = _check(node, inputs, {**consts, **params})
    full = {k: np.broadcast_to(v, live.shape).copy() for k, v in consts.items()}
    flat, _ = clglow_session_run(_model(node, {**inputs, **full} if const_side == "b" else {**full, **inputs}, params),
                                 {**inputs, **full}, device_only=True)
    np.testing.assert_array_equal(got[0], flat[0])


def test_qlinear_add_without_output_zero_point():
    rng = np.random.default_rng(2)
    inputs = {"a": _q(rng, (3, 8), np.uint8), "b": _q(rng, (3, 8), np.uint8)}
    consts = {**_params(rng, np.uint8, "a"), **_params(rng, np.uint8, "b"), "c_s": np.array(0.05, np.float32)}
    node = helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s"], ["c"], domain=MS)
    _check(node, inputs, consts)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
                                      ("QLinearLeakyRelu", {})])
def test_qlinear_lookup_ops(op, attrs, dtype):
    rng = np.random.default_rng(3)
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(4, 64)  # every input code once
    consts = {**_params(rng, dtype, "x", 0.05), **_params(rng, dtype, "y", 0.004 if op == "QLinearSigmoid" else 0.04)}
    node = helper.make_node(op, ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, **attrs)
    _check(node, {"x": x}, consts)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(dtype, channels_last):
    rng = np.random.default_rng(4)
    shape = (2, 5, 7, 16) if channels_last else (2, 16, 5, 7)
    consts = {**_params(rng, dtype, "x", 0.02), **_params(rng, dtype, "y", 0.01)}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS,
                            channels_last=channels_last)
    _check(node, {"x": _q(rng, shape, dtype)}, consts)


POOLS = [
    ((1, 3, 8, 8), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ((1, 3, 8, 8), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ((2, 4, 9, 9), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 6, 6, 5), dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], channels_last=1)),
    ((2, 3, 11), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,attrs", POOLS)
def test_qlinear_average_pool(shape, attrs, dtype):
    rng = np.random.default_rng(5)
    consts = {**_params(rng, dtype, "x", 0.02), **_params(rng, dtype, "y", 0.015)}
    node = helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, **attrs)
    _check(node, {"x": _q(rng, shape, dtype)}, consts)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [1, -1])
def test_qlinear_concat(dtype, axis):
    rng = np.random.default_rng(6)
    shapes = [(2, 3, 4), (2, 5, 4), (2, 1, 4)] if axis == 1 else [(2, 3, 4), (2, 3, 2), (2, 3, 5)]
    inputs = {f"x{i}": _q(rng, s, dtype) for i, s in enumerate(shapes)}
    y = _params(rng, dtype, "y", 0.03)
    consts = dict(y)
    names = ["y_s", "y_z"]
    for i in range(3):
        p = {f"x{i}_s": y["y_s"], f"x{i}_z": y["y_z"]} if i == 1 else _params(rng, dtype, f"x{i}")
        consts.update(p)
        names += [f"x{i}", f"x{i}_s", f"x{i}_z"]
    node = helper.make_node("QLinearConcat", names, ["y"], domain=MS, axis=axis)
    _check(node, inputs, consts)


SOFTMAX = [((2, 3, 10), 13, -1), ((2, 6, 5), 13, 1), ((2, 3, 4), 12, 1), ((4, 16), 1, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,opset,axis", SOFTMAX)
def test_qlinear_softmax(shape, opset, axis, dtype):
    """Inputs within 60 steps (x_scale 0.05) keep every probability below ~0.996: onnxruntime's int8
    kernel wraps a rounded 256 * p = 256 to -128 instead of saturating (clglow saturates)."""
    rng = np.random.default_rng(7)
    lo = 100 if dtype == np.uint8 else -30
    x = rng.integers(lo, lo + 60, size=shape).astype(dtype)
    consts = {"x_s": np.array(0.05, np.float32), "x_z": np.array(lo, dtype), "y_s": np.array(1 / 256, np.float32),
              "y_z": np.array(0 if dtype == np.uint8 else -128, dtype)}
    node = helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, axis=axis,
                            opset=opset)
    _check(node, {"x": x}, consts)


@pytest.mark.parametrize("per_axis", [False, True])
def test_com_microsoft_quantize_dequantize(per_axis):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    s = np.array([0.02, 0.03, 0.01, 0.05], np.float32) if per_axis else np.array(0.02, np.float32)
    z = np.array([1, -3, 0, 7], np.int8) if per_axis else np.array(-5, np.int8)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS, axis=1)
    m = _model(q, {"x": x}, {"s": s, "z": z}, out=(np.int8, 3))
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain=MS, axis=1)
    m.graph.node.append(dq)
    m.graph.output.append(_out("y", np.float32, 3))
    ref = ort_literal_run(m, {"x": x})
    got, sess = clglow_session_run(m, {"x": x})
    assert all(p.where == "opencl" for p in sess.placement)
    assert_within_steps(got[0], ref[0], 0)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6, atol=1e-7)


def test_nonconstant_scale_runs_on_the_host():
    """A lookup-table op with a scale fed at run time declines the device and runs on the host."""
    rng = np.random.default_rng(9)
    x = _q(rng, (3, 5), np.uint8)
    node = helper.make_node("QLinearSigmoid", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS)
    inputs = {"x": x, "x_s": np.array(0.04, np.float32)}
    consts = {"x_z": np.array(128, np.uint8), "y_s": np.array(1 / 256, np.float32), "y_z": np.array(0, np.uint8)}
    m = _model(node, inputs, consts)
    ref = ort_literal_run(m, inputs)
    got, sess = clglow_session_run(m, inputs, device_only=False)
    assert [p.where for p in sess.placement] == ["host"]
    assert "non-constant" in sess.placement[0].reason
    assert_within_steps(got[0], ref[0], 1)


@pytest.mark.parametrize("shape", [(2, 6, 9), (1, 4, 2, 3, 5)])
def test_qlinear_global_average_pool_other_ranks(shape):
    rng = np.random.default_rng(10)
    consts = {**_params(rng, np.uint8, "x", 0.02), **_params(rng, np.uint8, "y", 0.01)}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS)
    _check(node, {"x": _q(rng, shape, np.uint8)}, consts)


def test_qlinear_concat_with_an_empty_input_and_softmax_of_one():
    rng = np.random.default_rng(11)
    inputs = {"x0": _q(rng, (2, 3), np.uint8), "x1": _q(rng, (2, 0), np.uint8)}
    consts = {**_params(rng, np.uint8, "y"), **_params(rng, np.uint8, "x0"), **_params(rng, np.uint8, "x1")}
    node = helper.make_node("QLinearConcat", ["y_s", "y_z", "x0", "x0_s", "x0_z", "x1", "x1_s", "x1_z"], ["y"],
                            domain=MS, axis=1)
    _check(node, inputs, consts)
    consts = {"x_s": np.array(0.05, np.float32), "x_z": np.array(128, np.uint8),
              "y_s": np.array(1 / 256, np.float32), "y_z": np.array(0, np.uint8)}
    node = helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS, axis=-1, opset=13)
    got, _ = _check(node, {"x": _q(rng, (3, 1), np.uint8)}, consts)
    assert (got[0] == 255).all()  # one element per row: p = 1, saturated (256 steps of 1/256)


@pytest.mark.parametrize("dtype", DTYPES)
def test_com_microsoft_qlinear_conv(dtype):
    """The NCHW com.microsoft QLinearConv on ai.onnx QLinearConv's kernels (lower/qconv.py)."""
    rng = np.random.default_rng(12)
    x = _q(rng, (1, 4, 9, 9), dtype)
    consts = {"x_s": np.array(0.02, np.float32), "x_z": np.array(120 if dtype == np.uint8 else 3, dtype),
              "w": ort_exact_weights(rng, (6, 4, 3, 3)), "w_s": np.array(0.01, np.float32), "w_z": np.array(0, np.int8),
              "y_s": np.array(0.2, np.float32), "y_z": np.array(100 if dtype == np.uint8 else -5, dtype),
              "b": rng.integers(-300, 300, size=(6,)).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z", "b"], ["y"],
                            domain=MS, pads=[1, 1, 1, 1], strides=[2, 2])
    _check(node, {"x": x}, consts)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("shape", [(1, 6, 40, 40), (2, 3, 17, 19), (1, 2, 48, 48)])
def test_qlinear_global_average_pool_group_reduction(shape, channels_last):
    """qgap_group (a work-group per channel, reduced in local memory), which lowering picks on
    devices with dedicated local memory: run here under such a Target on the test device."""
    import dataclasses
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels"))
    import harness  # noqa: E402  (tests/kernels)

    rng = np.random.default_rng(13)
    if channels_last:
        shape = (shape[0],) + shape[2:] + (shape[1],)
    x = _q(rng, shape, np.uint8)
    consts = {**_params(rng, np.uint8, "x", 0.02), **_params(rng, np.uint8, "y", 0.01)}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=MS,
                            channels_last=channels_last)
    ref = ort_literal_run(_model(node, {"x": x}, consts), {"x": x})
    target = dataclasses.replace(harness.device_info(), local_mem_type="local", local_mem_size=65536)
    launches = harness.lower(node, {"x": x}, consts, {"y": (ref[0].shape, ref[0].dtype)}, device=target)
    assert [la.kernel for la in launches] == ["qgap_group"]
    got, _ = harness.run(node, {"x": x}, consts, expected=ref, device=target)
    assert_within_steps(got[0], ref[0], 0)
