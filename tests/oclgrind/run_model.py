"""A small net (Conv+Relu, a depthwise Conv with a residual Add, MaxPool, Flatten, Gemm, Softmax, and
ReduceMean/ArgMax outputs) through a clglow session, checked against onnxruntime: run by
test_oclgrind.py in a process whose OpenCL device is Oclgrind (the GPU family: the 3x3 conv as
xgemm.cl's implicit GEMM, the depthwise one on gpu_dwconv.cl's halo tiles, the batch-1 Gemm on
gpu_gemv.cl, Softmax, ReduceMean and ArgMax on the work-group kernels). Exits non-zero on a
mismatch; Oclgrind's reports go to stderr."""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_net(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv(3->4, 3x3, pad 1) + Relu, depthwise Conv(4, 3x3, pad 1) + the Relu's output, MaxPool
    2x2/2, Flatten, Gemm(64->5), Softmax on [1, 3, 8, 8]."""
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (4, 3, 3, 3)), ("B", (4,)), ("D", (4, 1, 3, 3)), ("G", (5, 64)))]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "D"], ["d"], pads=[1, 1, 1, 1], group=4),
             helper.make_node("Add", ["d", "r"], ["s"]),
             helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "G"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=1),
             helper.make_node("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("ArgMax", ["g"], ["a"], axis=1, keepdims=0)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("a", TensorProto.INT64, [1])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    import onnxruntime as ort

    import clglow

    rng = np.random.default_rng(0)
    model = tiny_net(rng)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = clglow.InferenceSession(model.SerializeToString())
    got = [sess.run(None, {"x": x}) for _ in range(2)]  # a second run reuses the bound plan
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for outs in got:
        for g, w in zip(outs, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    sys.stdout.write(f"tiny net on {sess.device.name}: ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
