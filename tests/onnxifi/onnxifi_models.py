"""Small models for the ONNXIFI tests (ResNet-50 comes from clglow.models)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_convnet(seed: int = 0, weights_as_inputs: bool = False, opset: int = 13) -> tuple[onnx.ModelProto, dict]:
    """Conv-Relu-MaxPool-Conv-GlobalAveragePool-Flatten-Gemm-Softmax on 1x3x16x16 -> 1x10.

    With `weights_as_inputs` the weights are graph inputs without initializers (to be passed
    as ONNXIFI weight descriptors) and returned in the dict; else they are initializers.
    """
    rng = np.random.default_rng(seed)
    w = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
        "b2": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "wf": (rng.standard_normal((10, 16)) * 0.3).astype(np.float32),
        "bf": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1, name="softmax"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])]
    inits = []
    if weights_as_inputs:
        inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in w.items()]
    else:
        inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    graph = helper.make_graph(nodes, "small_convnet", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="clglow-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, (w if weights_as_inputs else {})


def reference(model: onnx.ModelProto, feeds: dict) -> list:
    """Outputs of onnx.reference (weights as feeds when they are graph inputs)."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)
