"""Helpers for the 9 "light" models shipped in onnx/backend/test/data/light/.

Layout (onnx 1.23): ``light_<name>.onnx`` plus ``light_<name>_output_0.pb`` (a TensorProto);
there is no input file: onnx's backend runner feeds every non-initializer float input with
``arange(n).reshape(shape) / n`` (``generate_dummy_data(random=False)``), which
``light_inputs`` reproduces. The models are opset 9, IR version 3 (initializers are also listed
as graph inputs). Their weights come from ``ConstantOfShape(value=0.02)`` nodes (shapes in
``*__SHAPE`` int64 initializers), so the shipped outputs are almost constant (softmax of
equal logits = 0.001). ``randomize_weights`` swaps in seeded random weights of realistic
scale (He-init convs/FCs, BatchNorm statistics measured on the input, classifier rescaled),
giving a model on which comparing clglow with onnxruntime is meaningful.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from clglow.models.calibrate import calibrate_batchnorm, scale_logits

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_names() -> list[str]:
    """Names without the ``light_`` prefix, e.g. ``["bvlc_alexnet", "densenet121", ...]``."""
    if not os.path.isdir(LIGHT_DIR):
        return []
    return sorted(
        f[len("light_"):-len(".onnx")]
        for f in os.listdir(LIGHT_DIR)
        if f.startswith("light_") and f.endswith(".onnx")
    )


def light_model_path(name: str) -> str:
    """Path of ``light_<name>.onnx``."""
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


def light_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs onnx's backend runner feeds: ``arange(n).reshape(shape) / n`` in float32."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@dataclass
class LightModel:
    """A light model with the runner's inputs and the shipped expected outputs."""

    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    rtol: float = 1e-3
    atol: float = 1e-7


def load_light_model(name: str) -> LightModel:
    """Load ``light_<name>`` with its inputs and shipped outputs (``*_output_<i>.pb``)."""
    path = light_model_path(name)
    model = onnx.load(path)
    outputs = {}
    prefix = os.path.splitext(path)[0]
    for i, vi in enumerate(model.graph.output):
        out_path = f"{prefix}_output_{i}.pb"
        if os.path.exists(out_path):
            outputs[vi.name] = numpy_helper.to_array(onnx.load_tensor(out_path))
    return LightModel(name, model, light_inputs(model), outputs)


def ort_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> list[np.ndarray]:
    """Run with onnxruntime's CPU provider (the oracle)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(outputs, dict(feeds))


def _roles(model: onnx.ModelProto) -> dict[str, tuple[str, int, onnx.NodeProto]]:
    """weight name -> (consumer op, input index, consumer), following Reshape/Unsqueeze/Identity."""
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in model.graph.node:
        for k, i in enumerate(n.input):
            consumers.setdefault(i, []).append((n, k))
    roles = {}

    def resolve(name: str, depth: int = 0) -> tuple[str, int, onnx.NodeProto] | None:
        for node, k in consumers.get(name, []):
            if node.op_type in ("Reshape", "Unsqueeze", "Identity", "Squeeze") and k == 0 and depth < 4:
                r = resolve(node.output[0], depth + 1)
                if r is not None:
                    return r
            else:
                return node.op_type, k, node
        return None

    for name in list(consumers):
        r = resolve(name)
        if r is not None:
            roles[name] = r
    return roles


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(helper.get_attribute_value(a))
    return default


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


def _random_weight(
    rng: np.random.Generator, shape: tuple[int, ...], role: tuple[str, int, onnx.NodeProto] | None
) -> np.ndarray | None:
    """Seeded random values of realistic scale for a weight with the given consumer role."""
    op, k, node = role if role is not None else ("", -1, None)
    if op == "Conv" and k == 1:
        fan_in = int(np.prod(shape[1:]))
        return _normal(rng, shape, np.sqrt(2.0 / fan_in))
    if op == "Gemm" and k == 1 and node is not None:
        size = int(np.prod(shape))
        if len(shape) != 2:  # reshaped later (inception_v1): fan_in = size / out features
            out_f = max(shape[0], 1)
            return _normal(rng, shape, np.sqrt(2.0 * out_f / size))
        fan_in = shape[1] if _attr(node, "transB", 0) else shape[0]
        return _normal(rng, shape, np.sqrt(2.0 / fan_in))
    if (op == "Conv" and k == 2) or (op == "Gemm" and k == 2):
        return _normal(rng, shape, 0.05)
    if op == "BatchNormalization":
        if k == 1:
            return rng.uniform(0.8, 1.2, shape)
        if k in (2, 3):
            return _normal(rng, shape, 0.1)
        if k == 4:
            return rng.uniform(0.5, 1.5, shape)
    if op == "Mul":
        return rng.uniform(0.8, 1.2, shape)
    if op in ("Add", "Sum", "Sub"):
        return _normal(rng, shape, 0.1)
    return None


def randomize_weights(
    model: onnx.ModelProto,
    seed: int = 0,
    feeds: Mapping[str, np.ndarray] | None = None,
    calibrate: bool = True,
) -> onnx.ModelProto:
    """Replace ConstantOfShape-produced weights and float initializers with seeded random ones.

    Each ``ConstantOfShape`` whose shape input is an initializer becomes a float32 initializer
    of that shape (the node, and its shape initializer when no longer used, are removed); float
    initializers consumed as weights are redrawn likewise. For IR < 4 the new initializers are
    also declared as graph inputs, like the original ones. With ``calibrate``, BatchNorm
    statistics are measured with onnxruntime on ``feeds`` (default: ``light_inputs``) and the
    classifier is rescaled to logits of std ~2. The result passes ``onnx.checker``.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in g.initializer}
    roles = _roles(m)
    keep_nodes = []
    new_weights: dict[str, np.ndarray] = {}
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
            val = _random_weight(rng, shape, roles.get(n.output[0]))
            if val is None:
                val = _normal(rng, shape, 0.1)
            new_weights[n.output[0]] = val.astype(np.float32)
        else:
            keep_nodes.append(n)
    for t in g.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and t.name in roles:
            val = _random_weight(rng, tuple(t.dims), roles[t.name])
            if val is not None:
                t.CopyFrom(numpy_helper.from_array(val.astype(np.float32), t.name))
    del g.node[:]
    g.node.extend(keep_nodes)
    for name, val in new_weights.items():
        g.initializer.append(numpy_helper.from_array(val, name))
        if m.ir_version < 4:
            g.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(val.shape)))
    # drop initializers (and their graph-input twins) that nothing uses any more
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    dead = {t.name for t in g.initializer if t.name not in used}
    kept_inits = [t for t in g.initializer if t.name not in dead]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    kept_inputs = [vi for vi in g.input if vi.name not in dead]
    del g.input[:]
    g.input.extend(kept_inputs)
    if calibrate:
        feeds = dict(feeds) if feeds is not None else light_inputs(m)
        m = calibrate_batchnorm(m, feeds, ort_run, seed=seed)
        m = scale_logits(m, feeds, ort_run, target_std=2.0)
    onnx.checker.check_model(m)
    return m
