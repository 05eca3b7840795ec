"""Specialisation at concrete input shapes: every value gets a concrete shape.

Walks the graph once with onnx's own per-node shape inference (fed with the
constant inputs), folding Shape/Size of known shapes and every node whose inputs
have become constant. Where a node's output shape depends on data (NonZero,
a host op fed by run-time values), the nodes reading it (and what reads them) are
left for later: the executor runs the rest as one stage, then specialises the
nodes left with the real shapes.
"""
from __future__ import annotations

import logging
from typing import Mapping, Optional

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper, shape_inference

from .dtypes import numpy_to_onnx
from .errors import InvalidArgument, InvalidModel
from .frontend import contrib_ops
from .frontend.onnx_model import type_to_dtype_shape
from .ir import Graph, Node, Value
from .passes.fold_constants import fold_node
from .passes.unroll_loop import flatten_scan_concats, host_loop, inline_body, loop_waits, unroll_loop, unroll_scan

log = logging.getLogger(__name__)

_SMALL_CONST = 4096  # constants up to this many elements are passed to shape inference as data

# shape rules of clglow's fused ops: the ONNX op whose schema gives the output shape
# (and how to present the node to it: inputs, attributes)
_FUSED_AS = {
    ("clglow", "FusedConv"): ("Conv", lambda n: (n.inputs[:3], {k: v for k, v in n.attrs.items()
                                                               if k not in ("activation", "alpha", "beta")})),
    # elementwise ops broadcast multidirectionally, as Sum does, and keep the dtype
    ("clglow", "FusedElementwise"): ("Sum", lambda n: (list(n.inputs), {})),
    # bias and residual never change the MatMul's output shape (checked by the fusion)
    ("clglow", "FusedMatMul"): ("MatMul", lambda n: (n.inputs[:2], {})),
    # a squeeze-and-excitation gate (passes/fuse_squeeze_excite.py): [N, C, 1, 1] of X [N, C, H, W]
    ("clglow", "SqueezeExcite"): ("GlobalAveragePool", lambda n: (n.inputs[:1], {})),
    # a matched LayerNorm (passes/fuse_layernorm.py): Y only, X's shape and dtype
    ("clglow", "LayerNormalization"): ("Identity", lambda n: (n.inputs[:1], {})),
    # a LayerNorm across the channels of [N, C, ...] (passes/fuse_layernorm.fuse_channel_norm)
    ("clglow", "ChannelNorm"): ("Identity", lambda n: (n.inputs[:1], {})),
    ("clglow", "RMSNormalization"): ("Identity", lambda n: (n.inputs[:1], {})),  # passes/fuse_layernorm.py
    ("clglow", "BiasSoftmax"): ("Identity", lambda n: (n.inputs[:1], {})),  # passes/fuse_softmax.py: x's shape
    ("clglow", "RotateHalf"): ("Identity", lambda n: (n.inputs[:1], {})),  # passes/fuse_rotary.py: x's shape
}


def _type_proto(v: Value) -> Optional[onnx.TypeProto]:
    if v.dtype is None or v.dtype == object:
        return None
    shape = None if v.shape is None else [d if isinstance(d, int) else (d if isinstance(d, str) else None)
                                           for d in v.shape]
    return helper.make_tensor_type_proto(numpy_to_onnx(v.dtype), shape)


