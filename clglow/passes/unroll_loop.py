"""Loop on the device: unrolled by staging (shapes.specialize), one iteration at a time.

Why not a pass over the whole graph: a Loop's trip count and condition are often computed from
data (torchvision's post-processing, onnx's expanded Range), so they are only known once the
stage that makes them has run. Staging meets a Loop whose trip count and condition are constants
(engine.SHAPE_INPUTS makes them so in the next stage) and puts in its place:

- the body's nodes for iteration i, renamed `{loop}#iter{i}/...` (iteration number and condition
  as constants, loop-carried values read from the Loop's inputs, outer-scope reads unchanged),
- one Unsqueeze per scan output (that iteration's slice, [1, ...]),
- a continuation Loop `{loop}#iter{i+1}` (trip count - 1, the body's condition and carried
  outputs as its inputs) writing the Loop's carried outputs, and one Concat per scan output
  (this iteration's slice, the continuation's scan output).

The continuation is met again in the same stage when its condition folds to a constant (a
counted loop: every iteration in one stage), else in the next. When the loop ends it becomes
Identity nodes (and empty scan tails). A continuation is a valid ONNX Loop, so one that passes
LOOP_MAX_UNROLL iterations, or a loop that cannot be unrolled (sequence or optional values,
neither trip count nor condition), stays on the host (onnx.reference) and `loop_refusal` says why
(placement reports it).
"""
from __future__ import annotations

import re
from typing import Callable, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..frontend.onnx_model import attribute_value, constant_node_value
from ..ir import Graph, Node, Value

# Iterations unrolled per Loop at most: each one adds its body's nodes to the plan (planning and
# launch cost grow with it); a longer loop runs on the host, where one call runs every iteration.
LOOP_MAX_UNROLL = 64

_ITER = re.compile(r"^(.*)#iter(\d+)$")
_SCAN_CONCAT = re.compile(r"#iter\d+/#concat\d+$")  # unroll_loop's Concat of one scan output


def _is_loop(node: Node) -> bool:
    return node.op_type == "Loop" and node.domain in ("", "ai.onnx")


def _iteration(node: Node) -> tuple:
    """(the original Loop's name, the index of the iteration this node starts at)."""
    m = _ITER.match(node.name)
    return (m.group(1), int(m.group(2))) if m else (node.name, 0)


def _tensor_typed(vi: onnx.ValueInfoProto) -> bool:
    return not vi.type.HasField("sequence_type") and not vi.type.HasField("optional_type") and \
        not vi.type.HasField("map_type")


def _structural_refusal(node: Node) -> Optional[str]:
    body = node.attrs.get("body")
    if not isinstance(body, onnx.GraphProto):
        return "a Loop without a body graph runs on the host"
    carried = len(node.inputs) - 2
    if len(body.input) != carried + 2 or len(body.output) < carried + 1:
        return "a Loop whose body's inputs and outputs do not match its own runs on the host"
    if not all(_tensor_typed(vi) for vi in list(body.input) + list(body.output)):
        return "a Loop carrying sequence or optional values runs on the host"
    if not node.input(0) and not node.input(1):
        return "a Loop with neither trip count nor condition runs on the host"
    return None


def _known(g: Graph, name: str) -> Optional[np.ndarray]:
    """The constant behind an optional input ("" reads as known: absent)."""
    if not name:
        return np.array(True)
    c = g.const(name)
    return None if c is None or c.size != 1 else c


def loop_refusal(node: Node, g: Graph) -> Optional[str]:
    """Why this Loop runs on the host (None: staging unrolls it, now or once its trip count and
    condition are known)."""
    why = _structural_refusal(node)
    if why is not None:
        return why
    _, i = _iteration(node)
    if i >= LOOP_MAX_UNROLL:
        return f"a Loop running past {LOOP_MAX_UNROLL} unrolled iterations runs the rest on the host"
    m = _known(g, node.input(0)) if node.input(0) else None
    if m is not None and i + int(m.reshape(-1)[0]) > LOOP_MAX_UNROLL:
        return f"a Loop of {i + int(m.reshape(-1)[0])} iterations (more than {LOOP_MAX_UNROLL}) runs on the host"
    n_scan = len(node.attrs["body"].output) - (len(node.inputs) - 1)
    if i == 0 and n_scan and _ends(node, g):
        return "a Loop of no iteration cannot size its scan outputs: it runs on the host"
    return None


def loop_waits(node: Node, g: Graph) -> bool:
    """A Loop staging unrolls once its trip count and condition are constants (the next stage)."""
    if not _is_loop(node) or loop_refusal(node, g) is not None:
        return False
    return _known(g, node.input(0)) is None or _known(g, node.input(1)) is None


