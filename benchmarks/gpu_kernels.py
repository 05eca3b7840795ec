"""The GPU family's work-group kernels against what the GPU family ran before them, per node.

    python -m benchmarks.gpu_kernels [--repeat R] [--only SUBSTRING ...] [--local-memory]

Each row lowers one node at a shape from a common model twice on the selected device
(CLGLOW_DEVICE): under the GPU family, where it now takes gpu_reduce.cl / gpu_softmax.cl /
gpu_gemv.cl (global pooling through lower/gpu_pool.py's function), and as the GPU family did
before: the CPU family's lowering for reductions, softmax and pooling (reduce.cl, softmax.cl,
pool.cl: the kernels both families ran), the GPU family without the skinny-GEMM hook for GEMMs.
Kernel time from OpenCL profiling events, the two alternated in one process, the median of
`--repeat` rounds after a warm-up; outputs compared with numpy. On pocl (a CPU driver runs a
work-group's items one after another) the figures only show what a CPU pays for the GPU rows;
they mean something on a GPU. --local-memory tells the Target its local memory is dedicated
(the xgemm/gemv path, as a GPU and Oclgrind report).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from typing import Callable, Dict, List, Tuple

import numpy as np
import pyopencl as cl
from onnx import helper

from clglow.ir import Graph, Node, Value
from clglow.lower import base
from clglow.lower.base import Buf, ConstBuf, LowerCtx, Scratch, TensorInfo
from clglow.lower import gpu_gemm, gpu_pool
from clglow.lower.gpu_pool import lower_global_pool_wg

RNG = np.random.default_rng(0)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def cases() -> Dict[str, Tuple[object, dict, dict, Callable, int]]:
    """name -> (node, feeds, consts, numpy reference of the output, opset)."""
    c: Dict[str, Tuple[object, dict, dict, Callable, int]] = {}
    ax = lambda *a: {"axes": np.array(a, np.int64)}  # noqa: E731
    red = lambda op, **kw: helper.make_node(op, ["x", "axes"], ["y"], keepdims=1, **kw)  # noqa: E731
    x = _f(512, 768)
    c["ReduceMean [512,768] last (LayerNorm)"] = (red("ReduceMean"), {"x": x}, ax(-1),
                                                  lambda: x.mean(-1, keepdims=True), 18)
    x2 = _f(8, 64, 56, 56)
    c["ReduceMean [8,64,56,56] spatial (SE)"] = (red("ReduceMean"), {"x": x2}, ax(2, 3),
                                                 lambda: x2.mean((2, 3), keepdims=True), 18)
    x3 = _f(16, 1000, 49)
    c["ReduceMax [16,1000,49] axis 1 (cols)"] = (red("ReduceMax"), {"x": x3}, ax(1),
                                                 lambda: x3.max(1, keepdims=True), 18)
    x4 = _f(4, 1 << 20)
    c["ReduceSum [4,1M] last (long rows)"] = (red("ReduceSum"), {"x": x4}, ax(-1),
                                              lambda: x4.astype(np.float64).sum(-1, keepdims=True), 18)
    x5 = _f(64, 32000)
    c["ArgMax [64,32000] last (vocab)"] = (helper.make_node("ArgMax", ["x"], ["y"], axis=1), {"x": x5}, {},
                                           lambda: x5.argmax(1)[:, None], 13)
    x6 = _f(12 * 128, 128)
    sm = lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)  # noqa: E731,E501
    c["Softmax [1536,128] last (attention)"] = (helper.make_node("Softmax", ["x"], ["y"], axis=-1), {"x": x6}, {},
                                                lambda: sm(x6), 13)
    x7 = _f(8, 32000)
    c["Softmax [8,32000] last (vocab)"] = (helper.make_node("Softmax", ["x"], ["y"], axis=-1), {"x": x7}, {},
                                           lambda: sm(x7), 13)
    x8 = _f(8, 2048, 7, 7)
    c["GlobalAveragePool [8,2048,7,7]"] = (helper.make_node("GlobalAveragePool", ["x"], ["y"]), {"x": x8}, {},
                                           lambda: x8.mean((2, 3), keepdims=True), 13)
    x9 = _f(1, 64, 112, 112)
    c["GlobalMaxPool [1,64,112,112]"] = (helper.make_node("GlobalMaxPool", ["x"], ["y"]), {"x": x9}, {},
                                         lambda: x9.max((2, 3), keepdims=True), 13)
    a, w = _f(1, 2048), _f(1000, 2048)
    c["Gemm [1,2048]x[1000,2048]^T (head)"] = (helper.make_node("Gemm", ["a", "w"], ["y"], transB=1), {"a": a},
                                               {"w": w}, lambda: a @ w.T, 13)
    a2, w2 = _f(4, 4096), _f(4096, 4096)
    c["MatMul [4,4096]x[4096,4096] (decode)"] = (helper.make_node("MatMul", ["a", "w"], ["y"]), {"a": a2},
                                                 {"w": w2}, lambda: a2 @ w2, 13)
    return c


def _ctx(node, feeds: dict, consts: dict, out: np.ndarray, opset: int, target) -> Tuple[object, LowerCtx]:
    values = {n: Value(n, a.dtype, tuple(a.shape), a if n in consts else None) for n, a in {**feeds, **consts}.items()}
    values["y"] = Value("y", out.dtype, tuple(out.shape))
    inode = Node(node.op_type, node.op_type, list(node.input), ["y"],
                 {a.name: helper.get_attribute_value(a) for a in node.attribute}, "")
    graph = Graph([inode], values, list(feeds), ["y"], {"": opset})
    info = lambda n: TensorInfo(n, values[n].dtype, values[n].shape)  # noqa: E731
    return base.lookup(inode), LowerCtx(inode, graph, [info(n) for n in node.input], [info("y")], target)


def _lower(node, feeds, consts, out, opset, target, before: bool) -> list:
    """The node's launches under the GPU family now, or (`before`) as the GPU family had them."""
    gemm = node.op_type in ("Gemm", "MatMul")
    if before and not gemm:
        target = dataclasses.replace(target, family="cpu")
    op, ctx = _ctx(node, feeds, consts, out, opset, target)
    if node.op_type.startswith("Global") and not before and gpu_pool.applicable(target) is None:
        return lower_global_pool_wg(ctx)  # pool.py's GPU row is one hook line away (its owner's file)
    if not (before and gemm):
        return op.lower(ctx)
    hook = gpu_gemm.gemv_applicable
    gpu_gemm.gemv_applicable = lambda m, b: "off: as before"  # xgemm_launch's skinny-GEMM hook
    try:
        return op.lower(ctx)
    finally:
        gpu_gemm.gemv_applicable = hook


