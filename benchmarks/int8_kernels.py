"""The integer GEMM family (kernels_cl/qgemm.cl) one node at a time: int8 against float32, clglow
against onnxruntime, best of alternating rounds (ms and GOPS, 2 ops per multiply-add).

    python benchmarks/int8_kernels.py               # the default device
    CLGLOW_DEVICE=1:0 python benchmarks/int8_kernels.py
    python benchmarks/int8_kernels.py --kernels     # qgemm.cl's inner forms vs gemm.cl, kernel time only

--kernels times single kernels with OpenCL profiling events (runtime.search.measure: points in
turns, best of 7): gemm.cl's float32 default against qgemm.cl's int32-product tiles, exact float
accumulation (fa=1) and the paired 16-bit multiply-add tiles (KC=2) on ResNet-50 / BERT GEMM shapes (M, N, K), uint8 x int8 -> int32.

Cases: QLinearMatMul / MatMul at 1024^3 and a BERT-base FFN shape, QLinearConv / Conv at
ResNet-50's layer shapes and MobileNetV2's depthwise ones (uint8 activations, int8 per-channel
weights). clglow's time is a session.run (inputs uploaded, outputs read back each run);
onnxruntime's is its fused int8 kernel (VNNI where the CPU has it), with its default threads.
On a machine shared with other work the figures are noisy: compare within one run.
"""
from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(node: onnx.NodeProto, feeds: dict, consts: dict, out_type: int) -> bytes:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in feeds.items()]
    out = helper.make_tensor_value_info(node.output[0], out_type, None)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    m = helper.make_model(helper.make_graph([node], "g", ins, [out], inits), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m).SerializeToString()


def _best_ms(fns: dict, rounds: int = 4, reps: int = 3) -> dict:
    for fn in fns.values():
        fn()
        fn()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t)
    return {k: v * 1e3 for k, v in best.items()}


def _sessions(model: bytes, feeds: dict, tag: str) -> dict:
    import onnxruntime as ort

    import clglow

    c = clglow.InferenceSession(model)
    o = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return {f"clglow {tag}": lambda: c.run(None, feeds), f"ort {tag}": lambda: o.run(None, feeds)}


def gemm_case(rng: np.random.Generator, m: int, k: int, n: int) -> tuple:
    f32 = np.float32
    a8, b8 = rng.integers(0, 256, (m, k)).astype(np.uint8), rng.integers(-128, 128, (k, n)).astype(np.int8)
    q = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    qc = {"as": f32(0.1), "az": np.uint8(128), "b": b8, "bs": f32(0.01), "bz": np.int8(0), "ys": f32(3.0),
          "yz": np.uint8(128)}
    af, bf = rng.standard_normal((m, k)).astype(f32), rng.standard_normal((k, n)).astype(f32)
    fns = _sessions(_model(q, {"a": a8}, qc, TensorProto.UINT8), {"a": a8}, "int8")
    fns.update(_sessions(_model(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": af}, {"b": bf},
                                TensorProto.FLOAT), {"a": af}, "float32"))
    return f"GEMM {m}x{k}x{n}", 2.0 * m * n * k, fns


def conv_case(rng: np.random.Generator, cin: int, cout: int, hw: int, kh: int, stride: int, group: int = 1) -> tuple:
    f32 = np.float32
    pad = kh // 2
    oh = (hw + 2 * pad - kh) // stride + 1
    at = dict(pads=[pad] * 4, strides=[stride] * 2, group=group)
    x8 = rng.integers(0, 256, (1, cin, hw, hw)).astype(np.uint8)
    w8 = rng.integers(-127, 128, (cout, cin // group, kh, kh)).astype(np.int8)
    q = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], **at)
    qc = {"xs": f32(0.02), "xz": np.uint8(128), "w": w8, "ws": np.full(cout, 0.01, f32), "wz": np.zeros(cout, np.int8),
          "ys": f32(2.0), "yz": np.uint8(0)}
    xf = rng.standard_normal((1, cin, hw, hw)).astype(f32)
    wf = rng.standard_normal((cout, cin // group, kh, kh)).astype(f32)
    fns = _sessions(_model(q, {"x": x8}, qc, TensorProto.UINT8), {"x": x8}, "int8")
    fns.update(_sessions(_model(helper.make_node("Conv", ["x", "w"], ["y"], **at), {"x": xf}, {"w": wf},
                                TensorProto.FLOAT), {"x": xf}, "float32"))
    label = f"Conv {cin}->{cout} {hw}x{hw} k{kh} s{stride}" + (f" g{group}" if group > 1 else "")
    return label, 2.0 * cout * (cin // group) * kh * kh * oh * oh, fns


KERNEL_SHAPES = [(64, 3136, 576), (256, 3136, 64), (128, 784, 1152), (512, 196, 1024), (2048, 49, 512),
                 (128, 1024, 256), (128, 256, 1024)]
KERNEL_POINTS = {"int32 products 4x16x4": {"kc": 1, "mr": 4, "vw": 16, "nv": 4, "ku": 4},
                 "exact float 8x16x3": {"kc": 1, "mr": 8, "vw": 16, "nv": 3, "ku": 4, "fa": 1},
                 "pairs 8x16x3": {"kc": 2, "mr": 8, "vw": 16, "nv": 3, "ku": 1},
                 "pairs 6x16x4": {"kc": 2, "mr": 6, "vw": 16, "nv": 4, "ku": 1}}


def kernel_table() -> int:
    """GOP/s of single kernels (profiling events) per shape: gemm.cl's default vs qgemm.cl's forms."""
    from clglow.lower import gemm_kernel, qgemm_kernel
    from clglow.runtime import search
    from clglow.runtime.device import select_device

    dev = select_device(None)
    t = dev.target(None)
    print(f"device: {dev.name}")
    print("| M x N x K | gemm.cl fp32 | " + " | ".join(KERNEL_POINTS) + " |")
    print("|---" * (2 + len(KERNEL_POINTS)) + "|")
    for m, n, k in KERNEL_SHAPES:
        ops = 2.0 * m * n * k
        fkey = (m, n, k, "packed")
        ft = search.measure(dev, t, "gemm", fkey, [gemm_kernel.GEMM_FAMILY.default(t, fkey)])
        pts = [dict(p, lsize=(1, 1, 1)) for p in KERNEL_POINTS.values()]
        qt = search.measure(dev, t, "qgemm", (m, n, k), pts)
        cell = lambda ms: f"{ops / ms / 1e6:.0f}" if ms else "-"  # noqa: E731
        print(f"| {m} x {n} x {k} | {cell(ft.get(0))} | " + " | ".join(cell(qt.get(i)) for i in range(len(pts))) + " |",
              flush=True)
    return 0


def main() -> int:
    import sys
    if "--kernels" in sys.argv[1:]:
        return kernel_table()
    rng = np.random.default_rng(0)
    cases = [gemm_case(rng, 1024, 1024, 1024), gemm_case(rng, 128, 768, 3072)]
    for c in [(64, 64, 56, 3, 1), (256, 64, 56, 1, 1), (128, 128, 28, 3, 1), (256, 256, 14, 3, 1),
              (512, 512, 7, 3, 1), (1024, 256, 14, 1, 1), (144, 144, 56, 3, 1, 144), (96, 96, 112, 3, 2, 96)]:
        cases.append(conv_case(rng, *c))
    for label, ops, fns in cases:
        best = _best_ms(fns)
        print(f"{label}: " + "; ".join(f"{k} {v:.3f} ms ({ops / v / 1e6:.0f} GOPS)" for k, v in best.items()),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
