"""ResNet-18 / ResNet-50 (torchvision v1.5 topology) built locally with seeded random weights.

No download: ``clglow demo`` and the tests build the models here. Weights are He-initialised;
BatchNormalization running statistics are set to the variance each BN input is expected to
have (tracked analytically while building), so activations stay O(1) through all layers and
the logits are finite and spread out rather than saturated or constant.
"""
from __future__ import annotations

import logging
from typing import Literal

import numpy as np
import onnx

from numpy.lib.stride_tricks import sliding_window_view

from ._graph import GraphBuilder, TensorProto

logger = logging.getLogger(__name__)

Batch = int | str

#: (block kind, blocks per stage) for the supported depths.
_DEPTHS: dict[int, tuple[str, list[int]]] = {
    18: ("basic", [2, 2, 2, 2]),
    34: ("basic", [3, 4, 6, 3]),
    50: ("bottleneck", [3, 4, 6, 3]),
    101: ("bottleneck", [3, 4, 23, 3]),
}
_BN_EPS = 1e-5
_CALIB_SIZE = 96
_LOGIT_STD = 2.0


def _np_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Reference NCHW convolution (no bias) in numpy, used only to calibrate BN statistics."""
    k = w.shape[2]
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    if k == 1:
        return np.einsum("nchw,oc->nohw", x[:, :, ::stride, ::stride], w[:, :, 0, 0], optimize=True)
    win = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def _np_maxpool3s2(x: np.ndarray) -> np.ndarray:
    """3x3 / stride 2 / pad 1 max pool in numpy."""
    x = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    return sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))


class _ResNetBuilder:
    """Emits conv/bn/relu units and runs a small numpy forward pass alongside.

    The forward pass (a few low-resolution random images) gives every BatchNormalization the
    running mean/variance its input really has, as in a trained network, so activations stay
    O(1) through all layers. The numpy activation travels with each tensor name.
    """

    def __init__(self, g: GraphBuilder, bn: bool) -> None:
        self.g = g
        self.bn = bn

    def conv_bn(
        self,
        x: str,
        a: np.ndarray,
        c_out: int,
        k: int,
        stride: int,
        name: str,
        relu: bool,
        gamma_mean: float = 1.0,
    ) -> tuple[str, np.ndarray]:
        """Conv(k x k, pad k//2, no bias) + BatchNormalization (+ Relu).

        With ``bn=False`` the BN is folded into the conv (weights + bias): same function.
        """
        g, rng = self.g, self.g.rng
        c_in = a.shape[1]
        w = g.he_normal((c_out, c_in, k, k), c_in * k * k)
        y_np = _np_conv(a, w, stride, k // 2)
        # Running statistics = the statistics of the calibration batch, slightly perturbed.
        mean = (y_np.mean(axis=(0, 2, 3)) * rng.uniform(0.95, 1.05, c_out)).astype(np.float32)
        var = (y_np.var(axis=(0, 2, 3)) * rng.uniform(0.9, 1.1, c_out) + 1e-3).astype(np.float32)
        gamma = (gamma_mean * rng.uniform(0.8, 1.2, c_out)).astype(np.float32)
        beta = (0.1 * rng.standard_normal(c_out)).astype(np.float32)
        scale = gamma / np.sqrt(var + _BN_EPS)
        shift = beta - mean * scale
        y_np = y_np * scale[None, :, None, None] + shift[None, :, None, None]
        conv_attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        if self.bn:
            y = g.node("Conv", [x, g.const(f"{name}.weight", w)], f"{name}.conv_out", name=name, **conv_attrs)
            bn_name = name.replace("conv", "bn").replace("downsample.0", "downsample.1")
            ins = [
                y,
                g.const(f"{bn_name}.weight", gamma),
                g.const(f"{bn_name}.bias", beta),
                g.const(f"{bn_name}.running_mean", mean),
                g.const(f"{bn_name}.running_var", var),
            ]
            y = g.node("BatchNormalization", ins, f"{bn_name}.out", name=bn_name, epsilon=_BN_EPS)
        else:
            wf = (w * scale[:, None, None, None]).astype(np.float32)
            ins = [x, g.const(f"{name}.weight", wf), g.const(f"{name}.bias", shift.astype(np.float32))]
            y = g.node("Conv", ins, f"{name}.out", name=name, **conv_attrs)
        if relu:
            y = g.node("Relu", [y], f"{name}.relu")
            y_np = np.maximum(y_np, 0)
        return y, y_np.astype(np.float32)

    def basic(self, x: str, a: np.ndarray, planes: int, stride: int, name: str) -> tuple[str, np.ndarray]:
        """torchvision BasicBlock (expansion 1)."""
        h, ha = self.conv_bn(x, a, planes, 3, stride, f"{name}.conv1", relu=True)
        h, ha = self.conv_bn(h, ha, planes, 3, 1, f"{name}.conv2", relu=False)
        return self._residual(x, a, planes, stride, name, h, ha)

    def bottleneck(self, x: str, a: np.ndarray, planes: int, stride: int, name: str) -> tuple[str, np.ndarray]:
        """torchvision Bottleneck v1.5: 1x1 -> 3x3 (stride here) -> 1x1 (x4)."""
        h, ha = self.conv_bn(x, a, planes, 1, 1, f"{name}.conv1", relu=True)
        h, ha = self.conv_bn(h, ha, planes, 3, stride, f"{name}.conv2", relu=True)
        h, ha = self.conv_bn(h, ha, planes * 4, 1, 1, f"{name}.conv3", relu=False, gamma_mean=0.5)
        return self._residual(x, a, planes * 4, stride, name, h, ha)

    def _residual(
        self, x: str, a: np.ndarray, c_out: int, stride: int, name: str, h: str, ha: np.ndarray
    ) -> tuple[str, np.ndarray]:
        g = self.g
        if stride != 1 or a.shape[1] != c_out:
            sc, sa = self.conv_bn(x, a, c_out, 1, stride, f"{name}.downsample.0", relu=False)
        else:
            sc, sa = x, a
        y = g.node("Add", [h, sc], f"{name}.add")
        y = g.node("Relu", [y], f"{name}.out")
        return y, np.maximum(ha + sa, 0)


def resnet(
    depth: int = 50,
    opset: int = 13,
    batch: Batch = 1,
    seed: int = 0,
    bn: bool = True,
    num_classes: int = 1000,
    image_size: int = 224,
    head: Literal["flatten", "reshape"] | None = None,
) -> onnx.ModelProto:
    """Build a torchvision-style ResNet of the given depth (18, 34, 50, 101).

    Input ``data`` float32 [batch, 3, image_size, image_size]; output ``logits`` float32
    [batch, num_classes]. ``batch`` may be a string for a symbolic batch dimension.
    ``head`` selects Flatten (default from opset 13) or Reshape with an initializer shape
    ``[0, -1]`` (default for opset < 13) before the final Gemm.
    """
    if depth not in _DEPTHS:
        raise ValueError(f"unsupported ResNet depth {depth!r}; choose one of {sorted(_DEPTHS)}")
    if not (isinstance(batch, str) and batch) and not (isinstance(batch, int) and batch > 0):
        raise ValueError(f"batch must be a positive int or a non-empty dim name, got {batch!r}")
    if opset < 9:
        raise ValueError(f"opset must be >= 9, got {opset!r}")
    if head is None:
        head = "flatten" if opset >= 13 else "reshape"
    if head not in ("flatten", "reshape"):
        raise ValueError(f"head must be 'flatten' or 'reshape', got {head!r}")
    kind, layers = _DEPTHS[depth]
    g = GraphBuilder(f"resnet{depth}", opset=opset, seed=seed)
    b = _ResNetBuilder(g, bn=bn)
    x = g.input("data", TensorProto.FLOAT, [batch, 3, image_size, image_size])
    # Calibration batch: two seeded unit-variance images at low resolution (BN statistics of a
    # random-weight conv net barely depend on the resolution; this keeps the build fast).
    calib = min(image_size, _CALIB_SIZE)
    a = np.random.default_rng([seed, 1]).standard_normal((2, 3, calib, calib), dtype=np.float32)
    # Stem: 7x7/2 conv, BN, ReLU, 3x3/2 max pool (pad 1).
    y, a = b.conv_bn(x, a, 64, 7, 2, "conv1", relu=True)
    y = g.node("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    a = _np_maxpool3s2(a)
    block = b.bottleneck if kind == "bottleneck" else b.basic
    for stage, n_blocks in enumerate(layers):
        planes = 64 * 2**stage
        for i in range(n_blocks):
            stride = 2 if (i == 0 and stage > 0) else 1
            y, a = block(y, a, planes, stride, f"layer{stage + 1}.{i}")
    y = g.node("GlobalAveragePool", [y], "avgpool")
    if head == "flatten":
        y = g.node("Flatten", [y], "flatten", axis=1)
    else:
        y = g.node("Reshape", [y, g.i64("flatten_shape", [0, -1])], "flatten")
    feats = a.mean(axis=(2, 3))
    c = feats.shape[1]
    w = g.he_normal((num_classes, c), c, gain=1.0)
    logits = feats @ w.T
    # Scale the classifier so that the logits have std ~ _LOGIT_STD (a confident but not
    # saturated softmax), then centre them with the bias.
    w *= np.float32(_LOGIT_STD / max(float(logits.std()), 1e-6))
    bias = (-(feats @ w.T).mean() + 0.1 * g.rng.standard_normal(num_classes)).astype(np.float32)
    y = g.node(
        "Gemm", [y, g.const("fc.weight", w), g.const("fc.bias", bias)], "logits", name="fc", transB=1
    )
    g.output(y, TensorProto.FLOAT, [batch, num_classes])
    doc = f"ResNet-{depth} (torchvision v1.5 topology), seeded random weights (seed={seed})"
    model = g.model(doc=doc)
    logger.debug("built resnet%d opset=%d batch=%s bn=%s", depth, opset, batch, bn)
    return model


def resnet50(opset: int = 13, batch: Batch = 1, seed: int = 0, bn: bool = True, **kw: object) -> onnx.ModelProto:
    """ResNet-50 v1.5: input ``data`` [batch,3,224,224] float32 -> ``logits`` [batch,1000].

    Example::

        m = resnet50(batch="N")          # symbolic batch
        m9 = resnet50(opset=9, bn=False)  # opset-9 form with BN folded into the convs
    """
    return resnet(50, opset=opset, batch=batch, seed=seed, bn=bn, **kw)  # type: ignore[arg-type]


def resnet18(opset: int = 13, batch: Batch = 1, seed: int = 0, bn: bool = True, **kw: object) -> onnx.ModelProto:
    """ResNet-18: input ``data`` [batch,3,224,224] float32 -> ``logits`` [batch,1000]."""
    return resnet(18, opset=opset, batch=batch, seed=seed, bn=bn, **kw)  # type: ignore[arg-type]
