"""Benchmark models and what the runner needs to know about them.

Builtin names (each built locally with seeded random weights, nothing downloaded):

- ``resnet50``  clglow.models.resnet50 (opset 13), image 3x224x224; default batches 1 and 8
- ``resnet18``  clglow.models.resnet18 (opset 13), image 3x224x224
- ``mobilenet`` the MobileNetV2/EfficientNet-style CNN of tests/models.py (depthwise convs,
  squeeze-excite, SiLU/ReLU6, residual Adds) at 224x224 with 1000 classes
- ``bert``      the BERT-style post-LN encoder of tests/models.py at d_model 256, 4 heads, FFN 1024,
  4 layers, sequence 128, vocabulary 30522
- ``lstm`` / ``gru``  clglow.models.recurrent: token embedding -> 2 LSTM / GRU layers (hidden 128) ->
  vocabulary head (1000), sequence 20; default batches 1 and 8

Anything else is taken as a path to an ``.onnx`` file; its symbolic input dimensions get the
batch (first dimension), 128 (names containing "seq") or 1.

Also here: FLOPs of Conv/Gemm/MatMul counted from shapes (onnx shape inference) and the
largest set of simultaneously live activations of the original graph (for the memory check).
"""
from __future__ import annotations

import copy
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_test_models = None


def test_models():
    """tests/models.py of this source checkout, loaded by path (not as a package named `tests`)."""
    global _test_models
    if _test_models is None:
        path = os.path.join(REPO, "tests", "models.py")
        if REPO not in sys.path:
            sys.path.insert(0, REPO)  # tests/models.py imports clglow.models
        spec = importlib.util.spec_from_file_location("_clglow_bench_test_models", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}: the benchmarks run from a source checkout")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _test_models = mod
    return _test_models


@dataclass
class Builtin:
    description: str
    build: Callable[[int], onnx.ModelProto]
    batches: tuple  # the batches a default run measures
    unit: str = "images"


def _resnet50(batch: int) -> onnx.ModelProto:
    from clglow.models import resnet50

    return resnet50(opset=13, batch=batch, seed=0)


def _resnet18(batch: int) -> onnx.ModelProto:
    from clglow.models import resnet18

    return resnet18(opset=13, batch=batch, seed=0)


def _mobilenet(batch: int) -> onnx.ModelProto:
    return test_models().mobilenet_se(batch=batch, image_size=224, num_classes=1000, seed=0)


BERT = dict(seq=128, vocab=30522, d_model=256, heads=4, ffn=1024, layers=4)


def _bert(batch: int) -> onnx.ModelProto:
    return test_models().transformer_encoder(batch=batch, seed=0, **BERT)


def _recurrent(cell: str) -> Callable[[int], onnx.ModelProto]:
    def build(batch: int) -> onnx.ModelProto:
        from clglow.models.recurrent import recurrent_lm

        return recurrent_lm(cell, batch=batch, seq=20, hidden=128, layers=2, seed=0)
    return build


BUILTINS: dict[str, Builtin] = {
    "resnet50": Builtin("ResNet-50 v1, 224x224, opset 13", _resnet50, (1, 8)),
    "resnet18": Builtin("ResNet-18, 224x224, opset 13", _resnet18, (1,)),
    "mobilenet": Builtin("MobileNetV2-style CNN (depthwise, SE, SiLU/ReLU6), 224x224", _mobilenet, (1,)),
    "bert": Builtin("BERT-style encoder, d256 h4 ffn1024 L4, seq 128", _bert, (1,), unit="sequences"),
    "lstm": Builtin("2-layer LSTM language model, hidden 128, seq 20", _recurrent("LSTM"), (1, 8), unit="sequences"),
    "gru": Builtin("2-layer GRU language model, hidden 128, seq 20", _recurrent("GRU"), (1, 8), unit="sequences"),
}
DEFAULT_MODELS = ("resnet50", "resnet18", "mobilenet", "bert")


def load(spec: str, batch: int) -> tuple[onnx.ModelProto, str, str]:
    """(model with concrete input shapes, display name, unit of throughput)."""
    if spec in BUILTINS:
        b = BUILTINS[spec]
        return b.build(batch), spec, b.unit
    if not os.path.exists(spec):
        raise SystemExit(f"unknown model {spec!r}: not a file, and the builtin models are "
                         f"{', '.join(BUILTINS)}")
    model = onnx.load(spec)  # external data next to the file is loaded too
    return fix_dims(model, batch), os.path.basename(spec), "items"


def fix_dims(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy whose symbolic graph-input dims are concrete: batch for the first one, 128 for
    names containing 'seq', else 1."""
    model = copy.deepcopy(model)
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            name = d.dim_param
            value = batch if i == 0 else (128 if "seq" in name.lower() else 1)
            d.Clear()
            d.dim_value = value
    return model


def feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs (tests/models.py sample_inputs: token ids below the vocabulary, a padded
    attention-mask tail, standard-normal floats)."""
    return test_models().sample_inputs(model, seed=seed)


# ------------------------------------------------------------------------------------------------
# shapes, FLOPs, live activations
# ------------------------------------------------------------------------------------------------

_shape_memo: dict = {}


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[Optional[tuple], int]]:
    """name -> (shape or None when not fully known, itemsize) for every typed value: onnx shape
    inference, then one onnxruntime run on seeded inputs for the values it left unknown."""
    key = id(model)
    if key in _shape_memo and _shape_memo[key][0] is model:
        return _shape_memo[key][1]
    out = _inferred_shapes(model)
    unknown = [o for n in model.graph.node for o in n.output if o and out.get(o, (None, 4))[0] is None]
    if unknown:
        try:
            out.update(_ort_shapes(model, unknown))
        except Exception:  # keep what inference gave; callers report "incomplete"
            pass
    _shape_memo[key] = (model, out)
    return out