def _ends(node: Node, g: Graph) -> bool:
    m, c = _known(g, node.input(0)), _known(g, node.input(1))
    if m is None or c is None:
        return False
    return (bool(node.input(0)) and int(m.reshape(-1)[0]) <= 0) or (bool(node.input(1)) and
                                                                     not bool(c.reshape(-1)[0]))


def _const(g: Graph, name: str, arr: np.ndarray) -> str:
    g.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
    return name


def _rename_subgraph(sg: onnx.GraphProto, rename: Callable[[str], str]) -> onnx.GraphProto:
    """A copy of a nested subgraph whose reads of the enclosing scope are renamed."""
    out = onnx.GraphProto()
    out.CopyFrom(sg)
    bound = {i.name for i in out.input} | {t.name for t in out.initializer}
    for n in out.node:
        for k, name in enumerate(n.input):
            if name and name not in bound:
                n.input[k] = rename(name)
        for a in n.attribute:
            inner = lambda s, b=frozenset(bound): s if s in b else rename(s)  # noqa: E731
            if a.type == onnx.AttributeProto.GRAPH:
                a.g.CopyFrom(_rename_subgraph(a.g, inner))
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg2 in a.graphs:
                    sg2.CopyFrom(_rename_subgraph(sg2, inner))
        bound |= {o for o in n.output if o}
    return out


def _attrs(n: onnx.NodeProto, rename: Callable[[str], str]) -> dict:
    attrs = {}
    for a in n.attribute:
        v = attribute_value(a)
        if isinstance(v, onnx.GraphProto):
            v = _rename_subgraph(v, rename)
        elif isinstance(v, list) and v and isinstance(v[0], onnx.GraphProto):
            v = [_rename_subgraph(s, rename) for s in v]
        attrs[a.name] = v
    return attrs


def _body_nodes(node: Node, g: Graph, prefix: str, i: int) -> tuple:
    """(the Loop body's nodes for iteration i, renamed; the renaming of body names)."""
    body: onnx.GraphProto = node.attrs["body"]
    bind = {body.input[0].name: _const(g, f"{prefix}#iter_num", np.array(i, dtype=np.int64)),
            body.input[1].name: node.input(1) or _const(g, f"{prefix}#cond", np.array(True))}
    bind.update({vi.name: node.input(k + 2) for k, vi in enumerate(body.input[2:])})
    return inline_body(body, g, prefix, bind)


def inline_body(body: onnx.GraphProto, g: Graph, prefix: str, bind: dict) -> tuple:
    """(`body`'s nodes renamed into `g` with `prefix`, its inputs read as `bind` says; the
    renaming of body names). `g` gets the body's constants."""
    local = {t.name for t in body.initializer} | {o for n in body.node for o in n.output if o}

    def rename(name: str) -> str:
        return bind[name] if name in bind else (prefix + name if name in local else name)

    for t in body.initializer:
        _const(g, rename(t.name), numpy_helper.to_array(t))
    nodes = []
    for k, n in enumerate(body.node):
        outs = [rename(o) if o else "" for o in n.output]
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            _const(g, outs[0], constant_node_value(n))
            continue
        ins = [rename(x) if x else "" for x in n.input]
        for v in ins + outs:
            if v and v not in g.values:
                g.values[v] = Value(v)
        nodes.append(Node(n.op_type, prefix + (n.name or f"{n.op_type}_{k}"), ins, outs, _attrs(n, rename),
                          n.domain))
    return nodes, rename


def _unsqueeze0(g: Graph, x: str, y: str, name: str, axis: int = 0) -> Node:
    g.values.setdefault(y, Value(y))
    if g.opset("") >= 13:
        axes = _const(g, f"{name}#axes", np.array([axis], dtype=np.int64))
        return Node("Unsqueeze", name, [x, axes], [y])
    return Node("Unsqueeze", name, [x], [y], {"axes": [axis]})


def _finish(node: Node, g: Graph, base: str, i: int) -> Optional[list]:
    """The nodes that end a loop at iteration i: carried values passed through, empty scan tails
    (shaped as the previous iteration's slice); None when a slice's shape is not known."""
    n_carried = len(node.inputs) - 2
    nodes = [Node("Identity", f"{node.name}#out{k}", [node.input(k + 2)], [out])
             for k, out in enumerate(node.outputs[:n_carried]) if out]
    for k, out in enumerate(node.outputs[n_carried:]):
        if not out:
            continue
        part = g.values.get(f"{base}#iter{i - 1}#part{k}")
        if part is None or part.shape is None or part.dtype is None or \
                not all(isinstance(d, int) for d in part.shape):
            return None
        _const(g, out, np.zeros((0,) + tuple(part.shape[1:]), dtype=part.dtype))
    return nodes


