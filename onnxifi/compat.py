"""onnxGetBackendCompatibility: a cheap judgement of a model, node by node.

Frameworks probe one operator at a time with a one-node ModelProto that has no
initializers and often no inputs or value infos. The judgement reads op type,
domain, opset, attributes and whatever types are declared; it never imports the
model (no shape inference, no weights, no kernels), so it costs microseconds
where onnxInitGraph of the same node costs milliseconds. Results are memoised
on the serialized bytes because frameworks repeat the same probes.
"""
from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from typing import Any, Optional

import onnx
from onnx import defs, helper

from . import constants as C

log = logging.getLogger(__name__)

#: Highest ai.onnx opset and IR version this build of onnx knows (what the backend reports).
MAX_OPSET = defs.onnx_opset_version()
MAX_IR_VERSION = onnx.IR_VERSION

# Element types with an OpenCL storage type in clglow (clglow.dtypes); others are refused.
_SUPPORTED_ELEM_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
    onnx.TensorProto.INT32, onnx.TensorProto.UINT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
}

# Severity order when several nodes disagree: the first present wins.
_ORDER = [
    C.ONNXIFI_STATUS_INVALID_MODEL,
    C.ONNXIFI_STATUS_UNSUPPORTED_VERSION,
    C.ONNXIFI_STATUS_UNSUPPORTED_OPERATOR,
    C.ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE,
    C.ONNXIFI_STATUS_UNSUPPORTED_DATATYPE,
    C.ONNXIFI_STATUS_UNSUPPORTED_SHAPE,
    C.ONNXIFI_STATUS_FALLBACK,
    C.ONNXIFI_STATUS_SUCCESS,
]


class Verdict:
    """The status of a judgement and the reasons (one line per node that is not SUCCESS)."""

    __slots__ = ("status", "reasons")

    def __init__(self, status: int, reasons: Optional[list] = None) -> None:
        self.status = status
        self.reasons = list(reasons or [])

    def __repr__(self) -> str:
        return f"Verdict({C.status_name(self.status)}, {self.reasons!r})"


def _status_from_name(name: str) -> int:
    key = name if name.startswith("ONNXIFI_STATUS_") else "ONNXIFI_STATUS_" + name.upper()
    value = getattr(C, key, None)
    return int(value) if isinstance(value, int) else C.ONNXIFI_STATUS_UNSUPPORTED_OPERATOR


def _elem_types(graph: onnx.GraphProto) -> dict[str, Any]:
    """name -> TypeProto for every declared value (inputs, outputs, value_info, initializers)."""
    out: dict[str, Any] = {}
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        out[vi.name] = vi.type
    for init in graph.initializer:
        out.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    return out


def _declared_type_problem(name: str, tp: Any) -> Optional[str]:
    which = tp.WhichOneof("value") if tp is not None else None
    if which is None:
        return None
    if which != "tensor_type":
        return f"value {name!r} is a {which}; only tensors are supported"
    et = tp.tensor_type.elem_type
    if et and et not in _SUPPORTED_ELEM_TYPES:
        return f"value {name!r} has element type {onnx.TensorProto.DataType.Name(et)}"
    return None


def _judge_node(node: onnx.NodeProto, opset: int, types: dict[str, Any], target: Any = None) -> tuple[int, str]:
    try:
        from clglow.partition import judge_node
    except Exception as e:  # clglow missing or broken: nothing can run
        return C.ONNXIFI_STATUS_BACKEND_UNAVAILABLE, f"clglow cannot be imported: {e}"
    name, reason = judge_node(node, opset, types, target)
    return _status_from_name(name), reason


def judge_model(model: onnx.ModelProto, target: Any = None) -> Verdict:
    """Judge a parsed model node by node (see module docstring) for `target`, the backend
    device's clglow Target (None: a generic device, without fp64)."""
    if model.ir_version <= 0 or not model.HasField("graph"):
        return Verdict(C.ONNXIFI_STATUS_INVALID_MODEL, ["no ir_version or no graph"])
    if model.ir_version > MAX_IR_VERSION:
        return Verdict(C.ONNXIFI_STATUS_UNSUPPORTED_VERSION,
                       [f"IR version {model.ir_version} > supported {MAX_IR_VERSION}"])
    opsets = {(o.domain or ""): o.version for o in model.opset_import}
    if "ai.onnx" in opsets:
        opsets.setdefault("", opsets["ai.onnx"])
    if opsets.get("", 0) > MAX_OPSET:
        return Verdict(C.ONNXIFI_STATUS_UNSUPPORTED_VERSION,
                       [f"ai.onnx opset {opsets['']} > supported {MAX_OPSET}"])
    graph = model.graph
    types = _elem_types(graph)
    results: list[tuple[int, str]] = []
    for name, tp in types.items():
        problem = _declared_type_problem(name, tp)
        if problem:
            results.append((C.ONNXIFI_STATUS_UNSUPPORTED_DATATYPE, problem))
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = dict(opsets)
    lex = onnx.checker.C.LexicalScopeContext() if hasattr(onnx.checker.C, "LexicalScopeContext") else None
    for node in graph.node:
        domain = node.domain if node.domain != "ai.onnx" else ""
        where = f"node {node.name or node.op_type!r} ({node.op_type})"
        if domain not in opsets:
            results.append((C.ONNXIFI_STATUS_INVALID_MODEL, f"{where}: domain {domain or 'ai.onnx'!r} not imported"))
            continue
        opset = opsets[domain]
        if not defs.has(node.op_type, domain):
            results.append((C.ONNXIFI_STATUS_UNSUPPORTED_OPERATOR, f"{where}: unknown operator"))
            continue
        try:
            if lex is not None:
                onnx.checker.C.check_node(node.SerializeToString(), ctx, lex)
            else:
                onnx.checker.C.check_node(node.SerializeToString(), ctx)
        except Exception as e:
            results.append((C.ONNXIFI_STATUS_INVALID_MODEL, f"{where}: {str(e).splitlines()[0]}"))
            continue
        status, reason = _judge_node(node, opset, types, target)
        if status != C.ONNXIFI_STATUS_SUCCESS:
            results.append((status, f"{where}: {reason}"))
    if not results:
        return Verdict(C.ONNXIFI_STATUS_SUCCESS)
    present = {s for s, _ in results}
    status = next((s for s in _ORDER if s in present), max(present))
    return Verdict(status, [r for _, r in results])


_CACHE: "OrderedDict[tuple, Verdict]" = OrderedDict()  # (content hash, target) -> verdict
_CACHE_MAX = 4096
_CACHE_MAX_BYTES = 1 << 16  # only probe-sized models are memoised
_cache_lock = threading.Lock()


def _judge_uncached(data: bytes, target: Any = None) -> Verdict:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:
        return Verdict(C.ONNXIFI_STATUS_INVALID_PROTOBUF, [f"not a ModelProto: {e}"])
    return judge_model(model, target)


def judge_bytes(data: bytes, target: Any = None) -> Verdict:
    """Judge a serialized ModelProto for `target`; probe-sized models are memoised on their
    content and the target."""
    if len(data) > _CACHE_MAX_BYTES:
        return _judge_uncached(data, target)
    key = (hashlib.blake2b(data, digest_size=16).digest(), target)
    with _cache_lock:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    verdict = _judge_uncached(data, target)
    with _cache_lock:
        _CACHE[key] = verdict
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return verdict