def _ort_shapes(model: onnx.ModelProto, names: list) -> dict:
    import onnxruntime as ort

    m = copy.deepcopy(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    outs = sess.run(names, feeds(model))
    return {name: (tuple(np.asarray(v).shape), np.asarray(v).dtype.itemsize) for name, v in zip(names, outs)}


def _inferred_shapes(model: onnx.ModelProto) -> dict:
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    out = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        dims = []
        for d in tt.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else None)
        shape = tuple(dims) if tt.HasField("shape") and all(d is not None for d in dims) else None
        try:
            itemsize = helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
        except Exception:
            itemsize = 4
        out[vi.name] = (shape, itemsize)
    for t in g.initializer:
        out[t.name] = (tuple(t.dims), helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
    return out


def count_flops(model: onnx.ModelProto) -> tuple[float, bool]:
    """(FLOPs of one run counting Conv, ConvTranspose, Gemm and MatMul as 2 per multiply-add,
    complete) where complete is False when some such node had an unknown shape."""
    shapes = _shapes(model)
    total = 0.0
    complete = True

    def shape(name: str) -> Optional[tuple]:
        return shapes.get(name, (None, 4))[0]

    for n in model.graph.node:
        if n.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            continue
        y, a, b = shape(n.output[0]), shape(n.input[0]), shape(n.input[1])
        if y is None or a is None or b is None:
            complete = False
            continue
        attrs = {at.name: helper.get_attribute_value(at) for at in n.attribute}
        if n.op_type == "Conv":
            # y [N, Cout, *spatial]; w [Cout, Cin/group, *kernel]
            total += 2.0 * float(np.prod(y)) * float(np.prod(b[1:]))
        elif n.op_type == "ConvTranspose":
            # every input element scatters into Cout/group * kernel outputs; w [Cin, Cout/group, *k]
            total += 2.0 * float(np.prod(a)) * float(np.prod(b[1:]))
        elif n.op_type == "Gemm":
            k = a[0] if attrs.get("transA", 0) else a[1]
            total += 2.0 * float(np.prod(y)) * k
        else:  # MatMul: y [..., M, N], K = a[-1]
            total += 2.0 * float(np.prod(y)) * a[-1]
    return total, complete


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the model's initializers and Constant nodes (the weights)."""
    total = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    for n in model.graph.node:
        if n.op_type == "Constant":
            for at in n.attribute:
                if at.type == onnx.AttributeProto.TENSOR:
                    total += numpy_helper.to_array(at.t).nbytes
    return total


def peak_live_activations(model: onnx.ModelProto) -> tuple[int, bool]:
    """(bytes of the largest set of activations live at once in the original graph, in its node
    order, graph inputs and outputs included; complete) — what an ideal planner must hold."""
    shapes = _shapes(model)
    g = model.graph
    consts = {t.name for t in g.initializer}
    consts.update(o for n in g.node if n.op_type == "Constant" for o in n.output)
    complete = True

    def nbytes(name: str) -> int:
        nonlocal complete
        shape, itemsize = shapes.get(name, (None, 4))
        if shape is None:
            complete = False
            return 0
        return int(np.prod(shape, dtype=np.int64)) * itemsize

    last_use: dict[str, int] = {}
    for i, n in enumerate(g.node):
        for x in n.input:
            if x and x not in consts:
                last_use[x] = i
    outputs = {o.name for o in g.output}
    for o in outputs:
        last_use[o] = len(g.node)
    live: dict[str, int] = {vi.name: nbytes(vi.name) for vi in g.input if vi.name not in consts}
    peak = sum(live.values())
    for i, n in enumerate(g.node):
        for o in n.output:
            if o and o not in consts:
                live[o] = nbytes(o)
        peak = max(peak, sum(live.values()))
        for name in [k for k in live if last_use.get(k, -1) <= i and k not in outputs]:
            del live[name]
    return peak, complete


# ------------------------------------------------------------------------------------------------
# one-node MatMul models (benchmarks/gemm.py)
# ------------------------------------------------------------------------------------------------

def matmul_model(m: int, k: int, n: int, const_a: Optional[np.ndarray] = None) -> onnx.ModelProto:
    """Y[m,n] = A[m,k] @ B[k,n]; A is an initializer when const_a is given (a conv's weights)."""
    a_vi = helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])
    b_vi = helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, n])
    y_vi = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])
    inits: Sequence[onnx.TensorProto] = []
    inputs = [a_vi, b_vi]
    if const_a is not None:
        inits = [numpy_helper.from_array(np.ascontiguousarray(const_a, np.float32), "A")]
        inputs = [b_vi]
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"], name="matmul")],
                              f"matmul_{m}x{k}x{n}", inputs, [y_vi], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="clglow-bench")
    model.ir_version = 8
    return model
