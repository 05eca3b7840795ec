"""Single-operator scan: clglow's kernel time against onnxruntime's node time, one-node models.

    python -m benchmarks.ops [--repeat R] [--only SUBSTRING ...]

Why: whole-model benchmarks hide an operator that runs 10-200x slower than it should (a scalar
builtin in a hot loop, a division per element, one work-item doing a whole row) as long as the
model has little of it; the next model a user brings may be made of it. Each row is one operator
at a shape taken from a common model (YOLO, U-Net, BERT, EfficientNet, classification heads).

Both sides are timed without host copies: clglow as the summed kernel time of a run (OpenCL
profiling events), onnxruntime as the summed node time of its own profiler, medians over
`--repeat` runs after 3 warm-up runs. Outputs are compared (max abs difference, tolerance
1e-3 x max(1, max|ref|)); the ratio is clglow / onnxruntime (below 1: clglow faster).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .runner import clglow_session, ort_options

F = TensorProto.FLOAT
I64 = TensorProto.INT64
_RNG = np.random.default_rng(0)


def _model(nodes, ins, outs, inits=(), opset: int = 17):
    g = helper.make_graph(nodes, "op", [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _c(name: str, value) -> object:
    return numpy_helper.from_array(np.asarray(value), name)


def _w(name: str, shape, scale: float = 0.1):
    return _c(name, (_RNG.standard_normal(shape) * scale).astype(np.float32))


def _one(op: str, shape, out_shape=None, inits=(), extra_inputs=(), opset: int = 17, **attrs):
    """A node `op` reading x (float32, `shape`) and the named initializers."""
    ins = ["x"] + [i.name for i in inits] + list(extra_inputs)
    return _model([helper.make_node(op, ins, ["y"], **attrs)], [("x", F, list(shape))],
                  [("y", F, list(out_shape or shape))], inits, opset)


def cases() -> dict:
    """name -> ONNX model; every input named x (float32) is fed random data."""
    c: dict = {}
    c["Conv 3x3 [1,32,112,112]->32"] = _one("Conv", [1, 32, 112, 112], inits=[_w("w", (32, 32, 3, 3))],
                                              pads=[1, 1, 1, 1])
    c["Conv 3x3/2 [1,3,640,640]->16 (YOLO stem)"] = _one(
        "Conv", [1, 3, 640, 640], [1, 16, 320, 320], inits=[_w("w", (16, 3, 3, 3))], pads=[1, 1, 1, 1],
        strides=[2, 2])
    c["Conv grouped g32 [1,256,28,28]"] = _one("Conv", [1, 256, 28, 28], inits=[_w("w", (256, 8, 3, 3))],
                                                 pads=[1, 1, 1, 1], group=32)
    c["Conv depthwise 5x5 [1,240,28,28]"] = _one("Conv", [1, 240, 28, 28], inits=[_w("w", (240, 1, 5, 5))],
                                                   pads=[2, 2, 2, 2], group=240)
    c["Conv1d k3 [1,256,1000]"] = _one("Conv", [1, 256, 1000], inits=[_w("w", (256, 256, 3), 0.05)], pads=[1, 1])
    c["ConvTranspose 2x2/2 [1,64,56,56]->32"] = _one(
        "ConvTranspose", [1, 64, 56, 56], [1, 32, 112, 112], inits=[_w("w", (64, 32, 2, 2))], strides=[2, 2])
    c["MatMul [4,197,768]x[768,768]"] = _one("MatMul", [4, 197, 768], inits=[_w("w", (768, 768), 0.03)])
    c["MatMul batched [12,128,64]x[12,64,128]"] = _model(
        [helper.make_node("MatMul", ["x", "z"], ["y"])], [("x", F, [12, 128, 64]), ("z", F, [12, 64, 128])],
        [("y", F, [12, 128, 128])])
    c["Gemm [64,1024]x[1024,1000]"] = _one("Gemm", [64, 1024], [64, 1000],
                                           inits=[_w("w", (1000, 1024), 0.03), _c("b", np.zeros(1000, np.float32))],
                                           transB=1)
    c["MaxPool 2x2/2 [1,128,80,80]"] = _one("MaxPool", [1, 128, 80, 80], [1, 128, 40, 40], kernel_shape=[2, 2],
                                            strides=[2, 2])
    c["MaxPool 5x5/1 [1,256,20,20] (SPPF)"] = _one("MaxPool", [1, 256, 20, 20], kernel_shape=[5, 5],
                                                   pads=[2, 2, 2, 2])
    c["AveragePool 3x3/1 [1,128,28,28]"] = _one("AveragePool", [1, 128, 28, 28], kernel_shape=[3, 3],
                                                pads=[1, 1, 1, 1])
    c["GlobalAveragePool [1,1280,7,7]"] = _one("GlobalAveragePool", [1, 1280, 7, 7], [1, 1280, 1, 1])
    c["Resize nearest 2x [1,128,40,40]"] = _one("Resize", [1, 128, 40, 40], [1, 128, 80, 80],
                                                extra_inputs=[], inits=[], mode="nearest")
    c["Resize linear 2x [1,64,56,56]"] = _one("Resize", [1, 64, 56, 56], [1, 64, 112, 112], mode="linear")
    for name in ("Resize nearest 2x [1,128,40,40]", "Resize linear 2x [1,64,56,56]"):  # scales input
        g = c[name].graph
        g.node[0].input[:] = ["x", "", "sc"]
        g.initializer.append(_c("sc", np.array([1, 1, 2, 2], np.float32)))
    c["Softmax [12,128,128]"] = _one("Softmax", [12, 128, 128], axis=-1)
    c["Softmax axis 1 [1,1000,49]"] = _one("Softmax", [1, 1000, 49], axis=1)
    c["LayerNormalization [256,768]"] = _one("LayerNormalization", [256, 768],
                                             inits=[_c("g", np.ones(768, np.float32)),
                                                    _c("b", np.zeros(768, np.float32))], axis=-1)
    ln = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), helper.make_node("Sub", ["x", "m"], ["d"]),
          helper.make_node("Pow", ["d", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
          helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
          helper.make_node("Div", ["d", "s"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
          helper.make_node("Add", ["ng", "b"], ["y"])]
    c["LayerNorm written out (opset 13) [256,768]"] = _model(
        ln, [("x", F, [256, 768])], [("y", F, [256, 768])],
        [_c("two", np.array(2.0, np.float32)), _c("eps", np.array(1e-5, np.float32)),
         _c("g", np.ones(768, np.float32)), _c("b", np.zeros(768, np.float32))], opset=13)
    c["BatchNormalization [1,64,56,56]"] = _one(
        "BatchNormalization", [1, 64, 56, 56],
        inits=[_c(n, v) for n, v in (("s", np.ones(64, np.float32)), ("b", np.zeros(64, np.float32)),
                                     ("m", np.zeros(64, np.float32)), ("v", np.ones(64, np.float32)))])
    c["InstanceNormalization [1,64,56,56]"] = _one(
        "InstanceNormalization", [1, 64, 56, 56],
        inits=[_c("s", np.ones(64, np.float32)), _c("b", np.zeros(64, np.float32))])
    c["Sigmoid [1,128,40,40]"] = _one("Sigmoid", [1, 128, 40, 40])
    c["Tanh [256,1024]"] = _one("Tanh", [256, 1024])
    c["x * Sigmoid(x) [1,128,40,40] (SiLU)"] = _model(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        [("x", F, [1, 128, 40, 40])], [("y", F, [1, 128, 40, 40])])
    c["Pow(x, 2) [256,1024]"] = _one("Pow", [256, 1024], inits=[_c("e", np.array(2.0, np.float32))])
    c["Add bias [256,1024]+[1024]"] = _one("Add", [256, 1024], inits=[_w("b", (1024,))])
    c["Mul [1,64,56,56] by [1,64,1,1] (SE)"] = _one("Mul", [1, 64, 56, 56], inits=[_w("s", (1, 64, 1, 1))])
    c["ReduceMean HW [1,256,28,28]"] = _one("ReduceMean", [1, 256, 28, 28], [1, 256, 1, 1], axes=[2, 3], opset=13)
    c["ReduceMax last [256,1024]"] = _one("ReduceMax", [256, 1024], [256, 1], axes=[-1], opset=13)
    c["ArgMax axis 1 [1,1000,196]"] = _model([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)],
                                             [("x", F, [1, 1000, 196])], [("y", I64, [1, 196])])
    c["Concat channels [1,128,40,40]x2"] = _model(
        [helper.make_node("Concat", ["x", "z"], ["y"], axis=1)], [("x", F, [1, 128, 40, 40]),
                                                                  ("z", F, [1, 128, 40, 40])],
        [("y", F, [1, 256, 40, 40])])
    c["Transpose NCHW->NHWC [1,64,112,112]"] = _one("Transpose", [1, 64, 112, 112], [1, 112, 112, 64],
                                                    perm=[0, 2, 3, 1])
    c["Gather rows [30522,256] by 128"] = _model(
        [helper.make_node("Gather", ["e", "x"], ["y"])], [("x", I64, [1, 128])], [("y", F, [1, 128, 256])],
        [_w("e", (30522, 256))])
    c["TopK 5 [64,1000]"] = _model(
        [helper.make_node("TopK", ["x", "k"], ["y", "i"])], [("x", F, [64, 1000])],
        [("y", F, [64, 5]), ("i", I64, [64, 5])], [_c("k", np.array([5], np.int64))])
    return c


def _feeds(model) -> dict:
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == I64:
            out[i.name] = _RNG.integers(0, 1000, shape).astype(np.int64)
        else:
            out[i.name] = _RNG.standard_normal(shape).astype(np.float32)
    return out


def _clglow_ms(model, feeds: dict, repeat: int) -> tuple:
    from clglow.runtime.profiler import kernel_times

    sess = clglow_session(model.SerializeToString(), profiling=True)
    for _ in range(3):
        outs = sess.run(None, feeds)
    sess._engine.records.clear()
    for _ in range(repeat):
        sess.run(None, feeds)
    per_run, kernels = [], set()
    for rec in sess._engine.records:
        t = kernel_times([rec])
        per_run.append(sum(e - s for _, _, _, s, e in t) / 1e6)
        kernels.update(k for _, k, _, _, _ in t)
    sess.release()
    return statistics.median(per_run), sorted(kernels), outs


def _ort_ms(model, feeds: dict, repeat: int) -> tuple:
    import onnxruntime as ort

    opts = ort_options()
    opts.enable_profiling = True
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(3):
        outs = sess.run(None, feeds)
    for _ in range(repeat):
        sess.run(None, feeds)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    per_node = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per_node[e["name"]].append(e["dur"])
    runs = min(len(v) for v in per_node.values())
    per_run = [sum(v[len(v) - runs + i] for v in per_node.values()) / 1000 for i in range(3, runs)]
    return statistics.median(per_run), outs


def table(rows: Iterable[tuple], repeat: int, out: Callable[[str], None] = print) -> int:
    """Print one markdown row per (name, model, feeds) — clglow's kernel time against
    onnxruntime's node time, outputs compared — and return how many rows failed or differ."""
    wrong = 0
    out("| operator (shape) | clglow ms | onnxruntime ms | clglow/ORT | clglow kernels | max abs diff |")
    out("|---|---:|---:|---:|---|---:|")
    for name, model, feeds in rows:
        try:
            ours, kernels, got = _clglow_ms(model, feeds, repeat)
            theirs, want = _ort_ms(model, feeds, repeat)
        except Exception as e:  # one broken row must not hide the others
            out(f"| {name} | error: {type(e).__name__}: {str(e)[:120]} | | | | |")
            wrong += 1
            continue
        diff = max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                   if np.asarray(w).size else 0.0 for g, w in zip(got, want))
        tol = 1e-3 * max(1.0, max(float(np.max(np.abs(w))) for w in want if np.asarray(w).size))
        flag = "" if diff <= tol else " **WRONG**"
        wrong += bool(flag)
        out(f"| {name} | {ours:.3f} | {theirs:.3f} | **{ours / theirs:.2f}** | {', '.join(kernels)} | "
            f"{diff:.1e}{flag} |")
    return wrong


def main(argv: Optional[Sequence[str]] = None, out: Callable[[str], None] = print) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ops", description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--only", nargs="*", default=[], help="run the rows whose name contains one of these")
    args = p.parse_args(argv)
    rows = ((name, m, _feeds(m)) for name, m in cases().items()
            if not args.only or any(s in name for s in args.only))
    return 1 if table(rows, args.repeat, out) else 0


if __name__ == "__main__":
    sys.exit(main())
