"""Give random-weight models realistic BatchNormalization statistics and logit scale.

A trained network's BatchNormalization running mean/variance match the statistics of its
input, so every BN output is O(1). A network with random weights and made-up statistics
drifts (activations vanish or explode through depth). These helpers measure the real
statistics on a feed with any executor (``run(model, feeds) -> {name: array}``) and write
them back, and rescale the classifier so that logits are spread but not saturated.
"""
from __future__ import annotations

import logging
from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

logger = logging.getLogger(__name__)

#: run(model, feeds, output_names) -> list of arrays, in the order of output_names.
Runner = Callable[[onnx.ModelProto, Mapping[str, np.ndarray], list[str]], list[np.ndarray]]

#: ops through which a positive rescaling of the producer's weights passes unchanged.
_HOMOGENEOUS = {
    "Relu", "GlobalAveragePool", "AveragePool", "MaxPool", "Reshape", "Flatten",
    "Dropout", "Identity", "Squeeze", "Unsqueeze", "Transpose",
}


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    existing = {o.name for o in m.graph.output}
    for n in names:
        if n not in existing:
            m.graph.output.append(helper.make_empty_tensor_value_info(n))
    return m


def _init_map(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def _set_init(inits: dict[str, onnx.TensorProto], name: str, value: np.ndarray) -> None:
    inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            ranks[vi.name] = len(tt.shape.dim)
    return ranks


def calibrate_batchnorm(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    run: Runner,
    jitter: float = 0.02,
    seed: int = 0,
) -> onnx.ModelProto:
    """Set every BatchNormalization's running mean/var to the statistics of its input.

    Builds a calibration copy in which each BN normalises with the batch statistics of its
    input (as in training mode: mean/variance over all axes but the channel axis, computed
    in-graph with ReduceMean), runs it once, and writes the measured statistics (perturbed
    by ``jitter``, relative) into the original model's initializers. The result in inference
    mode then reproduces the normalised activations. BNs whose statistics are not
    initializers are left alone. Returns a new model.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = _init_map(m)
    bns = [
        n for n in m.graph.node
        if n.op_type == "BatchNormalization" and n.input[3] in inits and n.input[4] in inits
    ]
    if not bns:
        return m
    opset = _opset(m)
    ranks = _ranks(m)
    cal = onnx.ModelProto()
    cal.CopyFrom(m)
    nodes: list[onnx.NodeProto] = []
    extra_inits: list[onnx.TensorProto] = []
    stats: list[tuple[str, str]] = []
    for i, n in enumerate(cal.graph.node):
        if n.op_type != "BatchNormalization" or n.input[3] not in inits or n.input[4] not in inits:
            nodes.append(n)
            continue
        x = n.input[0]
        axes = [0] + list(range(2, ranks.get(x, 4)))
        p = f"__cal{i}_"

        def reduce_mean(src: str, dst: str) -> onnx.NodeProto:
            if opset >= 18:
                return helper.make_node("ReduceMean", [src, p + "axes"], [dst], keepdims=1)
            return helper.make_node("ReduceMean", [src], [dst], axes=axes, keepdims=1)

        c = numpy_helper.to_array(inits[n.input[3]]).shape
        extra_inits += [
            numpy_helper.from_array(np.asarray(axes, np.int64), p + "axes"),
            numpy_helper.from_array(np.asarray(1e-5, np.float32), p + "eps"),
            numpy_helper.from_array(np.zeros(c, np.float32), p + "zero"),
            numpy_helper.from_array(np.ones(c, np.float32), p + "one"),
        ]
        nodes += [
            reduce_mean(x, p + "mean"),
            helper.make_node("Sub", [x, p + "mean"], [p + "d"]),
            helper.make_node("Mul", [p + "d", p + "d"], [p + "d2"]),
            reduce_mean(p + "d2", p + "var"),
            helper.make_node("Add", [p + "var", p + "eps"], [p + "ve"]),
            helper.make_node("Sqrt", [p + "ve"], [p + "std"]),
            helper.make_node("Div", [p + "d", p + "std"], [p + "xhat"]),
            helper.make_node(
                "BatchNormalization",
                [p + "xhat", n.input[1], n.input[2], p + "zero", p + "one"],
                [n.output[0]],
                epsilon=0.0,
            ),
        ]
        stats.append((p + "mean", p + "var"))
    del cal.graph.node[:]
    cal.graph.node.extend(nodes)
    cal.graph.initializer.extend(extra_inits)
    if cal.ir_version < 4:  # IR 3: every initializer must also be a graph input
        cal.graph.input.extend(
            helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in extra_inits
        )
    names = [s for pair in stats for s in pair]
    outs = run(_with_outputs(cal, names), feeds, names)
    rng = np.random.default_rng(seed)
    for k, n in enumerate(bns):
        mean = outs[2 * k].reshape(-1).astype(np.float64)
        var = outs[2 * k + 1].reshape(-1).astype(np.float64)
        _set_init(inits, n.input[3], mean + jitter * np.sqrt(var) * rng.uniform(-1, 1, mean.shape))
        _set_init(inits, n.input[4], var * (1 + jitter * rng.uniform(-1, 1, var.shape)) + 1e-5)
    logger.debug("calibrated %d BatchNormalization nodes", len(bns))
    return m


def scale_logits(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    run: Runner,
    target_std: float = 2.0,
) -> onnx.ModelProto:
    """Rescale the last Gemm/Conv (weights and bias) so its logits have std ``target_std``.

    The logits are the input of a final Softmax if there is one, else the first graph output.
    Only positively homogeneous ops (Relu, pooling, reshapes) may sit between the layer and
    the logits; otherwise the model is returned unchanged.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    producer = {o: n for n in m.graph.node for o in n.output}
    out = m.graph.output[0].name
    node = producer.get(out)
    logits = node.input[0] if node is not None and node.op_type == "Softmax" else out
    cur = producer.get(logits)
    while cur is not None and cur.op_type in _HOMOGENEOUS:
        cur = producer.get(cur.input[0])
    if cur is None or cur.op_type not in ("Gemm", "Conv", "MatMul"):
        logger.debug("scale_logits: no Gemm/Conv before the logits; unchanged")
        return m
    inits = _init_map(m)
    params = []
    for name in cur.input[1:3]:
        # follow a Reshape/Unsqueeze of the weight back to its initializer
        while name not in inits and name in producer and producer[name].op_type in ("Reshape", "Unsqueeze", "Identity"):
            name = producer[name].input[0]
        if name in inits:
            params.append(name)
    if not params:
        return m
    (y,) = run(_with_outputs(m, [logits]), feeds, [logits])
    std = float(np.std(y))
    if not np.isfinite(std) or std == 0.0:
        return m
    factor = target_std / std
    for name in params:
        _set_init(inits, name, numpy_helper.to_array(inits[name]) * factor)
    logger.debug("scale_logits: %s scaled by %.4g", cur.name or cur.op_type, factor)
    return m
