"""Test cases for ONNX's ONNXIFI test driver, in the layout it reads.

<root>/<case>/model.onnx and <root>/<case>/test_data_set_0/{input,output}_N.pb, with IR
version 8, opset <= 17, every tensor named after its graph input/output and stored as
raw_data (the driver hands raw_data pointers to onnxSetGraphIO). Expected outputs come
from onnxruntime.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def _model(name: str, nodes: list, inputs: dict, outputs: dict, inits: dict | None = None,
           opset: int = OPSET) -> onnx.ModelProto:
    vi = lambda n, a: helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))  # noqa: E731
    g = helper.make_graph(nodes, name, [vi(n, a) for n, a in inputs.items()],
                          [vi(n, a) for n, a in outputs.items()],
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="clglow-onnxifi-tests")
    m.ir_version = IR_VERSION
    return m


def expected_outputs(model: onnx.ModelProto, inputs: dict) -> list:
    """onnxruntime's outputs (onnx.reference when it is missing: its BatchNormalization disagrees)."""
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, inputs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def _case(name: str, nodes: list, inputs: dict, inits: dict | None = None,
          output_names: tuple = ("y",), opset: int = OPSET) -> tuple[str, onnx.ModelProto, dict, dict]:
    probe = _model(name, nodes, inputs, {}, inits, opset)
    probe.graph.output.extend([helper.make_empty_tensor_value_info(n) for n in output_names])
    outs = expected_outputs(probe, inputs)
    outputs = {n: np.asarray(o) for n, o in zip(output_names, outs)}
    model = _model(name, nodes, inputs, outputs, inits, opset)
    onnx.checker.check_model(model)
    return name, model, inputs, outputs


def node_cases(seed: int = 0) -> list:
    """(name, model, inputs, outputs) for operators clglow runs on OpenCL."""
    rng = np.random.default_rng(seed)
    N = helper.make_node
    x = _rand(rng, 2, 3, 4, 5)
    cases = [
        _case("clglow_relu", [N("Relu", ["x"], ["y"])], {"x": x}),
        _case("clglow_sigmoid", [N("Sigmoid", ["x"], ["y"])], {"x": x}),
        _case("clglow_tanh", [N("Tanh", ["x"], ["y"])], {"x": x}),
        _case("clglow_abs", [N("Abs", ["x"], ["y"])], {"x": x}),
        _case("clglow_add_broadcast", [N("Add", ["x", "b"], ["y"])], {"x": x, "b": _rand(rng, 4, 5)}),
        _case("clglow_mul", [N("Mul", ["x", "b"], ["y"])], {"x": x, "b": _rand(rng, 2, 3, 4, 5)}),
        _case("clglow_sub", [N("Sub", ["x", "b"], ["y"])], {"x": x, "b": _rand(rng, 1, 3, 1, 1)}),
        _case("clglow_conv", [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
              {"x": _rand(rng, 1, 3, 8, 8)}, {"w": _rand(rng, 4, 3, 3, 3) * 0.3, "b": _rand(rng, 4)}),
        _case("clglow_conv_strided", [N("Conv", ["x", "w"], ["y"], strides=[2, 2])],
              {"x": _rand(rng, 1, 4, 9, 9)}, {"w": _rand(rng, 8, 4, 3, 3) * 0.3}),
        _case("clglow_maxpool", [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
              {"x": _rand(rng, 1, 3, 8, 8)}),
        _case("clglow_averagepool", [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
              {"x": _rand(rng, 1, 3, 8, 8)}),
        _case("clglow_globalaveragepool", [N("GlobalAveragePool", ["x"], ["y"])], {"x": _rand(rng, 1, 8, 7, 7)}),
        _case("clglow_gemm", [N("Gemm", ["a", "w", "c"], ["y"], transB=1)],
              {"a": _rand(rng, 3, 16)}, {"w": _rand(rng, 10, 16) * 0.3, "c": _rand(rng, 10)}),
        _case("clglow_matmul", [N("MatMul", ["a", "b"], ["y"])], {"a": _rand(rng, 4, 8), "b": _rand(rng, 8, 6)}),
        _case("clglow_softmax", [N("Softmax", ["x"], ["y"], axis=1)], {"x": _rand(rng, 4, 10)}),
        _case("clglow_transpose", [N("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], {"x": x}),
        _case("clglow_concat", [N("Concat", ["a", "b"], ["y"], axis=1)],
              {"a": _rand(rng, 2, 3, 4), "b": _rand(rng, 2, 5, 4)}),
        _case("clglow_flatten", [N("Flatten", ["x"], ["y"], axis=1)], {"x": x}),
        _case("clglow_batchnorm", [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
              {"x": _rand(rng, 1, 3, 4, 4)},
              {"s": _rand(rng, 3), "b": _rand(rng, 3), "m": _rand(rng, 3) * 0.1,
               "v": np.abs(_rand(rng, 3)) + 0.5}),
    ]
    return cases


def _raw(name: str, arr: np.ndarray) -> onnx.TensorProto:
    t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
    assert t.HasField("raw_data") or arr.size == 0
    return t


def write_case(root: Path, name: str, model: onnx.ModelProto, inputs: dict, outputs: dict) -> Path:
    folder = root / name
    data = folder / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    for i, (n, a) in enumerate(inputs.items()):
        (data / f"input_{i}.pb").write_bytes(_raw(n, a).SerializeToString())
    for i, (n, a) in enumerate(outputs.items()):
        (data / f"output_{i}.pb").write_bytes(_raw(n, a).SerializeToString())
    return folder


def write_all(root: Path, cases: list) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    for name, model, inputs, outputs in cases:
        write_case(root, name, model, inputs, outputs)
    return [c[0] for c in cases]
