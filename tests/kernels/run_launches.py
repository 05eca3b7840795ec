"""A small pyopencl harness for kernel tests: one ONNX node -> lowering -> launches -> numpy.

It plays the executor's part (allocate buffers, build programs once, enqueue in order)
so each lowering can be checked against onnx.reference before the real executor exists.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import onnx
import pyopencl as cl
from onnx import helper, numpy_helper

from clglow.ir import Graph, Node, Value
from clglow.lower import base
from clglow.lower.base import Buf, ConstBuf, DeviceInfo, LowerCtx, Scratch, TensorInfo

KERNELS = Path(__file__).resolve().parents[2] / "kernels_cl"

_CTX: Optional[cl.Context] = None
_QUEUE: Optional[cl.CommandQueue] = None
_PROGRAMS: dict = {}
_KERNELS: dict = {}


def context() -> tuple:
    """One context/queue for the whole test session: the first device that can build a kernel.

    (A pocl whose LLVM does not know the host CPU lists a device that cannot compile: skip it.)
    """
    global _CTX, _QUEUE
    if _CTX is None:
        for p in cl.get_platforms():
            for d in p.get_devices():
                ctx = cl.Context([d])
                try:
                    cl.Program(ctx, "__kernel void k(__global int* a) { a[0] = 1; }").build()
                except cl.Error:
                    continue
                _CTX, _QUEUE = ctx, cl.CommandQueue(ctx)
                return _CTX, _QUEUE
        raise RuntimeError("no OpenCL device can build a kernel")
    return _CTX, _QUEUE


def device_info() -> DeviceInfo:
    ctx, _ = context()
    d = ctx.devices[0]
    return DeviceInfo(name=d.name, type="gpu" if d.type & cl.device_type.GPU else "cpu",
                      compute_units=d.max_compute_units, max_work_group_size=d.max_work_group_size,
                      local_mem_size=d.local_mem_size, global_mem_size=d.global_mem_size,
                      max_alloc_size=d.max_mem_alloc_size)


def program(name: str, options: tuple) -> cl.Program:
    key = (name, options)
    if key not in _PROGRAMS:
        ctx, _ = context()
        src = (KERNELS / f"{name}.cl").read_text()
        _PROGRAMS[key] = cl.Program(ctx, src).build(options=list(options))
    return _PROGRAMS[key]


def kernel(name: str, options: tuple, kname: str) -> cl.Kernel:
    key = (name, options, kname)
    if key not in _KERNELS:
        _KERNELS[key] = cl.Kernel(program(name, options), kname)
    return _KERNELS[key]


def _np_attrs(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        out[a.name] = v
    return out


def reference(node: onnx.NodeProto, feeds: dict, consts: dict, opset: int, oracle: str = "reference") -> list:
    """Expected outputs of a single-node model, from onnx.reference (or onnxruntime)."""
    names = [n for n in node.input if n]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape)
              for n in names if n in feeds]
    inits = [numpy_helper.from_array(consts[n], n) for n in names if n in consts]
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o]
    g = helper.make_graph([node], "t", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if oracle == "onnxruntime":
        import onnxruntime as ort
        m = onnx.shape_inference.infer_shapes(m)
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return s.run(None, feeds)
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(m).run(None, feeds)


def run_node(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
             oracle: str = "reference", expected: Optional[Sequence[np.ndarray]] = None) -> tuple:
    """Lower `node` for the given shapes, run it, return (got, expected) output lists."""
    consts = consts or {}
    if expected is None:
        expected = reference(node, feeds, consts, opset, oracle)
    expected = [np.asarray(e) for e in expected]
    values = {}
    for n, a in list(feeds.items()) + list(consts.items()):
        values[n] = Value(n, a.dtype, tuple(a.shape), a if n in consts else None)
    outs = [o for o in node.output if o]
    for o, e in zip(outs, expected):
        values[o] = Value(o, e.dtype, tuple(e.shape))
    inode = Node(node.op_type, node.name or node.op_type, list(node.input), list(node.output), _np_attrs(node))
    graph = Graph([inode], values, list(feeds), outs, {"": opset})
    op = base.lookup(inode)
    assert op is not None, f"no device op for {node.op_type}"
    reason = op.supports(inode, graph)
    assert reason is None, reason
    tinfo = lambda n: TensorInfo(n, values[n].dtype, values[n].shape) if n else None  # noqa: E731
    lctx = LowerCtx(inode, graph, [tinfo(n) for n in node.input], [tinfo(o) for o in node.output if o],
                    device_info())
    if op.view:
        src = feeds.get(node.input[0], consts.get(node.input[0]))
        return [np.asarray(src).reshape(e.shape) for e in expected], expected
    launches = op.lower(lctx)
    got = execute(launches, {**feeds, **consts}, {o: e for o, e in zip(outs, expected)})
    return [got[o] for o in outs], expected


def execute(launches: list, arrays: dict, outputs: dict) -> dict:
    """Allocate, build, enqueue `launches`; return output arrays (dtype/shape from `outputs`)."""
    ctx, q = context()
    mf = cl.mem_flags
    bufs: dict = {}

    def mem(arg):
        if isinstance(arg, Buf):
            if arg.name not in bufs:
                if arg.name in arrays:
                    a = np.ascontiguousarray(arrays[arg.name])
                    bufs[arg.name] = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR,
                                               hostbuf=a if a.nbytes else np.zeros(1, np.uint8))
                else:
                    bufs[arg.name] = cl.Buffer(ctx, mf.READ_WRITE, max(outputs[arg.name].nbytes, 4))
            return bufs[arg.name]
        if isinstance(arg, Scratch):
            k = ("scratch", arg.slot)
            if k not in bufs:
                bufs[k] = cl.Buffer(ctx, mf.READ_WRITE, arg.nbytes)
            return bufs[k]
        if isinstance(arg, ConstBuf):
            k = ("const", arg.key)
            if k not in bufs:
                a = np.ascontiguousarray(arg.array)
                bufs[k] = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                    hostbuf=a if a.nbytes else np.zeros(1, np.uint8))
            return bufs[k]
        assert isinstance(arg, np.generic), f"bad launch argument {arg!r}"
        return arg

    for ln in launches:
        assert ln.lsize is None or all(g % l == 0 for g, l in zip(ln.gsize, ln.lsize)), ln
        k = kernel(ln.program, ln.build_options(), ln.kernel)
        k.set_args(*[mem(a) for a in ln.args])
        cl.enqueue_nd_range_kernel(q, k, tuple(int(g) for g in ln.gsize),
                                   None if ln.lsize is None else tuple(int(x) for x in ln.lsize))
    res = {}
    for name, e in outputs.items():
        out = np.empty(e.shape, e.dtype)
        if out.nbytes:
            cl.enqueue_copy(q, out, mem(Buf(name)))
        res[name] = out
    q.finish()
    return res


def check(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
          rtol: float = 1e-5, atol: float = 1e-6, oracle: str = "reference") -> None:
    """Run `node` on the device and assert every output matches the oracle."""
    got, exp = run_node(node, feeds, consts, opset, oracle)
    for g, e in zip(got, exp):
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype == np.bool_:
            g = g.view(np.bool_) if g.dtype == np.uint8 else g
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, e)
