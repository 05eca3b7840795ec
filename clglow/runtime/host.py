"""Host fallback: run one node with onnx's reference implementation.

Used for operators no OpenCL kernel covers (so the model still runs) and for
constant folding at plan time. Each node gets a one-node model built once; the
evaluator is reused for every run.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import helper

from ..dtypes import numpy_to_onnx
from ..errors import InvalidModel, UnsupportedOperator, UnsupportedNode
from ..ir import Graph, Node
from ..ir.graph import outer_scope_names  # noqa: F401  (re-exported: planning, lowered, engine)
from .nms import non_max_suppression

log = logging.getLogger(__name__)


def _gather_elements(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    """GatherElements by numpy's take_along_axis (negative indices wrap once, as ONNX says).

    onnx.reference's own (np.choose, then a per-row fallback) returns one element per row when
    the indices are shorter than the data along the axis and the axis has more entries than
    np.choose takes choices: BERT's position ids ([1, 512] data, [1, L] indices) fail to fold."""
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        raise ValueError(f"axis {axis} is out of range for rank {data.ndim}")
    if indices.ndim != data.ndim:
        raise ValueError(f"indices of rank {indices.ndim} for data of rank {data.ndim}")
    idx = indices.astype(np.int64)
    dim = data.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise ValueError(f"index out of range [{-dim}, {dim - 1}] along axis {axis}")
    idx = np.where(idx < 0, idx + dim, idx)
    for i, (d, n) in enumerate(zip(data.shape, idx.shape)):
        if i != axis and n > d:
            raise ValueError(f"indices dimension {i} ({n}) is larger than the data's ({d})")
    # the data cut to the indices' extent on every other axis (ONNX allows smaller indices)
    cut = data[tuple(slice(None) if i == axis else slice(0, n) for i, n in enumerate(idx.shape))]
    return np.take_along_axis(cut, idx, axis=axis)


def _host_ops() -> list:
    """onnx.reference kernels replaced where its own is wrong or far too slow (see each one;
    NonMaxSuppression: runtime/nms.py)."""
    from onnx.reference.op_run import OpRun

    class GatherElements(OpRun):
        op_domain = ""

        def _run(self, data, indices, axis=None):  # noqa: D401 - onnx.reference's signature
            return (_gather_elements(np.asarray(data), np.asarray(indices), int(axis or 0)),)

    class NonMaxSuppression(OpRun):
        op_domain = ""

        def _run(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,  # noqa: D401
                 score_threshold=None, center_point_box=None):
            return (non_max_suppression(np.asarray(boxes), np.asarray(scores), max_output_boxes_per_class,
                                        iou_threshold, score_threshold, int(center_point_box or 0)),)

    from .contrib_host import reference_ops

    return [GatherElements, NonMaxSuppression, *reference_ops()]  # + the com.microsoft references onnx.reference lacks


class HostKernel:
    """A node executed on the host by onnx.reference (with the replacements of _host_ops)."""

    def __init__(self, node: Node, graph: Graph):
        from onnx.reference import ReferenceEvaluator

        self.node = node
        self.outer = [n for n in outer_scope_names(node) if n not in node.inputs]
        proto = node.to_proto()
        inputs = []
        for name in [i for i in node.inputs if i] + self.outer:
            if any(vi.name == name for vi in inputs):
                continue
            v = graph.values.get(name)
            elem = numpy_to_onnx(v.dtype) if v is not None and v.dtype is not None and v.dtype != object else 0
            inputs.append(helper.make_tensor_value_info(name, elem, None))
        outputs = [helper.make_tensor_value_info(o, 0, None) for o in node.outputs if o]
        g = helper.make_graph([proto], f"host_{node.name}", inputs, outputs)
        opsets = [helper.make_opsetid(d, v) for d, v in graph.opsets.items()]
        model = helper.make_model(g, opset_imports=opsets, ir_version=max(graph.ir_version, 3))
        self.input_names = [vi.name for vi in inputs]
        self.output_names = [o for o in node.outputs if o]
        try:
            self.evaluator = ReferenceEvaluator(model, new_ops=_host_ops())
        except Exception as e:
            raise UnsupportedOperator([UnsupportedNode(node.name, node.op_type, node.domain,
                                                       graph.opset(node.domain),
                                                       f"no OpenCL kernel and no host implementation ({e})")]) from None

    def run(self, arrays: Sequence[Optional[np.ndarray]]) -> list:
        feeds = {name: a for name, a in zip(self.input_names, arrays)}
        try:
            outs = self.evaluator.run(None, feeds)
        except Exception as e:
            raise InvalidModel(f"host execution of {self.node.op_type} failed: {e}", node=self.node.name) from None
        return [np.asarray(o) if not isinstance(o, (list, np.ndarray)) else o for o in outs]


def host_supported(node: Node, opset: int) -> Optional[str]:
    """None if onnx.reference implements this op, else the reason."""
    from onnx.reference.ops import load_op

    from .contrib_host import has_reference

    if node.domain == "com.microsoft":
        return None if has_reference(node.op_type) else "no host reference for this com.microsoft operator"
    try:
        load_op(node.domain or "", node.op_type, opset)
        return None
    except Exception as e:
        return f"onnx.reference has no implementation: {e}"
