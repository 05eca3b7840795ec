"""A small helper to build ONNX graphs with seeded weights (used by the model builders)."""
from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

logger = logging.getLogger(__name__)

Dim = int | str | None


class GraphBuilder:
    """Accumulates nodes, initializers and graph inputs/outputs, then emits a checked ModelProto.

    Example::

        g = GraphBuilder("tiny", opset=13, seed=0)
        x = g.input("x", TensorProto.FLOAT, [1, 4])
        w = g.const("w", g.rng.standard_normal((4, 2)).astype(np.float32))
        g.output(g.node("MatMul", [x, w], "y"), TensorProto.FLOAT, [1, 2])
        model = g.model()
    """

    def __init__(self, name: str, opset: int, seed: int = 0) -> None:
        latest = onnx.defs.onnx_opset_version()
        if not isinstance(opset, int) or not 7 <= opset <= latest:
            raise ValueError(f"opset must be an int in [7, {latest}], got {opset!r}")
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()
        self._counter = 0

    # -- naming -------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """Return a tensor/node name derived from ``base`` that is not used yet."""
        name = base
        while name in self._names:
            self._counter += 1
            name = f"{base}_{self._counter}"
        self._names.add(name)
        return name

    # -- graph pieces -------------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        """Declare a graph input."""
        self._names.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, name: str, elem_type: int, shape: Sequence[Dim] | None) -> str:
        """Declare an existing tensor as a graph output."""
        self.outputs.append(
            helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape))
        )
        return name

    def const(self, name: str, value: np.ndarray | Sequence[Any]) -> str:
        """Add an initializer; returns its (unique) name."""
        arr = np.asarray(value)
        name = self.fresh(name)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def i64(self, name: str, values: Sequence[int] | int) -> str:
        """Add an int64 initializer (1-D for a sequence, 0-D for a scalar)."""
        return self.const(name, np.asarray(values, dtype=np.int64))

    def f32(self, name: str, values: Sequence[float] | float | np.ndarray) -> str:
        """Add a float32 initializer."""
        return self.const(name, np.asarray(values, dtype=np.float32))

    def node(
        self,
        op: str,
        inputs: Sequence[str],
        out: str | None = None,
        n_out: int = 1,
        name: str | None = None,
        **attrs: Any,
    ) -> str:
        """Append a node with a single (first) output and return that output's name."""
        outs = self.node_multi(op, inputs, out, n_out, name, **attrs)
        return outs[0]

    def node_multi(
        self,
        op: str,
        inputs: Sequence[str],
        out: str | None = None,
        n_out: int = 1,
        name: str | None = None,
        **attrs: Any,
    ) -> list[str]:
        """Append a node and return the names of all its outputs."""
        base = out or (name or op.lower())
        outs = [self.fresh(base if i == 0 else f"{base}_o{i}") for i in range(n_out)]
        node_name = self.fresh(f"{name or base}/{op}") if name or out else self.fresh(op)
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=node_name, **attrs))
        return outs

    # -- common blocks ------------------------------------------------------------------------
    def he_normal(self, shape: Sequence[int], fan_in: int, gain: float = 2.0) -> np.ndarray:
        """Seeded He-normal weights (std = sqrt(gain / fan_in)) as float32."""
        std = np.sqrt(gain / max(fan_in, 1))
        return (self.rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std))

    def unsqueeze(self, x: str, axes: Sequence[int], out: str | None = None) -> str:
        """Unsqueeze in the form valid for this opset (attribute before 13, input from 13)."""
        if self.opset >= 13:
            return self.node("Unsqueeze", [x, self.i64("axes", list(axes))], out)
        return self.node("Unsqueeze", [x], out, axes=list(axes))

    # -- emit ---------------------------------------------------------------------------------
    def model(self, doc: str = "", check: bool = True) -> onnx.ModelProto:
        """Assemble, optionally ``full_check`` and return the model."""
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, initializer=self.initializers
        )
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(
            graph,
            opset_imports=opsets,
            producer_name="clglow.models",
            ir_version=helper.find_min_ir_version_for(opsets),
            doc_string=doc,
        )
        if check:
            onnx.checker.check_model(model, full_check=True)
        return model


def tensor_type(dtype: np.dtype | type) -> int:
    """numpy dtype -> TensorProto elem type."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


__all__ = ["GraphBuilder", "TensorProto", "tensor_type"]