def unroll_loop(node: Node, g: Graph) -> Optional[list]:
    """The nodes that replace a Loop with a constant trip count and condition (see the module
    docstring): one iteration and the continuation, or the loop's end; None when the Loop is
    not one staging unrolls now (`loop_refusal`, `loop_waits`). `g` gets the new values."""
    if not _is_loop(node) or loop_refusal(node, g) is not None or loop_waits(node, g):
        return None
    base, i = _iteration(node)
    if _ends(node, g):
        return _finish(node, g, base, i)
    prefix = f"{base}#iter{i}/"
    nodes, rename = _body_nodes(node, g, prefix, i)
    body: onnx.GraphProto = node.attrs["body"]
    n_carried = len(node.inputs) - 2
    outs = [rename(vi.name) for vi in body.output]
    nxt = f"{base}#iter{i + 1}"
    m = node.input(0)
    if m:
        m = _const(g, f"{nxt}#M", np.array(int(g.const(m).reshape(-1)[0]) - 1, dtype=np.int64))
    cond = outs[0] if node.input(1) else ""
    scan_tails = []
    for k, out in enumerate(node.outputs[n_carried:]):
        part = f"{base}#iter{i}#part{k}"
        nodes.append(_unsqueeze0(g, outs[1 + n_carried + k], part, f"{prefix}#unsqueeze{k}"))
        tail = f"{nxt}#scan{k}" if out else ""
        if out:
            g.values.setdefault(tail, Value(tail))
        scan_tails.append((part, tail, out))
    loop_outs = list(node.outputs[:n_carried]) + [t for _, t, _ in scan_tails]
    nodes.append(Node("Loop", nxt, [m, cond] + outs[1:1 + n_carried], loop_outs, dict(node.attrs), node.domain))
    nodes += [Node("Concat", f"{prefix}#concat{k}", [part, tail], [out], {"axis": 0})
              for k, (part, tail, out) in enumerate(scan_tails) if out]
    return nodes


def host_loop(node: Node, g: Graph) -> Node:
    """A Loop made ready for the host (onnx.reference): an absent condition given as True (the
    reference runs no iteration without one, against the spec), and a continuation's body shown
    the iteration numbers of the original loop (the host counts from 0)."""
    if not _is_loop(node) or not isinstance(node.attrs.get("body"), onnx.GraphProto):
        return node
    _, i = _iteration(node)
    inputs = list(node.inputs)
    if len(inputs) > 1 and not inputs[1]:
        inputs[1] = _const(g, f"{node.name}#true", np.array(True))
    body = node.attrs["body"]
    if i:
        body = onnx.GraphProto()
        body.CopyFrom(node.attrs["body"])
        it = body.input[0].name
        local = f"{it}#from0"
        body.input[0].name = local  # the host's count; `it` becomes it + i for every reader
        off = numpy_helper.from_array(np.array(i, dtype=np.int64), f"{it}#offset")
        body.initializer.append(off)
        body.node.insert(0, helper.make_node("Add", [local, off.name], [it]))
    if inputs == node.inputs and body is node.attrs["body"]:
        return node
    return Node("Loop", node.name, inputs, list(node.outputs), {**node.attrs, "body": body}, node.domain)



def flatten_scan_concats(nodes: list, g: Graph) -> list:
    """`nodes` with each unrolled Loop's chain of scan Concats (`{loop}#iter{i}/#concat{k}`, one per
    iteration, each reading the next one's result) made one Concat of every slice, and its empty
    tail dropped: one launch per scan output, not one per iteration. Only chains planned in one
    stage are joined (a tail made in a later stage is not in `nodes`)."""
    made = {n.outputs[0]: n for n in nodes if n.op_type == "Concat" and _SCAN_CONCAT.search(n.name)}
    readers: dict = {}
    for n in nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    keep_out = set(g.outputs)
    merged: set = set()
    for n in nodes:  # inner Concats come first: each outer one takes its inner one's inputs
        if n.outputs[0] not in made:
            continue
        ins = []
        for i in n.inputs:
            inner = made.get(i)
            if inner is not None and readers.get(i) == 1 and i not in keep_out:
                ins += inner.inputs
                merged.add(id(inner))
            else:
                ins.append(i)
        ins = [i for i in ins if not (g.const(i) is not None and g.const(i).size == 0)] or ins[:1]
        n.inputs = ins
    return [n for n in nodes if id(n) not in merged]


