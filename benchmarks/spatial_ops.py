"""RoiAlign, Col2Im, DeformConv, MaxUnpool, CenterCropPad, ReverseSequence, AffineGrid and
Upsample one at a time: clglow's kernel time against onnxruntime's node time (benchmarks/ops.py's
method: OpenCL profiling events vs onnxruntime's profiler, medians after 3 warm-up runs).

    python -m benchmarks.spatial_ops [--repeat R] [--only SUBSTRING ...]

Shapes from the models that use them: Faster/Mask R-CNN heads (RoiAlign over a stride-16 map),
DCNv2 blocks (DeformConv with a mask), SegNet's unpooling, spatial transformers (AffineGrid).
Outputs are compared with onnxruntime's (an independent oracle), tolerance 1e-3 x max(1, max|ref|).
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .ops import table

F, I64 = TensorProto.FLOAT, TensorProto.INT64
_RNG = np.random.default_rng(0)


def _case(node: onnx.NodeProto, feeds: dict, consts: dict, opset: int, out_rank: int) -> tuple:
    """(model, feeds): `feeds` as float32/int64 graph inputs, `consts` as initializers."""
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in feeds.items()]
    out = helper.make_tensor_value_info(node.output[0], ins[0].type.tensor_type.elem_type,
                                        [f"d{i}" for i in range(out_rank)])
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    m = helper.make_model(helper.make_graph([node], "op", ins, [out], inits),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m, feeds


def _f(*shape, scale: float = 1.0) -> np.ndarray:
    return (_RNG.standard_normal(shape) * scale).astype(np.float32)


def _rois(n: int, size: float) -> np.ndarray:
    xy = _RNG.uniform(0, size * 0.8, (n, 2))
    wh = _RNG.uniform(size * 0.02, size * 0.4, (n, 2))
    return np.concatenate([xy, np.minimum(xy + wh, size)], 1).astype(np.float32)


def cases() -> dict:
    """name -> (model, feeds)."""
    i, j = np.meshgrid(np.arange(56), np.arange(56), indexing="ij")  # each 2x2 window's top-left, 112 x 112 map
    pool_idx = (2 * i * 112 + 2 * j)[None, None] + (np.arange(64) * 112 * 112)[None, :, None, None]
    return {
        "RoiAlign avg 256x50x50 300 rois -> 7x7 s2": _case(
            helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=7, output_width=7, sampling_ratio=2,
                             spatial_scale=1 / 16), {"x": _f(1, 256, 50, 50), "r": _rois(300, 800),
                                                     "b": np.zeros(300, np.int64)}, {}, 16, 4),
        "RoiAlign max 256x50x50 100 rois -> 14x14 adaptive": _case(
            helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=14, output_width=14, mode="max",
                             spatial_scale=1 / 16), {"x": _f(1, 256, 50, 50), "r": _rois(100, 800),
                                                     "b": np.zeros(100, np.int64)}, {}, 16, 4),
        "DeformConv 64->64 3x3 56x56 mask": _case(
            helper.make_node("DeformConv", ["x", "w", "o", "bias", "m"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
            {"x": _f(1, 64, 56, 56), "o": _f(1, 18, 56, 56, scale=2.0),
             "m": _RNG.random((1, 9, 56, 56)).astype(np.float32)},
            {"w": _f(64, 64, 3, 3, scale=0.05), "bias": _f(64)}, 19, 4),
        "Col2Im 576x3136 -> 64x56x56 k3 p1": _case(
            helper.make_node("Col2Im", ["x", "i", "k"], ["y"], pads=[1, 1, 1, 1]), {"x": _f(1, 576, 3136)},
            {"i": np.array([56, 56], np.int64), "k": np.array([3, 3], np.int64)}, 18, 4),
        "MaxUnpool 64x56x56 k2 s2": _case(
            helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
            {"x": _f(1, 64, 56, 56), "i": pool_idx.astype(np.int64)}, {}, 11, 4),
        "AffineGrid 8x224x224": _case(
            helper.make_node("AffineGrid", ["t", "s"], ["g"]), {"t": _f(8, 2, 3)},
            {"s": np.array([8, 3, 224, 224], np.int64)}, 20, 4),
        "ReverseSequence 64x32x512": _case(
            helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1),
            {"x": _f(64, 32, 512), "l": _RNG.integers(1, 65, 32).astype(np.int64)}, {}, 10, 3),
        "CenterCropPad 3x256x256 -> 3x224x240": _case(
            helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[1, 2]), {"x": _f(3, 256, 256)},
            {"s": np.array([224, 240], np.int64)}, 18, 3),
        "Upsample nearest 2x 64x56x56": _case(
            helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest"), {"x": _f(1, 64, 56, 56)},
            {"s": np.array([1, 1, 2, 2], np.float32)}, 9, 4),
    }


def main(argv: Optional[Sequence[str]] = None, out: Callable[[str], None] = print) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spatial_ops", description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--only", nargs="*", default=[], help="run the rows whose name contains one of these")
    args = p.parse_args(argv)
    rows = ((name, m, feeds) for name, (m, feeds) in cases().items()
            if not args.only or any(s in name for s in args.only))
    return 1 if table(rows, args.repeat, out) else 0


if __name__ == "__main__":
    sys.exit(main())
