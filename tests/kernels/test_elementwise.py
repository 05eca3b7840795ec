"""Elementwise kernels vs onnx.reference: every broadcasting shape class, dtypes, variadic ops."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import lower  # noqa: E402
    from .run_launches import check  # noqa: E402
except ImportError:
    from harness import lower  # type: ignore  # noqa: E402
    from run_launches import check  # type: ignore  # noqa: E402

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32, lo=-3.0, hi=3.0):
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


BCAST = [
    ((2, 3, 5, 7), (2, 3, 5, 7)),     # equal: flat path
    ((2, 3, 5, 7), ()),               # scalar
    ((2, 3, 5, 7), (1, 3, 1, 1)),     # per-channel bias
    ((3, 1, 7), (5, 1)),              # both sides broadcast, rank differs
    ((1,), (4, 3)),
    ((2, 1, 3, 1, 5, 1), (1, 4, 1, 2, 1, 3)),  # 6-D alternating
    ((7, 1), (1, 11)),                # outer product
    ((0, 3), (1, 3)),                 # empty
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("shapes", BCAST, ids=str)
def test_binary_broadcast(op, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1], lo=0.5, hi=2.0)
    check(helper.make_node(op, ["a", "b"], ["c"]), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_int(op, dtype):
    a, b = rand(3, 4, 5, dtype=dtype, lo=-20, hi=20), rand(4, 1, dtype=dtype, lo=1, hi=5)
    check(helper.make_node(op, ["a", "b"], ["c"]), {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare(op, dtype):
    a, b = rand(3, 4, 5, dtype=dtype, lo=-2, hi=2), rand(4, 1, dtype=dtype, lo=-2, hi=2)
    if dtype == np.float32:
        a, b = np.round(a), np.round(b)
    check(helper.make_node(op, ["a", "b"], ["c"]), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op):
    check(helper.make_node(op, ["a", "b"], ["c"]), {"a": rand(3, 5, dtype=np.bool_), "b": rand(5, dtype=np.bool_)})
    check(helper.make_node("Not", ["a"], ["c"]), {"a": rand(3, 5, dtype=np.bool_)})


def test_equal_bool():
    check(helper.make_node("Equal", ["a", "b"], ["c"]), {"a": rand(3, 5, dtype=np.bool_), "b": rand(5, dtype=np.bool_)})


@pytest.mark.parametrize("op,n", [("Sum", 1), ("Sum", 3), ("Max", 3), ("Min", 2), ("Mean", 4), ("Mean", 1)])
def test_variadic(op, n):
    shapes = [(2, 3, 4), (3, 1), (1, 4), (2, 1, 1)][:n]
    feeds = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    check(helper.make_node(op, list(feeds), ["y"]), feeds)


def test_variadic_small_first():
    # the first two inputs broadcast to less than the output shape
    feeds = {"x0": rand(3, 1), "x1": rand(1, 1), "x2": rand(2, 3, 4)}
    check(helper.make_node("Sum", list(feeds), ["y"]), feeds)


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos", "Sign",
         "Softsign", "HardSwish", "Softplus"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    x = rand(3, 7, 11, lo=-5, hi=5)
    x[0, 0, :4] = [0.5, 1.5, -2.5, 0.0]
    check(helper.make_node(op, ["x"], ["y"]), {"x": x}, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op):
    check(helper.make_node(op, ["x"], ["y"]), {"x": rand(5, 13, lo=0.1, hi=9)})


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Elu", {"alpha": 0.7}),
                                      ("Selu", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})])
def test_unary_attrs(op, attrs):
    check(helper.make_node(op, ["x"], ["y"], **attrs), {"x": rand(4, 9, lo=-4, hi=4)}, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["Relu", "Neg", "Abs", "Sign"])
def test_unary_int(op, dtype):
    check(helper.make_node(op, ["x"], ["y"]), {"x": rand(4, 9, dtype=dtype, lo=-9, hi=9)})


def test_pow():
    check(helper.make_node("Pow", ["a", "b"], ["c"]), {"a": rand(3, 4, lo=0.1, hi=3), "b": rand(4, lo=-2, hi=2)},
          rtol=1e-5)
    check(helper.make_node("Pow", ["a", "b"], ["c"]), {"a": rand(3, 4)}, {"b": np.array(2, np.int64)})
    check(helper.make_node("Pow", ["a", "b"], ["c"]), {"a": rand(3, 4), "b": np.array([3.0], np.float32)})


def test_prelu():
    check(helper.make_node("PRelu", ["x", "s"], ["y"]), {"x": rand(2, 3, 4, 5)}, {"s": rand(3, 1, 1)})


def test_where():
    c = rand(3, 1, 5, dtype=np.bool_)
    check(helper.make_node("Where", ["c", "x", "y"], ["z"]), {"c": c, "x": rand(4, 1), "y": rand(1, 1, 5)})
    check(helper.make_node("Where", ["c", "x", "y"], ["z"]),
          {"c": c, "x": rand(3, 4, 5, dtype=np.int64, lo=-9, hi=9), "y": rand(3, 4, 5, dtype=np.int64)})


@pytest.mark.parametrize("kind", ["attrs", "const", "runtime", "min_only_runtime", "max_only_const", "none"])
def test_clip(kind):
    x = rand(3, 4, 5)
    lo, hi = np.array(-1.0, np.float32), np.array(1.5, np.float32)
    if kind == "attrs":
        check(helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=1.5), {"x": x}, opset=6)
    elif kind == "const":
        check(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x}, {"lo": lo, "hi": hi}, opset=13)
    elif kind == "runtime":
        check(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x, "lo": lo, "hi": hi}, opset=13)
    elif kind == "min_only_runtime":
        check(helper.make_node("Clip", ["x", "lo"], ["y"]), {"x": x, "lo": lo}, opset=12)
    elif kind == "max_only_const":
        check(helper.make_node("Clip", ["x", "", "hi"], ["y"]), {"x": x}, {"hi": hi}, opset=11)
    else:
        check(helper.make_node("Clip", ["x"], ["y"]), {"x": x}, opset=13)


def test_clip_int():
    x = rand(3, 4, 5, dtype=np.int64, lo=-50, hi=50)
    check(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x},
          {"lo": np.array(-7, np.int64), "hi": np.array(9, np.int64)}, opset=13)
    check(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]),
          {"x": x.astype(np.int32), "lo": np.array(-7, np.int32), "hi": np.array(9, np.int32)}, opset=13)


CASTS = [np.float32, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("src", CASTS)
@pytest.mark.parametrize("dst", CASTS)
def test_cast(src, dst):
    x = rand(5, 7, lo=-100, hi=100)
    x[0, :3] = [0.0, -0.7, 2.9]
    x = x.astype(src)
    check(helper.make_node("Cast", ["x"], ["y"], to=helper.np_dtype_to_tensor_dtype(np.dtype(dst))), {"x": x})


@pytest.mark.parametrize("e,kernel", [(2.0, "fused_flat"), (3.0, "fused_flat"), (-1.0, "fused_flat"),
                                      (2.5, "binary_bcast")])
def test_pow_constant_exponent(e, kernel):
    """Pow by a constant 2, 3 or -1 runs as products on vectors; other exponents call pow."""
    x = np.random.default_rng(5).uniform(-3, 3, (7, 45)).astype(np.float32)
    if e == 2.5:
        x = np.abs(x)
    node = helper.make_node("Pow", ["x", "e"], ["y"])
    consts = {"e": np.array(e, np.float32)}
    names = [l.kernel for l in lower(node, {"x": x}, consts, {"y": (x.shape, np.float32)})]
    assert names == [kernel], names
    check(node, {"x": x}, consts)
