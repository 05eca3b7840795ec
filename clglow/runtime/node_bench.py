"""Whole-node benchmarks for tunable families whose points are several launches (a conv's path).

Why: a conv's path (Winograd F(4)/F(2), implicit GEMM, im2col, transposed, ...) is a set of
launches with scratch buffers and weights packed at plan time, so it is measured as what it is:
a one-node model run by an engine (a session's runner) whose Target carries the point as its only database entry.
Each candidate gets its own `Device` object on the same OpenCL context and program cache (so no
other session's Target, plan or queue changes), the candidates run in turns (best time of
each: the node's summed kernel time from OpenCL profiling, less disturbed by a busy host than
wall time), and a candidate whose output differs from the default's beyond the family's tolerance is
dropped (logged): the search never stores a point that changes a result.

Example::

    times = measure_node(device, target, "conv", key, [{"path": "winograd", "variant": "F4"}, ...])
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..lower.tunable import FAMILIES, Params, ShapeKey, format_params, key_str, params_items
from ..target import Target

log = logging.getLogger(__name__)

_ACTS = {"Relu": ("Relu", {}), "Sigmoid": ("Sigmoid", {}), "Tanh": ("Tanh", {}), "LeakyRelu": ("LeakyRelu", {}),
         "HardSigmoid": ("HardSigmoid", {}), "HardSwish": ("HardSwish", {})}


def conv_model(key: ShapeKey, seed: int = 0) -> onnx.ModelProto:
    """A one-Conv model for a conv family key (lower/conv.py conv_key): bias, residual Add and
    activation as the key says (the fusion pass makes them one FusedConv), random weights."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, n_img, cin, cout, groups, act, has_bias, has_res = key
    rng = np.random.default_rng(seed)
    ph_end = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - h - ph)
    pw_end = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - w - pw)
    wt = (rng.standard_normal((cout, cin // groups, kh, kw)) / np.sqrt(cin // groups * kh * kw)).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "W")]
    conv_in = ["X", "W"]
    if has_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "B"))
        conv_in.append("B")
    nodes = [helper.make_node("Conv", conv_in, ["c"], kernel_shape=[kh, kw], strides=[sh, sw],
                              pads=[ph, pw, ph_end, pw_end], dilations=[dh, dw], group=groups)]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n_img, cin, h, w])]
    y = "c"
    if has_res:
        inputs.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, [n_img, cout, oh, ow]))
        nodes.append(helper.make_node("Add", [y, "Z"], ["r"]))
        y = "r"
    if act:
        op, attrs = _ACTS.get(act, ("Relu", {}))
        nodes.append(helper.make_node(op, [y], ["Y"], **attrs))
    else:
        nodes.append(helper.make_node("Identity", [y], ["Y"]))
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n_img, cout, oh, ow])
    graph = helper.make_graph(nodes, "conv_bench", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def operands_model(key: ShapeKey, seed: int = 0) -> onnx.ModelProto:
    """A one-MatMul model for a gemm_operands key (lower/gemm.py): Y[M, N] = A[M, K] @ B[K, N],
    live operands as inputs, constant ones random initializers."""
    m, n, k, a_src, b_src = key
    rng = np.random.default_rng(seed)
    inputs, inits = [], []
    for name, shape, src in (("A", [m, k], a_src), ("B", [k, n], b_src)):
        if src == "live":
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        else:
            inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "gemm_operands_bench", inputs,
                              [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


MODELS: Dict[str, Callable[[ShapeKey], onnx.ModelProto]] = {"conv": conv_model, "gemm_operands": operands_model}


def _feeds(model: onnx.ModelProto) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _engine(device, target: Target, family: str, key: ShapeKey, p: Params, model: onnx.ModelProto):
    """An engine (what a session runs) on its own Device object (same context and program cache)
    whose Target has `p` as its database entry for (family, key), the device's other entries kept."""
    from ..config import PlanOptions
    from ..frontend.onnx_model import import_model
    from ..passes.pipeline import optimize
    from .device import Device
    from .engine import Engine

    dev = Device(device.context, device.cl_device)
    dev.cache = device.cache
    dev.set_gemm_tiles(device.tuning.tiles(target.family), target.family)
    ks = key_str(key)
    others = tuple(r for r in device.tuning.table(device, target.family) if (r[0], r[1]) != (family, ks))
    dev.tuning.set_table(target.family, others + ((family, ks, params_items(p)),))
    # inputs copied into device buffers (not the caller's arrays in place): as inside a model,
    # where a conv reads an aligned buffer another kernel wrote; profiled: kernel time is timed
    return Engine(optimize(import_model(model)), dev, PlanOptions.from_env(target=target.family, zero_copy=False),
                  profiling=True)


def kernel_ms(engine, feeds: Dict[str, np.ndarray]) -> float:
    """One run's summed kernel time (ms), from its OpenCL profiling events."""
    from .profiler import kernel_times

    engine.records.clear()
    engine.run(feeds)
    ms = sum(e - s for _label, _k, _op, s, e in kernel_times(engine.records)) * 1e-6
    engine.records.clear()
    return ms


def measure_node(device, target: Target, family: str, key: ShapeKey, points: List[Params],
                 gate: Optional[Any] = None, rounds: int = 5, deadline: float = float("inf")) -> Dict[int, float]:
    """Best kernel time (ms, summed over the node's launches) of one run per point (by index;
    points[0] is the reference for the
    results), in turns; a point that fails, or whose output differs from the first's beyond the
    family's tolerance, is left out (logged). Past `deadline` (time.monotonic()) no further
    point is built once two are."""
    model = MODELS[family](key)
    feeds = _feeds(model)
    tol = FAMILIES[family].tolerance
    sessions: Dict[int, Any] = {}
    ref: Optional[np.ndarray] = None
    for i, p in enumerate(points):
        if gate is not None and not gate.wait():
            return {}
        if len(sessions) >= 2 and time.monotonic() >= deadline:
            break
        try:
            sess = _engine(device, target, family, key, p, model)
            y = sess.run(feeds)["Y"]
        except Exception as e:  # noqa: BLE001 - a point the device rejects is skipped
            log.info("tuning %s %s: point %s failed: %s", family, key, format_params(p), e)
            continue
        if ref is None:
            ref = y
        elif not np.allclose(y, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max()))):
            log.warning("tuning %s %s: point %s disagrees with the default (max diff %.3g): dropped",
                        family, key, format_params(p), float(np.abs(y - ref).max()))
            continue
        sessions[i] = sess
    best = {i: float("inf") for i in sessions}
    try:
        for _ in range(rounds):
            for i, sess in sessions.items():
                if gate is not None and not gate.wait():
                    return {}
                best[i] = min(best[i], kernel_ms(sess, feeds))
    finally:
        for sess in sessions.values():
            sess.release()
    return best