def _permuted_matmul(node: Node, graph: Graph) -> dict:
    """Output shape of a FusedMatMul whose operands or result are transposed views
    (passes/fuse_matmul.fold_transposes): Y = transpose(transpose(A, perm_a) @ transpose(B,
    perm_b), perm_c), static shapes only ({} otherwise)."""
    shapes = []
    for i in (0, 1):
        v = graph.values.get(node.input(i))
        if v is None or v.shape is None or not all(isinstance(d, int) for d in v.shape):
            return {}
        perm = node.attrs.get(("perm_a", "perm_b")[i])
        if perm and sorted(int(p) for p in perm) != list(range(len(v.shape))):
            raise InvalidModel(f"FusedMatMul {('perm_a', 'perm_b')[i]} {list(perm)} is not a permutation of "
                               f"{len(v.shape)} axes", node=node.name)
        shapes.append([v.shape[p] for p in perm] if perm else list(v.shape))
    a, b = shapes
    try:
        batch = list(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    except ValueError:
        raise InvalidModel(f"MatMul batch dimensions do not broadcast: {a} x {b}", node=node.name) from None
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise InvalidModel(f"MatMul inner dimensions differ: {a} x {b}", node=node.name)
    c = batch + [a[-2], b[-1]]
    perm = node.attrs.get("perm_c")
    if perm and sorted(int(p) for p in perm) != list(range(len(c))):
        raise InvalidModel(f"FusedMatMul perm_c {list(perm)} is not a permutation of {len(c)} axes",
                           node=node.name)
    return {node.outputs[0]: (np.dtype(np.float32), tuple(c[p] for p in perm) if perm else tuple(c))}


def infer_node(node: Node, graph: Graph) -> dict:
    """{output name: (dtype, shape)} from onnx's shape inference; {} when it cannot tell."""
    domain = node.domain if node.domain != "ai.onnx" else ""
    op_type = node.op_type
    if (domain, op_type) == ("clglow", "FusedMatMul") and any(
            node.attrs.get(k) for k in ("perm_a", "perm_b", "perm_c")):
        return _permuted_matmul(node, graph)
    if (domain, op_type) == ("clglow", "FusedAttention"):  # its rule lives with the pass that makes it
        from .passes.fuse_attention import output_shape
        return output_shape(node, graph)
    if (domain, op_type) == ("clglow", "FusedElementwise") and "rank" in node.attrs:  # typed / with views
        from .passes.fuse_elementwise import output_shape as elementwise_shape
        return elementwise_shape(node, graph)
    if (domain, op_type) == ("clglow", "ChannelShuffle"):  # its rule lives with the pass that makes it
        from .passes.fuse_channel_shuffle import output_shape as shuffle_shape
        return shuffle_shape(node, graph)
    if domain == contrib_ops.DOMAIN:  # onnx has no schemas for onnxruntime's contrib ops
        return contrib_ops.infer(node, graph)
    proto_node = node
    if (domain, op_type) in _FUSED_AS:
        op_type, present = _FUSED_AS[(domain, op_type)]
        domain = ""
        inputs, keep = present(node)
        proto_node = Node(op_type, node.name, inputs, node.outputs, keep)
    if "qclamp" in proto_node.attrs:  # passes/qdq.py's quantized clamp: no attribute of onnx's schema
        proto_node = Node(op_type, node.name, list(proto_node.inputs), list(proto_node.outputs),
                          {k: v for k, v in proto_node.attrs.items() if k != "qclamp"}, domain)
    if (domain, op_type) == ("", "STFT") and "onesided" not in proto_node.attrs:  # onnx infers 0; schema, reference: 1
        proto_node = Node(op_type, node.name, list(proto_node.inputs), list(proto_node.outputs),
                          {**proto_node.attrs, "onesided": 1}, domain)
    if (domain, op_type) == ("", "MaxUnpool"):  # onnx infers only the rank from a constant output_shape
        known = _max_unpool_shape(node, graph)
        if known:
            return known
    try:
        schema = defs.get_schema(op_type, graph.opset(domain), domain)
    except Exception:
        return {}
    types, data = {}, {}
    # half storage next to float32 (passes/precision.py) is judged as the float32 the model computes in
    mixed = _half_storage_inputs(proto_node, graph, schema)
    for name in proto_node.inputs:
        if not name:
            continue
        v = graph.values.get(name)
        if v is None:
            continue
        tp = _type_proto(Value(v.name, np.dtype(np.float32), v.shape) if name in mixed and v.dtype == np.float16 else v)
        if tp is not None:
            types[name] = tp
        if v.const is not None and v.const.size <= _SMALL_CONST and v.const.dtype != object:
            data[name] = numpy_helper.from_array(np.array(v.const, order="C"), name)
    opsets = [helper.make_opsetid(d, ver) for d, ver in graph.opsets.items()]
    try:
        out = shape_inference.infer_node_outputs(schema, proto_node.to_proto(), types, data, None, opsets,
                                                 max(graph.ir_version, 3))
    except Exception as e:
        raise InvalidModel(f"shape inference failed: {str(e).strip().splitlines()[-1]}", node=node.name) from None
    found = {k: type_to_dtype_shape(tp) for k, tp in out.items()}
    if (domain, op_type) in _SHAPED_AS_INPUT and proto_node.inputs and proto_node.outputs:
        y, v = proto_node.outputs[0], graph.values.get(proto_node.inputs[0])
        if v is not None and found.get(y, (None, None))[1] is None:  # onnx infers the shape only through the body
            found[y] = (v.dtype, v.shape)
    return found


# Ops whose one output has input 0's type and shape, for which onnx's node-level inference says
# nothing at some opsets (GroupNormalization-21 has no inference function of its own)
_SHAPED_AS_INPUT = {("", "GroupNormalization"), ("", "MeanVarianceNormalization")}


# Node inputs whose values decide output shapes (or kernel parameters fixed at plan time). When a
# graph input feeds one of these, its run-time value is part of the plan key and the plan is
# specialised with it as a constant (as onnxruntime keeps shape tensors on the CPU; runtime/engine.py);
# when a node of the stage computes it, the node waits for the next stage, where the value is read
# back and is such a constant (specialize, `_waits_for_parameters`).
SHAPE_INPUTS: dict = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "OneHot": (1, 2), "TopK": (1,), "If": (0,), "Loop": (0, 1), "Resize": (1, 2, 3), "Upsample": (1,), "CenterCropPad": (1, 2),
    "Trilu": (1,), "CumSum": (1,), "CumProd": (1,), "Dropout": (1, 2), "Col2Im": (1, 2, 3),
    "AffineGrid": (1,), "MaxUnpool": (2,), "BlackmanWindow": (0,), "HammingWindow": (0,), "HannWindow": (0,),
    "DFT": (1, 2), "STFT": (1, 3), "MelWeightMatrix": (0, 1, 2, 3, 4),
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
}
SHAPE_INPUT_MAX_ELEMENTS = 64


