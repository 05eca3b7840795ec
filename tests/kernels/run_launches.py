"""A small pyopencl harness for kernel tests: one ONNX node -> lowering -> launches -> numpy.

It plays the executor's part (allocate buffers, build programs once, enqueue in order)
so each lowering can be checked against onnx.reference before the real executor exists.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import onnx
import pyopencl as cl
from onnx import helper, numpy_helper

from clglow.ir import Graph, Node, Value
from clglow.lower import base
from clglow.frontend.onnx_model import attribute_value
from clglow.lower.base import Buf, ConstBuf, DeviceInfo, LowerCtx, Scratch, TensorInfo

def _device():
    """The test device: clglow's own selection (CLGLOW_DEVICE, else the first device that builds),
    with its context, queue and program cache, so kernel tests build programs as sessions do."""
    from clglow.runtime.device import select_device

    return select_device()


def context() -> tuple:
    """(context, queue) of the test device."""
    d = _device()
    return d.context, d.queue


def device_info() -> DeviceInfo:
    """The Target the kernel tests lower for: the test device under CLGLOW_TARGET's family (else
    its own), with that family's tuned GEMM tiles as the runtime fills them."""
    from clglow.config import target_family

    return _device().target(target_family())


def kernel(name: str, options: tuple, kname: str) -> cl.Kernel:
    """A fresh kernel object (arguments are bound per launch) from the cached program."""
    return cl.Kernel(_device().program(name, tuple(options)), kname)


def _np_attrs(node: onnx.NodeProto) -> dict:
    return {a.name: attribute_value(a) for a in node.attribute}


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


def lower_ctx(node: onnx.NodeProto, feeds: dict, consts: dict, out_types: dict, opset: int = 17,
              device: Optional[DeviceInfo] = None) -> tuple:
    """(device op, LowerCtx) for one node at these shapes (consts become graph constants)."""
    values = {}
    for n, a in list(feeds.items()) + list(consts.items()):
        values[n] = Value(n, a.dtype, tuple(a.shape), a if n in consts else None)
    for o, (shape, dtype) in out_types.items():
        values[o] = Value(o, np.dtype(dtype), tuple(shape))
    inode = Node(node.op_type, node.name or node.op_type, list(node.input), list(node.output),
                 _np_attrs(node), node.domain or "")
    graph = Graph([inode], values, list(feeds), list(out_types), {"": opset, "clglow": 1})
    op = base.lookup(inode)
    assert op is not None, f"no device op for {node.domain}:{node.op_type}"
    reason = op.supports(inode, graph, device_info())
    assert reason is None, reason
    tinfo = lambda n: TensorInfo(n, values[n].dtype, values[n].shape) if n else None  # noqa: E731
    return op, LowerCtx(inode, graph, [tinfo(n) for n in node.input], [tinfo(o) for o in node.output if o],
                        device or device_info())


def run_node(node: onnx.NodeProto, feeds: dict, consts: Optional[dict] = None, opset: int = 17,
             oracle: str = "reference", expected: Optional[Sequence[np.ndarray]] = None) -> tuple:
    """Lower `node` for the given shapes, run it, return (got, expected) output lists."""
    consts = consts or {}
    if expected is None:
        expected = reference(node, feeds, consts, opset, oracle)
    expected = [np.asarray(e) for e in expected]
    outs = [o for o in node.output if o]
    op, lctx = lower_ctx(node, feeds, consts, {o: (e.shape, e.dtype) for o, e in zip(outs, expected)}, opset)
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
