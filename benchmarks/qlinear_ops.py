"""The com.microsoft QLinear* ops one at a time: clglow (lower/qlinear.py) vs onnxruntime, median ms.

    python benchmarks/qlinear_ops.py            # the default device
    CLGLOW_DEVICE=1:0 python benchmarks/qlinear_ops.py

Each case is a one-node model at a ResNet-50/EfficientNet/BERT-base size; clglow's time is a
session.run (inputs uploaded and outputs read back each run), onnxruntime's with two intra-op
threads. Small ops are dominated by the per-run overhead.
"""
from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def _model(node: onnx.NodeProto, feeds: dict, consts: dict) -> bytes:
    ins = [helper.make_tensor_value_info(k, TensorProto.UINT8, list(v.shape)) for k, v in feeds.items()]
    rank = max(v.ndim for v in feeds.values())
    out = helper.make_tensor_value_info(node.output[0], TensorProto.UINT8, [f"d{i}" for i in range(rank)])
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    m = helper.make_model(helper.make_graph([node], "g", ins, [out], inits),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m.SerializeToString()


def _median_ms(fn, n: int = 30) -> float:
    fn()
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3


def cases(rng: np.random.Generator) -> list:
    """(label, node, feeds, constants)."""
    q = lambda *s: rng.integers(0, 256, size=s).astype(np.uint8)  # noqa: E731
    p = {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8), "t": np.array(0.03, np.float32)}
    binary = ["a", "s", "z", "b", "s", "z", "t", "z"]
    unary = ["x", "s", "z", "t", "z"]
    sm = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8), "t": np.array(1 / 256, np.float32)}
    return [
        ("QLinearAdd [1,256,56,56]", helper.make_node("QLinearAdd", binary, ["y"], domain=MS),
         {"a": q(1, 256, 56, 56), "b": q(1, 256, 56, 56)}, p),
        ("QLinearMul [1,96,56,56] x [1,96,1,1]", helper.make_node("QLinearMul", binary, ["y"], domain=MS),
         {"a": q(1, 96, 56, 56), "b": q(1, 96, 1, 1)}, p),
        ("QLinearSigmoid [1,96,56,56]", helper.make_node("QLinearSigmoid", unary, ["y"], domain=MS),
         {"x": q(1, 96, 56, 56)}, p),
        ("QLinearGlobalAveragePool [1,2048,7,7]", helper.make_node("QLinearGlobalAveragePool", unary, ["y"],
                                                                   domain=MS), {"x": q(1, 2048, 7, 7)}, p),
        ("QLinearAveragePool 3x3 [1,96,56,56]", helper.make_node("QLinearAveragePool", unary, ["y"], domain=MS,
                                                                 kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         {"x": q(1, 96, 56, 56)}, p),
        ("QLinearConcat 2 x [1,64,28,28]", helper.make_node("QLinearConcat", ["t", "z", "a", "s", "z", "b", "t", "z"],
                                                            ["y"], domain=MS, axis=1),
         {"a": q(1, 64, 28, 28), "b": q(1, 64, 28, 28)}, p),
        ("QLinearSoftmax [12,128,128]", helper.make_node("QLinearSoftmax", unary, ["y"], domain=MS, axis=-1,
                                                         opset=13),
         {"x": rng.integers(100, 160, size=(12, 128, 128)).astype(np.uint8)}, sm),
    ]


def main() -> None:
    import onnxruntime as ort

    import clglow

    rng = np.random.default_rng(0)
    print(f"{'op':42s} {'clglow ms':>10s} {'onnxruntime ms':>15s}")
    for label, node, feeds, consts in cases(rng):
        model = _model(node, feeds, consts)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        ref = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        sess = clglow.InferenceSession(model)
        t_c = _median_ms(lambda: sess.run(None, feeds))
        t_o = _median_ms(lambda: ref.run(None, feeds))
        print(f"{label:42s} {t_c:10.3f} {t_o:15.3f}")


if __name__ == "__main__":
    main()