_HALF_OR_FLOAT = (np.dtype(np.float16), np.dtype(np.float32))


def _half_storage_inputs(node: Node, graph: Graph, schema: defs.OpSchema) -> set:
    """The float16 inputs of `node` that share a type constraint with a float32 input: half storage
    of some (passes/precision.py), since an ONNX model cannot mix the two in one constraint. Inputs
    of different constraints may differ legitimately (CastLike's target_type, Pow's exponent, an
    unrolled float16 Scan's CastLike back to its float16 slice): those keep their float16."""
    formals = list(schema.inputs)
    groups: dict = {}
    for k, name in enumerate(node.inputs):
        v = graph.values.get(name) if name else None
        if v is None or v.dtype is None or v.dtype == object or not formals:
            continue
        formal = formals[min(k, len(formals) - 1)]
        groups.setdefault(formal.type_str, []).append((name, np.dtype(v.dtype)))
    half = set()
    for members in groups.values():
        if {np.dtype(np.float16), np.dtype(np.float32)} <= {dt for _, dt in members}:
            half.update(name for name, dt in members if dt == np.float16)
    return half


def _max_unpool_shape(node: Node, graph: Graph) -> dict:
    """MaxUnpool's output is its output_shape input when that is a constant (plan constants
    included): {} otherwise, for onnx's rule."""
    shape = graph.const(node.input(2)) if len(node.inputs) > 2 and node.input(2) else None
    x = graph.values.get(node.input(0))
    if shape is None or x is None or shape.ndim != 1 or shape.dtype.kind not in "iu" or (shape < 0).any():
        return {}
    return {node.outputs[0]: (x.dtype, tuple(int(d) for d in shape))}


def _static_shape(graph: Graph, name: str) -> Optional[tuple]:
    v = graph.values.get(name)
    return tuple(v.shape) if v is not None and v.is_static else None


def check_node(node: Node, graph: Graph) -> None:
    """Checks onnx's shape inference does not make: constant Gather indices in range, Reshape
    targets with the input's element count. Raises InvalidModel naming the node and tensor."""
    if node.domain not in ("", "ai.onnx"):
        return
    if node.op_type == "Gather":
        shape, idx = _static_shape(graph, node.input(0)), graph.const(node.input(1))
        if shape is None or idx is None or idx.size == 0 or idx.dtype.kind not in "iu" or not shape:
            return
        axis = int(node.attr("axis", 0))
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis < len(shape):
            raise InvalidModel(f"Gather axis {node.attr('axis', 0)} is out of range for rank {len(shape)}",
                               node=node.name)
        dim = int(shape[axis])
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -dim or hi >= dim:
            bad = lo if lo < -dim else hi
            raise InvalidModel(f"Gather index {bad} is out of range [{-dim}, {dim - 1}] for axis {axis} of "
                               f"{node.input(0)!r} (shape {list(shape)})", node=node.name, tensor=node.input(1))
    elif node.op_type == "Reshape":
        shape, target = _static_shape(graph, node.input(0)), graph.const(node.input(1))
        if shape is None or target is None or target.dtype.kind not in "iu":
            return
        dims = [int(d) for d in np.asarray(target).reshape(-1)]
        allowzero = int(node.attr("allowzero", 0) or 0)
        total = int(np.prod(shape, dtype=object))
        known, infer = 1, 0
        for i, d in enumerate(dims):
            if d == -1:
                infer += 1
            elif d < -1:
                infer = 2  # reported below
            elif d == 0 and not allowzero:
                if i >= len(shape):
                    raise InvalidModel(f"Reshape target {dims} copies dimension {i} (0) of a rank-{len(shape)} "
                                       f"input", node=node.name, tensor=node.input(1))
                known *= int(shape[i])
            else:
                known *= d
        ok = infer <= 1 and (total == known if infer == 0 else (total % known == 0 if known else total == 0))
        if allowzero and infer and 0 in dims:
            ok = False
        if not ok:
            raise InvalidModel(f"cannot reshape {node.input(0)!r} of shape {list(shape)} ({total} elements) to "
                               f"{dims}", node=node.name, tensor=node.input(1))


