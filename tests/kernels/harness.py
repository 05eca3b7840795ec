"""Run one node's launches with pyopencl for the GEMM/Conv tests.

Builds on run_launches.py (context, program cache, buffer binding) and adds what these tests
need: the device's real vector width in DeviceInfo (it picks the GEMM tiles), nodes outside
the ONNX domain (clglow FusedConv) and caller-supplied expected outputs.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
import pyopencl as cl

from clglow.ir import Graph, Node, Value
from clglow.lower import base
from clglow.lower.base import DeviceInfo, LowerCtx, TensorInfo

try:  # tests/kernels may or may not be a package
    from .run_launches import _np_attrs, context, execute, reference
except ImportError:  # pragma: no cover
    from run_launches import _np_attrs, context, execute, reference  # type: ignore


def device_info() -> DeviceInfo:
    """DeviceInfo of the test device, as runtime.device fills it."""
    ctx, _ = context()
    d = ctx.devices[0]
    return DeviceInfo(name=d.name, type="gpu" if d.type & cl.device_type.GPU else "cpu",
                      compute_units=d.max_compute_units, max_work_group_size=d.max_work_group_size,
                      local_mem_size=d.local_mem_size, global_mem_size=d.global_mem_size,
                      max_alloc_size=d.max_mem_alloc_size,
                      preferred_vector_width_float=max(1, int(d.preferred_vector_width_float)))


def lower(node: onnx.NodeProto, feeds: dict, consts: dict, out_shapes: dict, opset: int = 17,
          device: Optional[DeviceInfo] = None) -> list:
    """The node's launches for these shapes (consts become graph constants)."""
    values = {}
    for n, a in list(feeds.items()) + list(consts.items()):
        values[n] = Value(n, a.dtype, tuple(a.shape), a if n in consts else None)
    for o, (shape, dtype) in out_shapes.items():
        values[o] = Value(o, np.dtype(dtype), tuple(shape))
    inode = Node(node.op_type, node.name or node.op_type, list(node.input), list(node.output),
                 _np_attrs(node), node.domain or "")
    graph = Graph([inode], values, list(feeds), list(out_shapes), {"": opset, "clglow": 1})
    op = base.lookup(inode)
    assert op is not None, f"no device op for {node.domain}:{node.op_type}"
    reason = op.supports(inode, graph)
    assert reason is None, reason
    tinfo = lambda n: TensorInfo(n, values[n].dtype, values[n].shape) if n else None  # noqa: E731
    lctx = LowerCtx(inode, graph, [tinfo(n) for n in node.input],
                    [tinfo(o) for o in node.output if o], device or device_info())
    return op.lower(lctx)


def run(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
        expected: Optional[list] = None, device: Optional[DeviceInfo] = None) -> tuple:
    """(got, expected) output lists; expected from onnx.reference unless given."""
    consts = consts or {}
    if expected is None:
        expected = reference(node, feeds, consts, opset)
    expected = [np.asarray(e) for e in expected]
    outs = [o for o in node.output if o]
    launches = lower(node, feeds, consts, {o: (e.shape, e.dtype) for o, e in zip(outs, expected)},
                     opset, device)
    got = execute(launches, {**feeds, **consts}, dict(zip(outs, expected)))
    return [got[o] for o in outs], expected


def check(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
          expected: Optional[list] = None, rtol: float = 1e-4, device: Optional[DeviceInfo] = None) -> None:
    """Assert the device result matches within rtol and atol = rtol * max|expected|."""
    got, exp = run(node, feeds, consts, opset, expected, device)
    for g, e in zip(got, exp):
        assert g.shape == e.shape, (g.shape, e.shape)
        atol = rtol * float(np.abs(e).max()) if e.size else 0.0
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
