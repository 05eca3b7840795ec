"""ONNX model -> clglow IR.

Loading goes through onnx's own parser, checker and shape inference; external
data is only read from inside the model's folder. Every problem found here is an
InvalidModel / InvalidProtobuf naming the node or tensor.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Optional, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import config
from ..dtypes import onnx_to_numpy
from ..errors import InvalidModel, InvalidProtobuf
from ..ir import Graph, Node, Value
from . import contrib_ops
from .functions import HasKernel, inline_functions

log = logging.getLogger(__name__)

ModelLike = Union[str, bytes, os.PathLike, onnx.ModelProto]


def load_model(model: ModelLike, external: Optional[list] = None) -> tuple[onnx.ModelProto, Optional[str]]:
    """Parse `model` (path, bytes or ModelProto) and resolve external data safely.

    Returns the ModelProto and the folder it came from (None for bytes/protos); the paths of the
    external-data files read are appended to `external` when given (frontend.graph_cache).
    """
    base_dir: Optional[str] = None
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "<bytes>")
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise InvalidModel(f"model file {path!r} does not exist or is not a file")
        with open(path, "rb") as f:
            data = f.read()
        proto = _parse(data, path)
        base_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise InvalidModel(f"expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    _load_external_data(proto, base_dir, external)
    return proto, base_dir


def _parse(data: bytes, origin: str) -> onnx.ModelProto:
    if len(data) == 0:
        raise InvalidProtobuf(f"model {origin} is empty")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError and friends
        raise InvalidProtobuf(f"model {origin} is not a valid ONNX protobuf: {e}") from None
    if not proto.HasField("graph"):
        raise InvalidProtobuf(f"model {origin} has no graph (not an ONNX ModelProto?)")
    return proto


def _iter_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _iter_tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _iter_tensors(g)


def _load_external_data(proto: onnx.ModelProto, base_dir: Optional[str], read: Optional[list] = None) -> None:
    """Read external tensor data, refusing any location outside the model's folder."""
    from onnx.external_data_helper import uses_external_data

    for t in _iter_tensors(proto.graph):
        if not uses_external_data(t):
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if base_dir is None:
            raise InvalidModel("external data needs the model to be loaded from a file path", tensor=t.name)
        if not loc or os.path.isabs(loc) or loc.startswith(("/", "\\")):
            raise InvalidModel(f"external data location {loc!r} must be a relative path", tensor=t.name)
        real_base = os.path.realpath(base_dir)
        target = os.path.realpath(os.path.join(base_dir, loc))
        if os.path.commonpath([real_base, target]) != real_base:
            raise InvalidModel(f"external data location {loc!r} points outside the model folder", tensor=t.name)
        if not os.path.isfile(target):
            raise InvalidModel(f"external data file {loc!r} not found", tensor=t.name)
        size = os.path.getsize(target)
        offset = int(info.get("offset", 0) or 0)
        length = int(info["length"]) if info.get("length") else size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise InvalidModel(f"external data range offset={offset} length={length} is past the end of "
                               f"{loc!r} ({size} bytes)", tensor=t.name)
        if read is not None and target not in read:
            read.append(target)
        with open(target, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(length)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


# Initializers with more elements than this are left out of the copy that onnx's checker and
# shape inference see (both serialise the whole model for their C++ side: 0.4 s of ResNet-50's
# 1.1 s warm load). Shape tensors that data propagation reads are far smaller.
_SKELETON_MAX_ELEMENTS = 4096


def skeleton(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its large initializers' data: each becomes a graph input of the same
    type and shape (kept as is if already an input), which is all the checker and shape
    inference need of it. The data itself is validated when imported (numpy_helper.to_array)."""
    sk = onnx.ModelProto()
    _copy_fields(proto, sk, skip="graph")
    g, sg = proto.graph, sk.graph
    _copy_fields(g, sg, skip="initializer")
    inputs = {vi.name for vi in g.input}
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n <= _SKELETON_MAX_ELEMENTS or t.data_type == onnx.TensorProto.STRING:
            sg.initializer.append(t)
        elif t.name not in inputs:
            sg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return sk


def _copy_fields(src, dst, skip: str) -> None:
    """Copy every set field of protobuf message `src` into `dst` except `skip`."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if not isinstance(value, (str, bytes)) and hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        elif field.message_type:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def check_model(proto: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        # the whole message, on one line: its "Context" part names the node or tensor
        raise InvalidModel(f"onnx.checker rejected the model: {' '.join(str(e).split())}") from None
    except Exception as e:
        raise InvalidModel(f"onnx.checker failed: {e}") from None


def infer_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """onnx shape inference (with data propagation); on failure the model is used as is."""
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # shape inference is an aid, not a gate
        log.warning("onnx shape inference failed (%s); continuing with declared shapes", e)
        return proto


def type_to_dtype_shape(tp: onnx.TypeProto) -> tuple[Optional[np.dtype], Optional[tuple]]:
    if not tp.HasField("tensor_type"):
        return None, None
    tt = tp.tensor_type
    try:
        dtype = onnx_to_numpy(tt.elem_type) if tt.elem_type else None
    except Exception:
        dtype = None
    if not tt.HasField("shape"):
        return dtype, None
    dims: list = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dtype, tuple(dims)


def attribute_value(a: onnx.AttributeProto) -> Any:
    v = helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", errors="replace") for x in v]
    if isinstance(v, list) and v and isinstance(v[0], onnx.TensorProto):
        return [numpy_helper.to_array(x) for x in v]
    return v


def constant_node_value(node: onnx.NodeProto) -> np.ndarray:
    """The value of a Constant node (any of its attribute forms)."""
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_string":
            return np.array(a.s.decode("utf-8"), dtype=object)
        if a.name == "value_strings":
            return np.array([s.decode("utf-8") for s in a.strings], dtype=object)
        if a.name == "sparse_value":
            from onnx.reference import ReferenceEvaluator

            return ReferenceEvaluator(_single_constant_model(node)).run(None, {})[0]
    raise InvalidModel("Constant node has no value attribute", node=node.name or node.output[0])


def _single_constant_model(node: onnx.NodeProto) -> onnx.ModelProto:
    out = helper.make_tensor_value_info(node.output[0], onnx.TensorProto.UNDEFINED, None)
    return helper.make_model(helper.make_graph([node], "c", [], [out]))


def import_model(proto: onnx.ModelProto, weights: Optional[Mapping[str, np.ndarray]] = None,
                 check: bool = True, max_tensor_bytes: Optional[int] = None,
                 has_kernel: Optional[HasKernel] = None) -> Graph:
    """Validate, shape-infer and translate a ModelProto to a clglow Graph.

    `weights` supplies or overrides initializer values by name (ONNXIFI weight descriptors);
    `max_tensor_bytes` caps any tensor (None: CLGLOW_MAX_TENSOR_BYTES), kept on the graph;
    `has_kernel(domain, op_type)`: the model's local functions are inlined and standard ops it
    denies are expanded into their function bodies (frontend/functions.py).
    """
    sk = skeleton(proto)
    if has_kernel is not None:
        try:
            sk = inline_functions(sk, has_kernel)
        except Exception as e:  # onnx's inliner refused the model: the checker below says why
            log.info("functions not inlined: %s", e)
    if check:
        _check_known_ops(sk)
        check_model(sk)
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): int(o.version) for o in sk.opset_import}
    _check_opsets(opsets)
    if "" not in opsets:
        opsets[""] = 1 if not proto.opset_import else opsets.get("", 1)
    inferred = infer_shapes(sk)
    g = inferred.graph
    values: dict[str, Value] = {}

    def add_type(vi: onnx.ValueInfoProto) -> None:
        dtype, shape = type_to_dtype_shape(vi.type)
        old = values.get(vi.name)
        if old is None:
            values[vi.name] = Value(vi.name, dtype, shape)
        else:
            old.dtype = old.dtype or dtype
            old.shape = old.shape if old.shape is not None else shape

    for vi in list(g.input) + list(g.output) + list(g.value_info):
        add_type(vi)

    cap = config.max_tensor_bytes() if max_tensor_bytes is None else int(max_tensor_bytes)
    init_names = set()
    for t in proto.graph.initializer:  # original initializers (inferred copy holds the same)
        try:
            arr = numpy_helper.to_array(t)
        except Exception as e:
            raise InvalidModel(f"cannot read initializer: {e}", tensor=t.name) from None
        if arr.nbytes > cap:
            raise InvalidModel(f"initializer of {arr.nbytes} bytes exceeds the cap of {cap} bytes", tensor=t.name)
        values[t.name] = Value(t.name, arr.dtype, tuple(arr.shape), arr)
        init_names.add(t.name)

    weights = dict(weights or {})
    for name, arr in weights.items():
        arr = np.asarray(arr)
        values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
        init_names.add(name)

    nodes: list[Node] = []
    seen_outputs: set = set()
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        for o in n.output:
            if o and o in seen_outputs:
                raise InvalidModel(f"tensor {o!r} is produced twice", node=name)
            if o:
                seen_outputs.add(o)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            arr = constant_node_value(n)
            values[n.output[0]] = Value(n.output[0], arr.dtype, tuple(arr.shape), arr)
            continue
        attrs = {a.name: attribute_value(a) for a in n.attribute}
        node = Node(n.op_type, name, list(n.input), list(n.output), attrs, n.domain, n)
        for v in node.inputs + node.outputs:
            if v and v not in values:
                values[v] = Value(v)
        nodes.append(node)

    graph_inputs = [vi.name for vi in g.input if vi.name not in init_names]
    outputs = [vi.name for vi in g.output]
    if not outputs:
        raise InvalidModel(f"graph {g.name or '(unnamed)'!r} has no outputs")
    seen_out: set = set()
    for name in outputs:
        if name in seen_out:
            raise InvalidModel("graph output is listed more than once", tensor=name)
        seen_out.add(name)
    for name in outputs:
        if name not in values:
            raise InvalidModel("graph output is never produced", tensor=name)
    graph = Graph(nodes, values, graph_inputs, outputs, opsets, g.name or "graph", int(proto.ir_version),
                  max_tensor_bytes)
    _check_topology(graph)
    contrib_ops.annotate(graph)  # onnx's shape inference leaves com.microsoft outputs untyped
    return graph


