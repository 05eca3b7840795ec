"""The transposed GEMM (gemm.cl C_TRANS, pixels as rows) with and without PF_NEXT, and its
tile choices: every point matches onnx.reference; the defaults asserted under target "cpu"."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower, reference
except ImportError:
    from harness import check, device_info, lower, reference  # type: ignore

from clglow.lower.gemm_kernel import (GemmConfig, config_params, gemm_config, gemm_defines, params_config,
                                      transposed_config, transposed_pfn)
from clglow.target import Target

RNG = np.random.default_rng(3)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _tiles(width: int):
    """The test device with the CPU family's default tiles for `width`-float vectors."""
    info = dataclasses.replace(device_info(), gemm_tiles=None, preferred_vector_width_float=width, tuned=())
    if not info.is_cpu_family:
        pytest.skip("the transposed GEMM is taken under the CPU family only")
    return info


def test_transposed_pfn_defaults():
    """PF_NEXT off with 8-float vectors (measured on both pocl devices), on with 16; only the
    transposed programs get the define, and "pfn" is spelled only where it is not 1."""
    narrow, wide = Target(family="cpu", preferred_vector_width_float=8), Target(family="cpu",
                                                                                 preferred_vector_width_float=16)
    assert transposed_pfn(narrow) == 0 and transposed_pfn(wide) == 1
    assert transposed_config(narrow, gemm_config(narrow), 512, 49).pfn == 0
    assert transposed_config(wide, gemm_config(wide), 512, 49).pfn == 1
    cfg = GemmConfig(6, 8, 2, (1, 1, 1), 8, 0, pfn=0)
    assert gemm_defines(cfg, a_packed=True, b_packed=True, c_trans=True)["PF_NEXT"] == 0
    assert "PF_NEXT" not in gemm_defines(cfg, a_packed=True, b_packed=True)
    assert "PF_NEXT" not in gemm_defines(dataclasses.replace(cfg, pfn=1), a_packed=True, b_packed=True, c_trans=True)
    assert "pfn" not in config_params(dataclasses.replace(cfg, pfn=1))
    assert params_config(config_params(cfg)) == cfg


# 1x1 convs on small maps (pixel rows read in place, or packed panels past 8 channel tiles), a
# strided one, a strided padded 3x3
CASES = [((1, 64, 7, 7), (96, 64, 1, 1), {}),
         ((1, 64, 7, 7), (272, 64, 1, 1), {}),
         ((2, 32, 14, 14), (96, 32, 1, 1), dict(strides=[2, 2])),
         ((1, 24, 13, 13), (96, 24, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]))]


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_transposed_conv_matches_reference(width, x_shape, w_shape, attrs):
    """Bias, residual and ReLU through the transposed store, PF_NEXT as the width's default."""
    dev = _tiles(width)
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    y_shape = reference(node, {"x": x}, {"w": w, "b": b}, 17)[0].shape
    launches = lower(node, {"x": x}, {"w": w, "b": b}, {"y": (y_shape, np.float32)}, device=dev)
    trans = [l for l in launches if l.kernel == "gemm" and l.defines.get("C_TRANS")]
    assert trans, [l.kernel for l in launches]
    assert all(l.defines.get("PF_NEXT", 1) == transposed_pfn(dev) for l in trans)
    check(node, {"x": x}, {"w": w, "b": b}, device=dev)