def fold_shape_op(node: Node, graph: Graph) -> Optional[np.ndarray]:
    """Shape / Size of a value whose shape is known, as a constant; None otherwise."""
    if node.domain not in ("", "ai.onnx"):
        return None
    v = graph.values.get(node.input(0))
    if v is None or not v.is_static:
        return None
    if node.op_type == "Shape":
        shape = np.array(v.shape, dtype=np.int64)
        r = len(shape)
        start = node.attr("start", 0)
        end = node.attr("end", r)
        start = max(0, min(r, start + r if start < 0 else start))
        end = max(0, min(r, end + r if end < 0 else end))
        return shape[start:end]
    if node.op_type == "Size":
        return np.array(int(np.prod(v.shape, dtype=np.int64)), dtype=np.int64)
    return None




def inlinable_if(node: Node) -> bool:
    """An If with two graph branches: inlined once its condition is known (inline_if), so it
    never needs onnx.reference. Subgraphs inside the branch taken (an If in an If, as onnx's
    expanded AffineGrid has) come along renamed and are staged in their turn."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
        return False
    branches = [node.attrs.get("then_branch"), node.attrs.get("else_branch")]
    return all(isinstance(b, onnx.GraphProto) for b in branches)


def inline_if(node: Node, g: Graph) -> Optional[list]:
    """The nodes of the branch an If with a constant condition takes, renamed into the outer
    graph (`g` gets the branch's constants; nested subgraphs' reads of the branch's values
    renamed too), ending in Identity nodes that write the If's outputs; None when the condition
    is not known. Why: torchvision's detection heads guard NonMaxSuppression with
    `If(numel == 0)`, which staging makes constant; inlined, the branch's nodes run on the
    device instead of onnx.reference."""
    if not inlinable_if(node):
        return None
    cond = g.const(node.input(0))
    if cond is None or cond.size != 1:
        return None
    branch = node.attrs.get("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    nodes, rename = inline_body(branch, g, f"{node.name}/", {})
    for k, (vi, out) in enumerate(zip(branch.output, node.outputs)):
        if out:
            nodes.append(Node("Identity", f"{node.name}/output_{k}", [rename(vi.name)], [out]))
    return nodes


def specialize(graph: Graph, input_types: Mapping[str, tuple]) -> tuple[Graph, Optional[int]]:
    """Copy of `graph` with concrete shapes for `input_types` {name: (dtype, shape)}.

    Returns (graph, stop): stop is None when everything is known, else the number of nodes
    that can be planned now: graph.nodes[:stop] are every node that reads no value whose shape
    depends on data (some of them produce such values), the rest follow in their order. One
    stage thus runs every independent data-dependent node at once (ssdlite320's 90 per-class
    NonZero chains: a handful of stages, not 180).
    """
    g = graph.copy()
    for name, (dtype, shape) in input_types.items():
        v = g.values.get(name)
        if v is None:
            raise InvalidArgument("is not an input of the model", tensor=name)
        g.values[name] = Value(name, np.dtype(dtype), tuple(int(d) for d in shape), v.const)
    keep: list[Node] = []
    deferred: list[Node] = []  # nodes reading a value whose shape depends on data: the next stage's
    unknown: set = set()
    pending = list(g.nodes)
    idx = 0
    while idx < len(pending):
        node = pending[idx]
        idx += 1
        if unknown and any(i in unknown for i in _reads(node)):
            deferred.append(node)
            unknown.update(o for o in node.outputs if o)
            continue
        inlined = inline_if(node, g)
        if inlined is not None:  # the branch taken, in place of the If: planned like any nodes
            pending[idx:idx] = inlined
            continue
        if inlinable_if(node):  # its condition comes from this stage: inlined in the next, where it is a constant
            deferred.append(node)
            unknown.update(o for o in node.outputs if o)
            continue
        if node.op_type == "Loop":  # passes/unroll_loop.py: one iteration in its place, or wait, or the host
            unrolled = unroll_loop(node, g)
            if unrolled is not None:
                pending[idx:idx] = unrolled
                continue
            if loop_waits(node, g):
                deferred.append(node)
                unknown.update(o for o in node.outputs if o)
                continue
            node = host_loop(node, g)
        if node.op_type == "Scan":  # every step in its place when its length is known, else the host
            unrolled = unroll_scan(node, g)
            if unrolled is not None:
                pending[idx:idx] = unrolled
                continue
        folded = fold_shape_op(node, g)
        outs = [folded] if folded is not None else fold_node(node, g)
        if outs is not None:  # known now: a constant from here on (graph outputs are returned as such)
            for name, arr in zip([o for o in node.outputs if o], outs):
                arr = np.asarray(arr)
                g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
            continue
        check_node(node, g)
        known = _infer_outputs(node, g)
        if _waits_for_parameters(node, g, known):  # planned in the next stage, its parameters constants there
            deferred.append(node)
            unknown.update(o for o in node.outputs if o)
            continue
        if not known:
            unknown.update(o for o in node.outputs if o)
        keep.append(node)
    keep = flatten_scan_concats(keep, g)
    g.nodes = keep + deferred
    return g, (len(keep) if unknown else None)


# Ops whose kernels take these inputs as plan-time constants (lower/common.plan_constants): a
# computed one always waits for the next stage, even where the output shape is known otherwise
_CONSTANT_PARAMETERS = ("Pad", "Slice", "Resize")


def _waits_for_parameters(node: Node, g: Graph, shapes_known: bool) -> bool:
    """True when a node reads its shape-deciding inputs (SHAPE_INPUTS) as small values computed
    in this stage, and its output shapes are not known without them (or its kernel takes them as
    constants): a Pad's pads, a Slice's starts, a Range's limit made by other nodes (onnx's
    expanded Attention functions pad and slice by amounts computed from the inputs). The next
    stage reads them back as constants (engine `_next_stage`) and plans the node on the device,
    where it would otherwise run on the host. Not TopK, whose outputs are sized on the device
    (lower/select.py), nor If and Loop, which staging handles above (a Loop left to the host
    continues its iterations there)."""
    if node.domain not in ("", "ai.onnx") or node.op_type in ("TopK", "If", "Loop"):
        return False
    if shapes_known and node.op_type not in _CONSTANT_PARAMETERS:
        return False
    positions = [node.input(i) for i in SHAPE_INPUTS.get(node.op_type, ()) if node.input(i)]
    computed = [name for name in positions if g.const(name) is None]
    return bool(computed) and all(small_parameter(g, name) for name in computed)


def small_parameter(graph: Graph, name: str) -> bool:
    """A value of static shape, at most SHAPE_INPUT_MAX_ELEMENTS numbers: what staging reads back
    to the host to make a constant of the next stage (engine `_next_stage`)."""
    v = graph.values.get(name)
    return (v is not None and v.is_static and v.dtype is not None and np.dtype(v.dtype).kind in "biuf"
            and int(np.prod(v.shape, dtype=np.int64)) <= SHAPE_INPUT_MAX_ELEMENTS)


def _reads(node: Node) -> list:
    """The values a node reads: its inputs and what its subgraphs (If/Loop/Scan) read outside."""
    names = [i for i in node.inputs if i]
    if any(isinstance(v, onnx.GraphProto) or (isinstance(v, list) and v and isinstance(v[0], onnx.GraphProto))
           for v in node.attrs.values()):
        from .runtime.host import outer_scope_names

        names += outer_scope_names(node)
    return names


def _infer_outputs(node: Node, g: Graph) -> bool:
    """Set the node's output values from shape inference; False when some shape is not known."""
    inferred = infer_node(node, g)
    complete = True
    for o in node.outputs:
        if not o:
            continue
        dtype, shape = inferred.get(o, (None, None))
        old = g.values.get(o) or Value(o)
        if dtype in _HALF_OR_FLOAT and old.dtype in _HALF_OR_FLOAT:  # the storage passes/precision.py chose
            dtype = old.dtype
        dtype = dtype if dtype is not None else old.dtype
        if shape is None or any(not isinstance(d, int) for d in shape) or dtype is None:
            complete = False
        elif any(d < 0 for d in shape):  # values read at run time (a computed Pad, Slice, Range) made it so
            raise InvalidArgument(f"node {node.name!r} ({node.op_type}) would produce shape {tuple(shape)} "
                                  f"from this run's values", tensor=o)
        g.values[o] = Value(o, dtype, shape, None)
    return complete