def _check_opsets(opsets: Mapping[str, int]) -> None:
    """Refuse opsets newer than the installed onnx knows (onnx.checker accepts, say, opset 999),
    and com.microsoft versions other than onnxruntime's one."""
    newest = onnx.defs.onnx_opset_version()
    for domain, version in opsets.items():
        if domain == "" and version > newest:
            raise InvalidModel(f"opset {version} of domain 'ai.onnx' is newer than the newest supported "
                               f"({newest})")
        if domain == contrib_ops.DOMAIN and version != contrib_ops.VERSION:
            raise InvalidModel(f"opset {version} of domain {domain!r} is not supported (onnxruntime's contrib "
                               f"operators are version {contrib_ops.VERSION})")


# Domains whose nodes are judged later (placement, host fallback) rather than refused at load:
# onnx's own (the schemas it knows) and clglow's fused ops.
_LATER_DOMAINS = ("ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.training", "clglow")


def _check_known_ops(proto: onnx.ModelProto) -> None:
    """Every ai.onnx op must exist at the model's opset and every com.microsoft op in clglow's
    registry (frontend/contrib_ops.py), with inputs and attributes that fit its schema; nodes of
    any other unknown domain are refused. All unknown ones are listed at once (onnx.checker would
    stop at the first, as an InvalidModel, and skips other domains)."""
    from ..errors import UnsupportedNode, UnsupportedOperator

    version = next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    functions = {(f.domain, f.name) for f in proto.functions}
    unknown = []
    for i, n in enumerate(proto.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        if (n.domain, n.op_type) in functions or n.domain in _LATER_DOMAINS:
            continue
        if n.domain == contrib_ops.DOMAIN:
            if contrib_ops.schema(n.op_type) is None:
                unknown.append(UnsupportedNode(name, n.op_type, n.domain, contrib_ops.VERSION,
                                               "clglow does not implement this com.microsoft operator (known: "
                                               f"{', '.join(sorted(contrib_ops.SCHEMAS))})"))
                continue
            used = len(n.input)
            while used and not n.input[used - 1]:
                used -= 1
            why = contrib_ops.check_arity(n.op_type, used, [a.name for a in n.attribute])
            if why:
                raise InvalidModel(f"{n.op_type} {why}", node=name)
            continue
        if n.domain not in ("", "ai.onnx"):
            unknown.append(UnsupportedNode(name, n.op_type, n.domain, 1,
                                           f"operator domain {n.domain!r} is unknown to clglow (known: ai.onnx, "
                                           f"ai.onnx.ml, {contrib_ops.DOMAIN})"))
            continue
        if version is None:
            continue
        try:
            onnx.defs.get_schema(n.op_type, version, "")
        except Exception:
            unknown.append(UnsupportedNode(name, n.op_type, "", version,
                                           "no such operator in the ONNX standard at this opset"))
    if unknown:
        raise UnsupportedOperator(unknown)


def _check_topology(graph: Graph) -> None:
    """Every node input must be defined before use (catches cycles and dangling names)."""
    defined = set(graph.inputs) | {v.name for v in graph.values.values() if v.is_const}
    for node in graph.nodes:
        for i in node.inputs:
            if i and i not in defined:
                raise InvalidModel(f"input {i!r} is used before it is produced (cycle or missing tensor)",
                                   node=node.name)
        defined.update(o for o in node.outputs if o)
    for o in graph.outputs:
        if o not in defined:
            raise InvalidModel("graph output is never produced", tensor=o)
