"""Host references of the com.microsoft quantized operators (onnx.reference has none).

Each class is an onnx.reference OpRun of domain com.microsoft computing what onnxruntime's CPU
kernel computes (clglow.qmath). They run a node on the host when no OpenCL kernel covers it
(non-constant scales, an int8 GEMM before its device lowering exists, 3-D pools) and keep
QOperator models loadable with CLGLOW_HOST_FALLBACK unset.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import qmath
from ..frontend.contrib_ops import DOMAIN, spatial_out

S = qmath.scalar


def _axis_attr(a: object) -> int:
    return 1 if a is None else int(a)  # type: ignore[arg-type]


def _window_attrs(x: np.ndarray, kernel_shape, strides, pads, auto_pad, ceil_mode, channels_last) -> tuple:
    """(kernel, strides, begin pads, output spatial dims) of a QLinearAveragePool."""
    from ..ir import Node

    n = x.ndim - 2
    attrs = {"strides": strides, "pads": pads, "auto_pad": auto_pad}
    node = Node("QLinearAveragePool", "host", [], [], attrs, DOMAIN)
    out_sp = spatial_out(node, tuple(x.shape), list(kernel_shape), bool(channels_last), bool(ceil_mode))
    st = [int(v) for v in strides] if strides else [1] * n
    in_sp = x.shape[1:-1] if channels_last else x.shape[2:]
    ap = auto_pad.decode() if isinstance(auto_pad, bytes) else (auto_pad or "NOTSET")
    begins = qmath.pool_pads(in_sp, out_sp, kernel_shape, st, pads, ap)[:n]
    return list(kernel_shape), st, begins, out_sp


@functools.lru_cache(maxsize=None)
def reference_ops() -> tuple:
    """The OpRun classes, one per com.microsoft op with a host reference (made once: every host
    kernel and constant fold passes them to its ReferenceEvaluator)."""
    from onnx.reference.op_run import OpRun

    class QLinearAdd(OpRun):
        op_domain = DOMAIN

        def _run(self, a, a_s, a_z, b, b_s, b_z, c_s, c_z=None):  # noqa: D401 - onnx.reference's signature
            return (qmath.qlinear_add(a, S(a_s), S(a_z), b, S(b_s), S(b_z), S(c_s), S(c_z), a.dtype),)

    class QLinearMul(OpRun):
        op_domain = DOMAIN

        def _run(self, a, a_s, a_z, b, b_s, b_z, c_s, c_z=None):
            return (qmath.qlinear_mul(a, S(a_s), S(a_z), b, S(b_s), S(b_z), S(c_s), S(c_z), a.dtype),)

    class QLinearSigmoid(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_s, x_z, y_s, y_z=None):
            t = qmath.lookup_table(qmath.sigmoid, S(x_s), S(x_z), S(y_s), S(y_z), x.dtype, x.dtype)
            return (qmath.apply_table(x, t),)

    class QLinearLeakyRelu(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_s, x_z, y_s, y_z=None, alpha=None):
            fn = qmath.leaky_relu(0.01 if alpha is None else alpha)
            t = qmath.lookup_table(fn, S(x_s), S(x_z), S(y_s), S(y_z), x.dtype, x.dtype)
            return (qmath.apply_table(x, t),)

    class QLinearGlobalAveragePool(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_s, x_z, y_s, y_z, channels_last=None):
            return (qmath.qlinear_global_avg(x, S(x_s), S(x_z), S(y_s), S(y_z), bool(channels_last)),)

    class QLinearAveragePool(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_s, x_z=None, y_s=None, y_z=None, auto_pad=None, ceil_mode=None, channels_last=None,
                 count_include_pad=None, kernel_shape=None, pads=None, strides=None):
            k, st, begins, out_sp = _window_attrs(x, kernel_shape, strides, pads, auto_pad, ceil_mode,
                                                  channels_last)
            return (qmath.qlinear_avg_pool(x, S(x_s), S(x_z), S(y_s), S(y_z), k, st, begins, out_sp,
                                           bool(count_include_pad), bool(channels_last)),)

    class QLinearConcat(OpRun):
        op_domain = DOMAIN

        def _run(self, y_s, y_z, *xs, axis=None):
            parts = []
            for i in range(0, len(xs), 3):
                x, s, z = xs[i:i + 3]
                t = qmath.lookup_table(qmath.identity, S(s), S(z), S(y_s), S(y_z), x.dtype, y_z.dtype)
                parts.append(qmath.apply_table(x, t))
            return (np.concatenate(parts, axis=int(axis)),)

    class QLinearSoftmax(OpRun):
        op_domain = DOMAIN

        def _run(self, x, x_s, x_z, y_s, y_z, axis=None, opset=None):
            default = -1 if int(opset) >= 13 else 1  # onnxruntime's default when the attribute is absent
            return (qmath.qlinear_softmax(x, S(x_s), S(y_s), S(y_z), default if axis is None else int(axis),
                                          int(opset)),)

    class QuantizeLinear(OpRun):
        op_domain = DOMAIN

        def _run(self, x, s, z=None, axis=None):
            dt = np.dtype(np.uint8) if z is None else z.dtype
            return (qmath.quantize(x, s, z, _axis_attr(axis), dt),)

    class DequantizeLinear(OpRun):
        op_domain = DOMAIN

        def _run(self, x, s, z=None, axis=None):
            return (qmath.dequantize(x, s, z, _axis_attr(axis)),)

    return (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
            QLinearAveragePool, QLinearConcat, QLinearSoftmax, QuantizeLinear, DequantizeLinear) + tuple(_gemm_ops(OpRun))


def _gemm_ops(OpRun: type) -> list:
    """Host references of the int8 GEMM contrib ops (exact int64 products)."""

    class QGemm(OpRun):
        op_domain = DOMAIN

        def _run(self, a, a_s, a_z, b, b_s, b_z, c=None, y_s=None, y_z=None, alpha=None, transA=None, transB=None):
            a = a.T if transA else a
            b = b.T if transB else b
            acc = qmath.int_matmul(a, a_z, b, b_z)
            if c is not None:
                acc = acc + c.astype(np.int64)
            scale = (np.float32(1.0 if alpha is None else alpha) * np.float32(S(a_s))
                     * np.asarray(b_s, np.float32).reshape(-1)).astype(np.float32)
            v = acc.astype(np.float32) * (scale if scale.size > 1 else scale[0])
            if y_s is None:
                return (v.astype(np.float32),)
            dt = np.dtype(np.uint8) if y_z is None else y_z.dtype
            return (qmath.saturate(v / np.float32(S(y_s)) + np.float32(S(y_z)), dt),)

    class MatMulIntegerToFloat(OpRun):
        op_domain = DOMAIN

        def _run(self, a, b, a_s, b_s, a_z=None, b_z=None, bias=None):
            acc = qmath.int_matmul(a, a_z, b, b_z)
            y = acc.astype(np.float32) * (np.asarray(a_s, np.float32) * np.asarray(b_s, np.float32))
            return ((y + bias if bias is not None else y).astype(np.asarray(a_s).dtype),)

    class DynamicQuantizeMatMul(OpRun):
        op_domain = DOMAIN

        def _run(self, a, b, b_s, b_z=None, bias=None):
            q, s, z = qmath.dynamic_quantize(a)
            acc = qmath.int_matmul(q, z, b, b_z)
            y = acc.astype(np.float32) * (np.float32(s) * np.asarray(b_s, np.float32))
            return ((y + bias if bias is not None else y).astype(np.float32),)

    class QLinearConv(OpRun):
        """com.microsoft QLinearConv: ai.onnx's (onnx.reference) on NCHW, transposed around it for
        channels_last."""

        op_domain = DOMAIN

        def _run(self, x, x_s, x_z, w, w_s, w_z, y_s, y_z, b=None, auto_pad=None, channels_last=None,
                 dilations=None, group=None, kernel_shape=None, pads=None, strides=None):
            if channels_last:
                x = np.moveaxis(x, -1, 1)
            attrs = {k: v for k, v in dict(auto_pad=auto_pad, dilations=dilations, group=group,
                                           kernel_shape=kernel_shape, pads=pads, strides=strides).items()
                     if v is not None}
            y = _onnx_qlinear_conv([x, x_s, x_z, w, w_s, w_z, y_s, y_z] + ([b] if b is not None else []), attrs)
            return (np.moveaxis(y, 1, -1) if channels_last else y,)

    return [QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul, QLinearConv]


def _onnx_qlinear_conv(arrays: list, attrs: dict) -> np.ndarray:
    """ai.onnx QLinearConv by onnx.reference on one-node model of these inputs."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" for k in range(len(arrays))]
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    inits = [numpy_helper.from_array(np.asarray(a), n) for a, n in zip(arrays, names)]
    g = helper.make_graph([node], "qconv", [], [helper.make_tensor_value_info("y", 0, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    return np.asarray(ReferenceEvaluator(model).run(None, {})[0])


def has_reference(op_type: str) -> bool:
    """Whether com.microsoft `op_type` has a host reference here."""
    return op_type in _NAMES


_NAMES = frozenset({"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearGlobalAveragePool",
                    "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QuantizeLinear", "DequantizeLinear",
                    "QGemm", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QLinearConv"})