class Bound:
    """Launches bound to buffers once, timed by profiling events."""

    def __init__(self, device, launches: list, arrays: dict, out: np.ndarray):
        self.queue = device.profiling_queue
        ctx, mf = device.context, cl.mem_flags
        self.bufs: dict = {}
        self.out = out

        def mem(arg):
            if isinstance(arg, Buf):
                if arg.name not in self.bufs:
                    a = arrays.get(arg.name)
                    self.bufs[arg.name] = (cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a) if a is not None
                                           else cl.Buffer(ctx, mf.READ_WRITE, max(out.nbytes, 4)))
                return self.bufs[arg.name]
            if isinstance(arg, Scratch):
                return self.bufs.setdefault(("s", arg.slot), cl.Buffer(ctx, mf.READ_WRITE, arg.nbytes))
            if isinstance(arg, ConstBuf):
                return self.bufs.setdefault(("c", arg.key), cl.Buffer(
                    ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(arg.array)))
            return arg

        self.kernels = []
        for ln in launches:
            k = cl.Kernel(device.program(ln.program, ln.build_options()), ln.kernel)
            k.set_args(*[mem(a) for a in ln.args])
            self.kernels.append((k, tuple(ln.gsize), None if ln.lsize is None else tuple(ln.lsize)))

    def time_ms(self) -> float:
        evs = [cl.enqueue_nd_range_kernel(self.queue, k, g, l) for k, g, l in self.kernels]
        self.queue.finish()
        return sum((e.profile.end - e.profile.start) * 1e-6 for e in evs)

    def result(self) -> np.ndarray:
        got = np.empty_like(self.out)
        cl.enqueue_copy(self.queue, got, self.bufs["y"])
        self.queue.finish()
        return got


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--local-memory", action="store_true", help="tell the Target its local memory is dedicated")
    args = p.parse_args(argv)
    from clglow.runtime.device import select_device

    device = select_device()
    gpu = device.target("gpu")
    if args.local_memory:
        gpu = dataclasses.replace(gpu, local_mem_type="local")
    print(f"device: {device.describe()}")
    print(f"{'case':<42} {'gpu rows ms':>11} {'before ms':>10} {'ratio':>6}  kernels (gpu / before)   max err")
    for name, (node, feeds, consts, ref, opset) in cases().items():
        if args.only and not any(s.lower() in name.lower() for s in args.only):
            continue
        want = np.asarray(ref()).astype(np.int64 if node.op_type.startswith("Arg") else np.float32)
        rows = {}
        for tag in ("gpu", "before"):
            launches = _lower(node, feeds, consts, want, opset, gpu, tag == "before")
            rows[tag] = (Bound(device, launches, {**feeds, **consts}, np.empty_like(want)),
                         "+".join(ln.kernel for ln in launches))
        times: Dict[str, List[float]] = {"gpu": [], "before": []}
        for b, _k in rows.values():
            b.time_ms()  # warm-up (code generation per local size on pocl)
        for _ in range(args.repeat):
            for tag, (b, _k) in rows.items():
                times[tag].append(b.time_ms())
        err = max(float(np.abs(b.result().astype(np.float64) - want).max()) for b, _k in rows.values())
        g, o = statistics.median(times["gpu"]), statistics.median(times["before"])
        print(f"{name:<42} {g:>11.3f} {o:>10.3f} {g / o:>6.2f}  {rows['gpu'][1]} / {rows['before'][1]}   {err:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
