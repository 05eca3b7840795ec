"""3-D Conv and clglow FusedConv on OpenCL (lower/conv_nd.py, im2col_nd.cl + gemm.cl) vs
onnx.reference, and a small r3d-style video net vs onnxruntime with every Conv on OpenCL."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check
    from .run_launches import device_info, lower_ctx, reference
except ImportError:
    from harness import check  # type: ignore
    from run_launches import device_info, lower_ctx, reference  # type: ignore

from clglow.ir import Graph, Node, Value
from clglow.lower import conv as conv_mod
from clglow.lower.base import lookup
from clglow.target import Target

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = [  # (x shape, w shape, attrs)
    ((1, 3, 5, 6, 7), (4, 3, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),
    ((2, 3, 7, 9, 8), (5, 3, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1], strides=[2, 2, 2])),   # batch 2, stride 2
    ((1, 3, 5, 15, 13), (6, 3, 3, 7, 7), dict(pads=[1, 3, 3, 1, 3, 3], strides=[1, 2, 2])),  # r3d stem shape
    ((1, 4, 6, 7, 5), (3, 4, 2, 3, 2), dict(pads=[0, 1, 2, 1, 0, 1])),                       # asymmetric pads
    ((1, 2, 7, 8, 9), (3, 2, 3, 3, 3), dict(dilations=[2, 1, 2], pads=[2, 1, 2, 2, 1, 2])),  # dilations
    ((2, 6, 4, 5, 6), (4, 3, 3, 3, 3), dict(group=2, pads=[1, 1, 1, 1, 1, 1])),             # groups 2
    ((1, 4, 5, 6, 7), (4, 1, 3, 3, 3), dict(group=4, pads=[1, 1, 1, 1, 1, 1])),             # depthwise
    ((1, 5, 5, 7, 6), (7, 5, 1, 1, 1), {}),                                                 # 1x1x1
    ((1, 3, 6, 7, 9), (4, 3, 3, 2, 3), dict(auto_pad="SAME_UPPER", strides=[2, 1, 2])),
    ((1, 3, 6, 7, 9), (4, 3, 2, 3, 2), dict(auto_pad="SAME_LOWER")),
    ((1, 3, 6, 7, 9), (4, 3, 3, 3, 3), dict(auto_pad="VALID", strides=[1, 3, 2])),
    ((1, 2, 3, 5, 70), (40, 2, 1, 3, 3), dict(pads=[0, 1, 1, 0, 1, 1])),                    # many panels
    ((1, 3, 4, 9, 71), (5, 3, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 2])),  # wide rows, stride 2
    ((1, 2, 3, 4, 40), (3, 2, 3, 3, 5), dict(pads=[1, 0, 4, 1, 2, 0], strides=[1, 1, 3])),  # pads past a tap row
    ((2, 3, 4, 6, 40), (4, 3, 3, 3, 3), dict(pads=[1, 0, 2, 0, 1, 0])),                     # implicit, left pad 2
    ((1, 3, 5, 6, 41), (4, 3, 2, 3, 3), dict(pads=[0, 1, 0, 1, 2, 3], strides=[2, 1, 1])),  # implicit, right pad 3
    ((1, 3, 6, 5, 44), (4, 3, 3, 3, 3), dict(pads=[2, 2, 2, 2, 2, 2], dilations=[2, 2, 2])),  # implicit, dilated
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_conv3d(x_shape, w_shape, attrs, bias):
    x, w = rand(*x_shape), rand(*w_shape)
    inputs = ["x", "w"] + (["b"] if bias else [])
    consts = {"w": w, **({"b": rand(w_shape[0])} if bias else {})}
    check(helper.make_node("Conv", inputs, ["y"], **attrs), {"x": x}, consts)


def test_conv3d_live_weights():
    """Weights fed at run time: read in place as the GEMM's A (not packed)."""
    x, w = rand(1, 3, 4, 6, 5), rand(5, 3, 3, 3, 3)
    check(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 6), {"x": x, "w": w}, {})


@pytest.mark.parametrize("act,alpha,beta", [("Relu", 0.0, 0.0), ("Clip", 0.0, 6.0), ("Sigmoid", 0.0, 0.0)])
def test_fused_conv3d_residual(act, alpha, beta):
    """FusedConv: bias, residual and activation in the GEMM epilogue (oracle: onnx.reference's
    Conv, then numpy)."""
    x, w, b = rand(2, 4, 5, 6, 7), rand(6, 4, 3, 3, 3), rand(6)
    attrs = dict(pads=[1] * 6)
    y = reference(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs), {"x": x}, {"w": w, "b": b}, 17)[0]
    z = rand(*y.shape)
    y = y + z
    exp = {"Relu": lambda v: np.maximum(v, 0), "Clip": lambda v: np.clip(v, alpha, beta),
           "Sigmoid": lambda v: 1 / (1 + np.exp(-v))}[act](y).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", activation=act,
                            alpha=alpha, beta=beta, **attrs)
    check(node, {"x": x, "z": z}, {"w": w, "b": b}, expected=[exp])