# --- Scan (opset 9 on): its length is the scan inputs' static extent, so it unrolls at once -------------
def _scan_length(node: Node, g: Graph) -> Optional[int]:
    """The number of iterations (the scan inputs' extent along their axes); None when a shape is
    not known."""
    m = int(node.attrs.get("num_scan_inputs", 0))
    axes = list(node.attrs.get("scan_input_axes") or [0] * m)
    lengths = set()
    for name, ax in zip(node.inputs[len(node.inputs) - m:], axes):
        v = g.values.get(name)
        if v is None or v.shape is None or not all(isinstance(d, int) for d in v.shape):
            return None
        lengths.add(int(v.shape[ax + len(v.shape) if ax < 0 else ax]))
    return lengths.pop() if len(lengths) == 1 else None


def scan_refusal(node: Node, g: Graph) -> Optional[str]:
    """Why this Scan runs on the host (None: staging unrolls it once its inputs' shapes are known)."""
    body = node.attrs.get("body")
    if g.opset("") < 9:
        return "a Scan of opset 8 (batched, with sequence lengths) runs on the host"
    if not isinstance(body, onnx.GraphProto) or not all(_tensor_typed(vi) for vi in list(body.input) +
                                                        list(body.output)):
        return "a Scan carrying sequence or optional values runs on the host"
    m = int(node.attrs.get("num_scan_inputs", 0))
    if m < 1 or len(body.input) != len(node.inputs) or len(body.output) != len(node.outputs):
        return "a Scan whose body's inputs and outputs do not match its own runs on the host"
    n = _scan_length(node, g)
    if n is not None and n > LOOP_MAX_UNROLL:
        return f"a Scan of {n} steps (more than {LOOP_MAX_UNROLL}) runs on the host"
    if n == 0 and len(node.outputs) > len(node.inputs) - m:
        return "a Scan of no step cannot size its scan outputs: it runs on the host"
    return None


def unroll_scan(node: Node, g: Graph) -> Optional[list]:
    """Every step of a Scan whose length is known, in its place: each step's scan input slices
    (Gather at the step's index, reversed directions counted from the end), the body renamed
    `{scan}#step{t}/...`, the states passed on, each scan output one Concat of the steps' slices
    (Unsqueeze at its axis, in its direction). None when staging does not unroll it."""
    if node.op_type != "Scan" or node.domain not in ("", "ai.onnx") or scan_refusal(node, g) is not None:
        return None
    n = _scan_length(node, g)
    if n is None:
        return None
    body: onnx.GraphProto = node.attrs["body"]
    m = int(node.attrs["num_scan_inputs"])
    n_state = len(node.inputs) - m
    k_out = len(node.outputs) - n_state
    in_axes = list(node.attrs.get("scan_input_axes") or [0] * m)
    in_dirs = list(node.attrs.get("scan_input_directions") or [0] * m)
    out_axes = list(node.attrs.get("scan_output_axes") or [0] * k_out)
    out_dirs = list(node.attrs.get("scan_output_directions") or [0] * k_out)
    state = list(node.inputs[:n_state])
    nodes: list = []
    slices: list = [[] for _ in range(k_out)]
    for t in range(n):
        prefix = f"{node.name}#step{t}/"
        bind = dict(zip([vi.name for vi in body.input[:n_state]], state))
        for j, (x, ax, rev) in enumerate(zip(node.inputs[n_state:], in_axes, in_dirs)):
            sl = f"{prefix}#in{j}"
            idx = _const(g, f"{sl}#index", np.array(n - 1 - t if rev else t, dtype=np.int64))
            g.values.setdefault(sl, Value(sl))
            nodes.append(Node("Gather", f"{prefix}#gather{j}", [x, idx], [sl], {"axis": int(ax)}))
            bind[body.input[n_state + j].name] = sl
        step, rename = inline_body(body, g, prefix, bind)
        nodes += step
        outs = [rename(vi.name) for vi in body.output]
        state = outs[:n_state]
        for j in range(k_out):
            part = f"{prefix}#out{j}"
            nodes.append(_unsqueeze0(g, outs[n_state + j], part, f"{prefix}#unsqueeze{j}", int(out_axes[j])))
            slices[j].append(part)
    nodes += [Node("Identity", f"{node.name}#state{k}", [s], [o])
              for k, (s, o) in enumerate(zip(state, node.outputs)) if o]
    for j, out in enumerate(node.outputs[n_state:]):
        if out:
            parts = slices[j][::-1] if out_dirs[j] else slices[j]
            nodes.append(Node("Concat", f"{node.name}#concat{j}", parts, [out], {"axis": int(out_axes[j])}))
    return nodes
