"""The zoo's check for detection models (tagged "detection" in the catalogue), used where the
whole model's detections differ from onnxruntime's.

Why a check of its own: with the zoo's random weights every anchor's class scores lie within
about 2% of 1/num_classes, so which boxes survive the score threshold, TopK and NMS is decided
by near-ties, and a one-ulp difference in Softmax (clglow's exp and onnxruntime's MLAS
polynomial round differently) reorders them: the whole model's detections differ from a few
dozen rows on, although both are right to within float rounding. An elementwise comparison
says MISMATCH; a blanket pass would hide real bugs. So the check is the one
tests/test_detection_models.py makes: the model is cut at its first Softmax, onnxruntime
computes the values the post-processing reads from before the cut (the head outputs and the
Softmax output itself), and clglow runs the post-processing (score thresholds, NonZero, TopK,
box decoding, NMS, the final gathers) from exactly those values; its detections must equal
onnxruntime's whole-model detections under the zoo's usual rule (integers exactly, floats
within TOLERANCE; in practice they are identical). The heads before the cut are the same
kernels every other zoo model checks elementwise. The note of the table's row names the check,
its result and how far the whole model's detections agree (the first differing row).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper


def _reads(node: onnx.NodeProto) -> List[str]:
    """The values `node` reads, its subgraphs' outer-scope reads included."""
    names = list(node.input)
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            inner = {o for n in a.g.node for o in n.output} | {i.name for i in a.g.input}
            names += [i for n in a.g.node for i in n.input if i not in inner]
    return [n for n in names if n]


def cut_at_softmax(model: onnx.ModelProto) -> Optional[Tuple[list, List[str]]]:
    """(the post-processing nodes: everything after the first Softmax, with the Constants
    before it; the values they read from before it, Softmax's output included), or None for a
    model without a Softmax."""
    nodes = list(model.graph.node)
    at = next((i for i, n in enumerate(nodes) if n.op_type == "Softmax"), None)
    if at is None:
        return None
    made_before = {o for n in nodes[:at] if n.op_type != "Constant" for o in n.output}
    rest = nodes[at + 1:]
    cut = sorted({i for n in rest for i in _reads(n) if i in made_before} | {nodes[at].output[0]})
    return [n for n in nodes[:at] if n.op_type == "Constant"] + rest, cut


def post_processing_model(model: onnx.ModelProto, keep: list, heads: dict) -> onnx.ModelProto:
    """The post-processing as a model of its own, fed the head values `heads` (name -> array)."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for n, v in heads.items()]
    g = helper.make_graph(keep, "post_processing", inputs, list(model.graph.output), list(model.graph.initializer))
    post = helper.make_model(g, opset_imports=list(model.opset_import))
    post.ir_version = model.ir_version
    return post


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """`model` also returning the values `names` (for onnxruntime to compute the heads)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    for name in names:
        m.graph.output.append(helper.make_tensor_value_info(name, types.get(name) or onnx.TensorProto.FLOAT, None))
    return m


def first_difference(ours: Sequence[np.ndarray], ref: Sequence[np.ndarray], tolerance: float) -> Optional[int]:
    """The first detection row where any output differs (integers at all, floats by more than
    `tolerance` of the output's largest magnitude); None: none does, rows past the shorter do."""
    n = min((min(len(a), len(b)) for a, b in zip(ours, ref)), default=0)
    bad = np.zeros(n, dtype=bool)
    for a, b in zip(ours, ref):
        a, b = np.asarray(a)[:n], np.asarray(b)[:n]
        if b.dtype.kind in "biu":
            d = a.astype(np.int64) != b.astype(np.int64)
        else:
            d = np.abs(a.astype(np.float64) - b) > tolerance * max(float(np.max(np.abs(b), initial=0.0)), 1e-30)
        bad |= d.reshape(n, -1).any(axis=1)
    if bad.any():
        return int(np.argmax(bad))
    return None if all(len(a) == len(b) for a, b in zip(ours, ref)) else n


def check(path: str, feeds: dict, ref: list, got: list, ort_session: Callable, clglow_session: Callable,
          compare: Callable, tolerance: float) -> Tuple[float, bool, str]:
    """(max relative error, ok, note) of a detection model by the module docstring's rule.
    `ref`/`got`: the whole model's outputs from onnxruntime and clglow; `ort_session(bytes)` and
    `clglow_session(bytes)` make sessions; `compare` is the zoo's elementwise rule, `tolerance` its
    float tolerance (for where the whole model's detections start to differ)."""
    model = onnx.load(path)
    split = cut_at_softmax(model)
    first = first_difference(got, ref, tolerance)
    whole = "whole model within tolerance" if first is None else \
        f"the whole model's first {first} of {len(ref[0])} detections agree, then near-tie scores reorder"
    if split is None:
        rel, ok, note = compare(got, ref)
        return rel, ok, f"detection check: no Softmax to cut at, elementwise ({note or 'ok'})"
    keep, cut = split
    outs = ort_session(with_outputs(model, cut).SerializeToString()).run(None, feeds)
    heads = dict(zip(cut, outs[len(model.graph.output):]))
    post = post_processing_model(model, keep, heads)
    mine = clglow_session(post.SerializeToString()).run(None, heads)
    rel, ok, note = compare(mine, ref)
    exact = all(np.array_equal(a, b) for a, b in zip(mine, ref))
    verdict = ("identical" if exact else f"within tolerance, max rel {rel:.1e}") if ok else f"MISMATCH: {note}"
    return rel, ok, (f"detection check (post-processing from onnxruntime's {len(cut)} head outputs, "
                     f"cut at the first Softmax): {verdict}; {whole}")