@pytest.mark.parametrize("strides,family,path", [
    ([1, 1, 1], "cpu", "implicit nd"), ([2, 1, 1], "cpu", "implicit nd"), ([1, 2, 2], "cpu", "im2col nd"),
    ([1, 1, 1], "gpu", "im2col nd")])
def test_conv3d_path_choice(strides, family, path):
    """Stride 1 along H and W: the implicit path under the CPU family (as 2-D), else im2col_nd."""
    x, w = rand(1, 8, 6, 28, 28), rand(8, 8, 3, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 6, strides=strides)
    y_shape = reference(node, {"x": x}, {"w": w}, 17)[0].shape
    _, lctx = lower_ctx(node, {"x": x}, {"w": w}, {"y": (y_shape, np.float32)}, 17, Target(family=family))
    assert conv_mod.choose_path(conv_mod.conv_case(lctx)).name == path


@pytest.mark.parametrize("x_shape,strides,first", [((1, 16, 8, 80, 80), [1, 2, 2], "im2col_nd"),
                                                    ((3, 16, 8, 40, 40), [1, 1, 1], "pad_nd")])
def test_conv3d_pieces(x_shape, strides, first):
    """A conv whose panels (im2col) or padded volumes (implicit) exceed the scratch cap runs as
    several producer + gemm pairs, pieces of im2col panels starting and ending inside output rows."""
    x, w = rand(*x_shape), rand(8, 16, 3, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 6, strides=strides)
    y_shape = reference(node, {"x": x}, {"w": w}, 17)[0].shape
    op, lctx = lower_ctx(node, {"x": x}, {"w": w}, {"y": (y_shape, np.float32)}, 17, Target(family="cpu"))
    kernels = [ln.kernel for ln in op.lower(lctx)]
    assert len(kernels) >= 4 and kernels[::2] == [first] * (len(kernels) // 2), kernels
    assert kernels[1::2] == ["gemm"] * (len(kernels) // 2), kernels
    check(node, {"x": x}, {"w": w})


def test_supports_3d_not_4d():
    values = {"x": Value("x", np.dtype(np.float32), (1, 2, 4, 4, 4)),
              "w": Value("w", np.dtype(np.float32), (3, 2, 3, 3, 3)), "y": Value("y", np.dtype(np.float32))}
    node = Node("Conv", "c", ["x", "w"], ["y"])
    graph = Graph([node], values, ["x", "w"], ["y"], {"": 17})
    assert lookup(node).supports(node, graph, device_info()) is None
    values["x"] = Value("x", np.dtype(np.float32), (1, 2, 4, 4, 4, 4))
    values["w"] = Value("w", np.dtype(np.float32), (3, 2, 3, 3, 3, 3))
    assert "4-D convolution" in lookup(node).supports(node, Graph([node], values, ["x", "w"], ["y"], {"": 17}),
                                                      device_info())


# --- a small r3d-style video net vs onnxruntime ------------------------------------------------------
def r3d_model(n: int = 1, c: int = 16, t: int = 8, hw: int = 32, classes: int = 10) -> onnx.ModelProto:
    """Conv3d stem 3x7x7 / 1x2x2, BatchNorm, Relu, two 3x3x3 convs with a residual, global
    average pool, Gemm (the structure of torchvision's r3d_18 first block)."""
    inits = []

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def bn(prefix: str, ch: int, x: str, y: str) -> onnx.NodeProto:
        return helper.make_node("BatchNormalization", [x, init(prefix + "s", 1 + 0.1 * rand(ch)),
                                                       init(prefix + "b", 0.1 * rand(ch)),
                                                       init(prefix + "m", 0.1 * rand(ch)),
                                                       init(prefix + "v", 1 + 0.1 * np.abs(rand(ch)))], [y])

    nodes = [
        helper.make_node("Conv", ["x", init("w0", 0.1 * rand(c, 3, 3, 7, 7))], ["c0"], strides=[1, 2, 2],
                         pads=[1, 3, 3, 1, 3, 3]),
        bn("bn0", c, "c0", "b0"), helper.make_node("Relu", ["b0"], ["r0"]),
        helper.make_node("Conv", ["r0", init("w1", 0.1 * rand(c, c, 3, 3, 3))], ["c1"], pads=[1] * 6),
        bn("bn1", c, "c1", "b1"), helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("Conv", ["r1", init("w2", 0.1 * rand(c, c, 3, 3, 3))], ["c2"], pads=[1] * 6),
        bn("bn2", c, "c2", "b2"), helper.make_node("Add", ["b2", "r0"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", init("fw", 0.1 * rand(classes, c)), init("fb", rand(classes))], ["y"],
                         transB=1),
    ]
    graph = helper.make_graph(nodes, "r3d_small",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, t, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_r3d_style_net_vs_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    import clglow

    model = r3d_model(n=2)
    x = rand(2, 3, 8, 32, 32)
    exp = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = clglow.InferenceSession(model.SerializeToString())
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, exp, rtol=1e-3, atol=1e-3 * float(np.abs(exp).max()))
    conv_lines = [ln.split() for ln in sess.explain().splitlines() if "Conv" in ln]
    assert len(conv_lines) == 3 and all(ln[0] == "opencl" for ln in conv_lines), sess.explain()