def model_engine(device, target: Target, table: tuple, model: onnx.ModelProto):
    """An engine for a whole model on its own Device object whose Target carries `table` as its
    tuning database entries (profiled, inputs copied), for comparing tables on one model."""
    from ..config import PlanOptions
    from ..frontend.onnx_model import import_model
    from ..passes.pipeline import optimize
    from .device import Device
    from .engine import Engine

    dev = Device(device.context, device.cl_device)
    dev.cache = device.cache
    dev.set_gemm_tiles(device.tuning.tiles(target.family), target.family)
    dev.tuning.set_table(target.family, table)
    return Engine(optimize(import_model(model)), dev, PlanOptions.from_env(target=target.family, zero_copy=False),
                  profiling=True)


def compare_tables(device, target: Target, tables: Dict[str, tuple], model: onnx.ModelProto,
                   rounds: int = 7) -> Dict[str, float]:
    """Median summed kernel time (ms) of one run of `model` under each named table, the tables in
    turns (None for a model whose inputs are not all static)."""
    feeds: Dict[str, np.ndarray] = {}
    rng = np.random.default_rng(0)
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims) or i.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            return {}
        feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
    engines = {name: model_engine(device, target, t, model) for name, t in tables.items()}
    times: Dict[str, List[float]] = {name: [] for name in engines}
    try:
        for e in engines.values():
            e.run(feeds)  # plans, builds, uploads: not timed
        for _ in range(rounds):
            for name, e in engines.items():
                times[name].append(kernel_ms(e, feeds))
    finally:
        for e in engines.values():
            e.release()
    return {name: float(np.median(v)) for name, v in times.items()}


__all__ = ["conv_model", "operands_model", "measure_node", "MODELS", "kernel_ms", "model_engine", "compare_tables"]
