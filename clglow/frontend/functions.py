"""ONNX functions inlined at load: a model's own (ModelProto.functions) and the function bodies of
standard operators that no OpenCL kernel implements.

Why: a node that calls a function would otherwise run whole on the host (onnx.reference
evaluates the body), while the body is made of operators that have kernels. onnxruntime inlines
model-local functions the same way, and expands a schema's function body where it has no kernel
of its own. The standard operators concerned here are MeanVarianceNormalization (a fixed body)
and ai.onnx.preview FlexAttention (a body built for the node's attributes and input types, its
score/probability modifier subgraphs included).

The inlining itself is onnx's (onnx.inliner.inline_local_functions: renaming, attribute
references, nested subgraphs): each expanded node calls a private function (domain
FUNCTION_DOMAIN) made from its schema's body, with the schema's attribute defaults written into
the node first (an omitted attribute inside a body would otherwise take the inner operator's
default, e.g. ReduceMean's all-axes for MeanVarianceNormalization's [0, 2, 3]).
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import onnx
import onnx.inliner
from onnx import defs, shape_inference

log = logging.getLogger(__name__)

FUNCTION_DOMAIN = "clglow.function"

# Standard ops never expanded: Bernoulli's body draws with RandomUniformLike (no kernel either:
# nothing gained), SequenceMap's maps over sequences (host only).
_NEVER = {("", "Bernoulli"), ("", "SequenceMap")}

HasKernel = Callable[[str, str], bool]


def inline_functions(proto: onnx.ModelProto, has_kernel: HasKernel) -> onnx.ModelProto:
    """`proto` with its local functions inlined and every top-level node of a standard op that
    `has_kernel(domain, op_type)` denies and that has a function body replaced by that body. The
    model is returned unchanged when there is nothing to do; a body onnx cannot build for a node
    leaves the node as it is (it runs on the host, as before)."""
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): int(o.version) for o in proto.opset_import}
    expand = [i for i, n in enumerate(proto.graph.node) if _expandable(n, opsets, has_kernel)]
    if not expand and not proto.functions:
        return proto
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    types = _input_types(model) if expand else {}
    made = 0
    for i in expand:
        node = model.graph.node[i]
        fn = _function_for(node, opsets, types, f"{node.op_type}_{made}")
        if fn is None:
            continue
        node.op_type, node.domain = fn.name, FUNCTION_DOMAIN
        model.functions.append(fn)
        made += 1
    if made:
        model.opset_import.append(onnx.helper.make_opsetid(FUNCTION_DOMAIN, 1))
    _add_function_defaults(model)
    inlined = onnx.inliner.inline_local_functions(model, convert_version=True)
    del inlined.opset_import[:]
    inlined.opset_import.extend(o for o in model.opset_import if o.domain != FUNCTION_DOMAIN)
    for o in _body_opsets(model):
        if all((p.domain or "") != (o.domain or "") for p in inlined.opset_import):
            inlined.opset_import.append(o)
    if made:
        log.info("expanded %d node(s) into their ONNX function bodies (no OpenCL kernel of their own)", made)
    return inlined


def expands(domain: str, op_type: str, opset: int) -> bool:
    """Whether a node of this standard op is replaced by its function body when no kernel covers
    it (ops_table's "function body" rows)."""
    if (domain, op_type) in _NEVER:
        return False
    try:
        schema = defs.get_schema(op_type, opset, domain)
    except Exception:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _schema(node: onnx.NodeProto, opsets: dict) -> Optional[defs.OpSchema]:
    domain = node.domain if node.domain != "ai.onnx" else ""
    try:
        return defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except Exception:
        return None


def _expandable(node: onnx.NodeProto, opsets: dict, has_kernel: HasKernel) -> bool:
    domain = node.domain if node.domain != "ai.onnx" else ""
    return not has_kernel(domain, node.op_type) and expands(domain, node.op_type, opsets.get(domain, 1))


def _input_types(model: onnx.ModelProto) -> dict:
    """Every value's TypeProto from onnx's shape inference (a context-dependent body is built for
    its node's input types)."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    g = inferred.graph
    types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    for t in g.initializer:
        types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    return types


def _function_for(node: onnx.NodeProto, opsets: dict, types: dict, name: str) -> Optional[onnx.FunctionProto]:
    """The node's body as a private FunctionProto called `name` (the node gets the schema's
    attribute defaults it omits), or None when onnx cannot build one."""
    schema = _schema(node, opsets)
    domain = node.domain if node.domain != "ai.onnx" else ""
    opset = opsets.get(domain, 1)
    _add_defaults(node, schema)
    try:
        fixed = [v for v in schema.function_opset_versions if v <= opset]
        if schema.has_function and fixed:
            data = schema.get_function_with_opset_version(max(fixed))
        else:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            if not versions or any(i and i not in types for i in node.input):
                return None
            data = schema.get_context_dependent_function_with_opset_version(
                max(versions), node.SerializeToString(),
                [types[i].SerializeToString() if i else onnx.TypeProto().SerializeToString() for i in node.input])
        fn = onnx.FunctionProto()
        fn.ParseFromString(data)
    except Exception as e:  # onnx could not build the body for this node: it stays whole
        log.info("no function body for %s (%s): %s", node.name or node.op_type, node.op_type, e)
        return None
    if not fn.node:
        return None
    fn.name, fn.domain = name, FUNCTION_DOMAIN
    # the body's opsets: its own, else the model's for the domains its nodes use
    known = {o.domain for o in fn.opset_import}
    for d in sorted({n.domain for n in fn.node} - known):
        fn.opset_import.append(onnx.helper.make_opsetid(d, opsets.get(d if d != "ai.onnx" else "", 1)))
    return fn


def _add_defaults(node: onnx.NodeProto, schema: defs.OpSchema) -> None:
    """The schema's default values of the attributes the node omits, written into the node."""
    present = {a.name for a in node.attribute}
    for attr_name, attr in schema.attributes.items():
        if attr_name in present or attr.required:
            continue
        default = attr.default_value
        if default is None or default.type == onnx.AttributeProto.UNDEFINED:
            continue
        a = onnx.AttributeProto()
        a.CopyFrom(default)
        a.name = attr_name
        node.attribute.append(a)


def _add_function_defaults(model: onnx.ModelProto) -> None:
    """Each call of a local function gets the function's attribute defaults (attribute_proto)
    that it omits, in the graph and in function bodies: onnx's inliner leaves an omitted
    attribute out of the body's nodes instead of using the default."""
    defaults = {(f.domain, f.name): list(f.attribute_proto) for f in model.functions if f.attribute_proto}
    if not defaults:
        return
    nodes = list(model.graph.node) + [n for f in model.functions for n in f.node]
    for node in nodes:
        present = {a.name for a in node.attribute}
        for d in defaults.get((node.domain, node.op_type), ()):
            if d.name not in present:
                node.attribute.append(d)


def _body_opsets(model: onnx.ModelProto) -> list:
    """Opsets the inlined bodies need that the model does not import (ai.onnx.preview's body is
    ai.onnx nodes, say): the functions' own imports."""
    out = []
    for fn in model.functions:
        for o in fn.opset_import:
            if o.domain != FUNCTION_DOMAIN:
                out.append(o)
    return out


__all__ = ["FUNCTION_DOMAIN", "HasKernel", "expands", "inline_functions"]
