"""lower/common.py and the Conv implementation table without OpenCL: auto_pad resolution against
onnx.reference, the int32 size check, the dtype check, storage types against numpy, work-group
fitting, ConvGeometry, and which Conv path each Target family takes."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from clglow.config import PlanOptions
from clglow.errors import InvalidModel
from clglow.ir import Graph, Node, Value
from clglow.lower import common
from clglow.lower.base import LowerCtx, TensorInfo
from clglow.lower.common import ConvGeometry, Epilogue
from clglow.lower.conv import ConvCase, choose_path
from clglow.target import Target

CPU = Target(family="cpu", preferred_vector_width_float=16)  # 12 x 32 default tiles
GPU = Target(family="gpu", local_mem_type="global", local_mem_size=1 << 21)  # local memory emulated (pocl)
GPU_LOCAL = Target(family="gpu", local_mem_type="local", local_mem_size=65536)  # dedicated (a GPU): xgemm.cl
TARGETS = {"cpu": CPU, "gpu": GPU, "gpu-local": GPU_LOCAL}


def _run_conv(x, w, **attrs):
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                        helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(m).run(None, {"x": x, "w": w})[0]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("size,k,s,d", [(10, 3, 1, 1), (11, 4, 2, 1), (9, 3, 2, 2), (7, 2, 3, 1)])
def test_same_pads_match_onnx_reference(auto_pad, size, k, s, d):
    """The explicit pads resolve_pads gives for SAME_* compute what onnx.reference computes with
    auto_pad itself (and the output is ceil(in / stride))."""
    rng = np.random.default_rng(size * 7 + k)
    x = rng.standard_normal((1, 2, size, size + 1)).astype(np.float32)
    w = rng.standard_normal((3, 2, k, k)).astype(np.float32)
    in_sp = x.shape[2:]
    out_sp = tuple(-(-v // s) for v in in_sp)
    begin, end = common.resolve_pads(auto_pad, None, in_sp, out_sp, (k, k), (s, s), (d, d))
    want = _run_conv(x, w, auto_pad=auto_pad, strides=[s, s], dilations=[d, d])
    got = _run_conv(x, w, pads=list(begin) + list(end), strides=[s, s], dilations=[d, d])
    assert want.shape[2:] == out_sp
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_resolve_pads_valid_and_notset():
    assert common.resolve_pads("VALID", [1, 2, 3, 4], (9, 9), (7, 7), (3, 3), (1, 1), (1, 1)) == ((0, 0), (0, 0))
    assert common.resolve_pads("NOTSET", [1, 2, 3, 4], (9, 9), (0, 0), (3, 3), (1, 1), (1, 1)) == ((1, 2), (3, 4))
    assert common.resolve_pads("NOTSET", None, (9,), (0,), (3,), (1,), (1,)) == ((0,), (0,))
    with pytest.raises(ValueError):
        common.resolve_pads("NOTSET", [1, 2, 3], (9, 9), (0, 0), (3, 3), (1, 1), (1, 1))
    assert common.split_pad(5, "SAME_UPPER") == (2, 3) and common.split_pad(5, "SAME_LOWER") == (3, 2)
    assert common.split_pad(-1, "SAME_UPPER") == (0, 0)


def _ctx(in_shapes, out_shapes, target=GPU) -> LowerCtx:
    names = [f"i{k}" for k in range(len(in_shapes))]
    outs = [f"o{k}" for k in range(len(out_shapes))]
    node = Node("Relu", "n", names, outs)
    graph = Graph([node], {}, names, outs, {"": 17})
    f32 = np.dtype(np.float32)
    return LowerCtx(node, graph, [TensorInfo(n, f32, s) for n, s in zip(names, in_shapes)],
                    [TensorInfo(n, f32, s) for n, s in zip(outs, out_shapes)], target, PlanOptions())


def test_int32_size_check():
    common.check_int32_sizes(_ctx([(2 ** 31 - 1,)], [(2 ** 31 - 1,)]))
    with pytest.raises(InvalidModel, match="int32"):
        common.check_int32_sizes(_ctx([(1,)], [(2, 2 ** 30)]))
    with pytest.raises(InvalidModel, match="'i1'"):
        common.check_int32_sizes(_ctx([(3,), (2 ** 16, 2 ** 15)], [(3,)]))


def test_dtype_check():
    f32, f64, i64 = (np.dtype(t) for t in (np.float32, np.float64, np.int64))
    values = {"a": Value("a", f32, (2,)), "b": Value("b", i64, (2,)), "y": Value("y", f64, (2,)),
              "u": Value("u", None, None)}
    node = Node("Add", "n", ["a", "b", "", "u"], ["y"])
    g = Graph([node], values, ["a", "b"], ["y"], {"": 17})
    assert common.check_dtypes(node, g, {f32}, inputs=[0]) is None
    assert "'b'" in common.check_dtypes(node, g, {f32})
    assert common.check_dtypes(node, g, {f32, i64}) is None  # absent and unknown inputs pass
    assert "'y'" in common.check_dtypes(node, g, {f32, i64}, outputs=True)
    assert "'b'" in common.float32_only(node, g)
    assert common.floats(Target(has_fp64=True)) == {f32, f64} and common.floats(Target()) == {f32}
    assert common.numeric(Target()) == {f32} | common.INTS


@pytest.mark.parametrize("dt", [np.bool_, np.int8, np.uint16, np.float16, np.float32, np.int64, np.float64])
def test_storage_types(dt):
    dt = np.dtype(dt)
    assert common.STORAGE_NP[dt.itemsize]().itemsize == dt.itemsize
    assert common.storage_type(dt) == {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}[dt.itemsize]
    value = np.array([-1.5 if dt.kind == "f" else 1])
    bits = common.fill_bits(value, dt)
    want = np.ascontiguousarray(value.astype(dt)).view(common.STORAGE_NP[dt.itemsize])[0]
    assert int(bits) == int(want)


def test_fit_group_and_grid():
    small = Target(max_work_group_size=16, max_work_item_sizes=(8, 8, 4))
    assert small.fit_group((1, 64, 1)) == (1, 8, 1)
    assert small.fit_group((16, 16, 1)) == (4, 4, 1)
    assert small.fit_group((1, 1, 8)) == (1, 1, 4)
    big = Target(max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096))
    for shape in [(1, 64, 1), (8, 1), (1, 8, 1), (16, 1, 1), (1, 32), (16, 2)]:
        assert big.fit_group(shape) == shape  # the measured shapes stay where the device allows them
        for t in (small, big):
            ls = t.fit_group(shape)
            assert np.prod(ls) <= t.max_work_group_size
            assert all(a <= b for a, b in zip(ls, t.max_work_item_sizes))
    gsize, ls = common.grid(big, (37, 5, 3), (1, 8, 1))
    assert ls == (1, 8, 1) and gsize == (37, 8, 3)
    gsize, ls = common.grid(small, (100,), (64,))
    assert ls == (8,) and gsize == (104,)


def test_conv_geometry():
    g = ConvGeometry(56, 56, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1, n_img=2, cin=64, cout=128, groups=2)
    assert (g.cin_g, g.m, g.kk, g.npix, g.hw) == (32, 64, 32 * 9, 28 * 28, 56 * 56)
    assert not g.pointwise and not g.depthwise
    assert ConvGeometry(7, 7, 7, 7, 1, 1).pointwise
    assert ConvGeometry(7, 7, 7, 7, 3, 3, ph=1, pw=1, cin=8, cout=8, groups=8).depthwise


def _case(target, spatial, cin, cout, groups=1, winograd=True, const=True) -> ConvCase:
    geom = ConvGeometry(*spatial, n_img=1, cin=cin, cout=cout, groups=groups)
    return ConvCase(target, PlanOptions(winograd=winograd), geom, Epilogue(has_bias=True), const)


# ResNet-50-like layers: (spatial geometry, Cin, Cout, groups)
LAYERS = {
    "stem 7x7/2": ((224, 224, 112, 112, 7, 7, 2, 2, 3, 3, 1, 1), 3, 64, 1),
    "3x3 at 56": ((56, 56, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1), 64, 64, 1),
    "3x3 at 14": ((14, 14, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1), 256, 256, 1),
    "1x1 at 56": ((56, 56, 56, 56, 1, 1, 1, 1, 0, 0, 1, 1), 64, 256, 1),
    "1x1 at 7": ((7, 7, 7, 7, 1, 1, 1, 1, 0, 0, 1, 1), 512, 2048, 1),
    "depthwise": ((28, 28, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1), 32, 32, 32),
}
CHOICES = {  # family -> the path of each layer
    "cpu": {"stem 7x7/2": "implicit", "3x3 at 56": "winograd", "3x3 at 14": "transposed", "1x1 at 56": "pointwise",
            "1x1 at 7": "transposed", "depthwise": "depthwise"},
    "gpu": {"stem 7x7/2": "im2col", "3x3 at 56": "im2col", "3x3 at 14": "im2col", "1x1 at 56": "pointwise",
            "1x1 at 7": "pointwise", "depthwise": "depthwise"},
    # every GEMM path on the local-memory tiles (KxK convs as the implicit GEMM, no im2col
    # buffer); depthwise on its halo tiles
    "gpu-local": {"stem 7x7/2": "xgemm implicit", "3x3 at 56": "xgemm implicit", "3x3 at 14": "xgemm implicit",
                  "1x1 at 56": "xgemm pointwise", "1x1 at 7": "xgemm pointwise", "depthwise": "gpu depthwise"},
}


@pytest.mark.parametrize("family,layer", list(itertools.product(CHOICES, LAYERS)))
def test_conv_path_per_family(family, layer):
    spatial, cin, cout, groups = LAYERS[layer]
    case = _case(TARGETS[family], spatial, cin, cout, groups)
    assert choose_path(case).name == CHOICES[family][layer]


def test_conv_path_options_and_live_weights():
    spatial, cin, cout, _ = LAYERS["3x3 at 56"]
    assert choose_path(_case(CPU, spatial, cin, cout, winograd=False)).name == "implicit"
    assert choose_path(_case(CPU, spatial, cin, cout, const=False)).name == "implicit"  # Winograd packs U once
    spatial, cin, cout, _ = LAYERS["3x3 at 14"]
    assert choose_path(_case(CPU, spatial, cin, cout, const=False)).name == "implicit"  # no transposed W^T
