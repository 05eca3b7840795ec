"""xgemm.cl (the GPU family's local-memory GEMM tiles) against numpy, onnx.reference and onnxruntime.

pocl's local memory is emulated in global memory, so the GPU family there keeps gemm.cl; these
tests force a Target of the GPU family with local_mem_type="local" (what a GPU and Oclgrind
report) so that the xgemm path runs on pocl too. Shapes cover the edges (1, 7, 33, 65, 127 in
each of M, N, K: none a multiple of a tile), batches with broadcast operands, transposed
operands, im2col panels, and the epilogue (bias per row, per column and scalar, a residual, each
activation). The kernel is checked at several points of its search space; lowering choices and
whole models (a small CNN, a BERT-style encoder) run through sessions on such a Target.

XGEMM_SMALL=1 (tests/oclgrind): only the small shapes (a simulator runs every work-item).
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, device_info, lower
    from .run_launches import execute
except ImportError:
    from harness import check, device_info, lower  # type: ignore
    from run_launches import execute  # type: ignore

from clglow.lower.base import Buf
from clglow.lower.gemm_kernel import Bias, Operand
from clglow.lower.gpu_gemm import SEARCH_SPACE, XgemmConfig, search_space, xgemm_applicable, xgemm_launch
from clglow.target import Target

RNG = np.random.default_rng(7)
SMALL = os.environ.get("XGEMM_SMALL") == "1"
EDGES = (1, 7, 33) if SMALL else (1, 7, 33, 65, 127)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def gpu_local() -> Target:
    """The test device under the GPU family, told its local memory is dedicated (the xgemm path)."""
    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


# The default, a strided-mapping one with 8x8 per work-item, and the smallest (vectors of 2).
CONFIGS = [SEARCH_SPACE[0], SEARCH_SPACE[2], SEARCH_SPACE[-1]]


def run_xgemm(cfg: XgemmConfig, a: np.ndarray, b: np.ndarray, *, ta: bool = False, tb: bool = False,
              **epilogue) -> np.ndarray:
    """C = A' @ B' through one xgemm launch (A' = A^T when ta, likewise B'), with `epilogue` passed on."""
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    n = b.shape[0] if tb else b.shape[1]
    arrays = {"a": a, "b": b}
    bias = epilogue.pop("bias", None)
    res = epilogue.pop("res", None)
    bias_op = None
    if bias is not None:
        arr, sm, sn = bias
        arrays["bias"] = arr
        bias_op = Bias(Buf("bias"), sm=sm, sn=sn, beta=epilogue.pop("beta", 1.0))
    res_op = None
    if res is not None:
        arrays["z"] = res
        res_op = Operand(Buf("z"), ld=n)
    launch = xgemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=Operand(Buf("a"), ld=1 if ta else k, ld2=m if ta else 1),
                          b=Operand(Buf("b"), ld=1 if tb else n, ld2=k if tb else 1), c=Operand(Buf("c"), ld=n),
                          bias=bias_op, res=res_op, **epilogue)
    return execute([launch], arrays, {"c": np.empty((m, n), np.float32)})["c"]


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> None:
    atol = rtol * max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# --- the kernel against numpy --------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.label())
@pytest.mark.parametrize("dim", ["M", "N", "K"])
@pytest.mark.parametrize("edge", EDGES)
def test_edges(cfg, dim, edge):
    """Each of M, N, K at an edge size while the other two are 33 (ragged tiles everywhere)."""
    m, n, k = (edge if d == dim else 33 for d in "MNK")
    a, b = rand(m, k), rand(k, n)
    close(run_xgemm(cfg, a, b), a @ b)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_transposed_operands(ta, tb):
    """A and B read transposed through their strides (the operands' other fast dimension)."""
    m, n, k = 37, 29 if SMALL else 70, 45
    a = rand(k, m) if ta else rand(m, k)
    b = rand(n, k) if tb else rand(k, n)
    want = (a.T if ta else a) @ (b.T if tb else b)
    close(run_xgemm(SEARCH_SPACE[0], a, b, ta=ta, tb=tb), want)


@pytest.mark.parametrize("bias_kind", ["row", "column", "scalar"])
def test_bias_residual_alpha(bias_kind):
    m, n, k = 19, 41, 23
    a, b, z = rand(m, k), rand(k, n), rand(m, n)
    vec = {"row": rand(m), "column": rand(n), "scalar": rand(1)}[bias_kind]
    sm, sn = {"row": (1, 0), "column": (0, 1), "scalar": (0, 0)}[bias_kind]
    got = run_xgemm(SEARCH_SPACE[0], a, b, bias=(vec, sm, sn), beta=0.5, res=z, alpha=0.75)
    full = {"row": vec[:, None], "column": vec[None, :], "scalar": vec[0]}[bias_kind]
    close(got, 0.75 * (a @ b) + 0.5 * full + z)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


ACTS = {
    "Relu": (dict(), lambda v: np.maximum(v, 0)),
    "LeakyRelu": (dict(act_alpha=0.1), lambda v: np.where(v < 0, 0.1 * v, v)),
    "Clip": (dict(act_alpha=-0.5, act_beta=0.7), lambda v: np.clip(v, -0.5, 0.7)),
    "Sigmoid": (dict(), lambda v: 1 / (1 + np.exp(-v))),
    "HardSigmoid": (dict(act_alpha=0.2, act_beta=0.5), lambda v: np.clip(0.2 * v + 0.5, 0, 1)),
    "Tanh": (dict(), np.tanh),
    "Gelu": (dict(), lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)))),
    "Swish": (dict(), lambda v: v / (1 + np.exp(-v))),
    "HardSwish": (dict(), lambda v: v * np.clip(v / 6 + 0.5, 0, 1)),
}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_activations(act):
    kw, fn = ACTS[act]
    a, b = rand(9, 17), rand(17, 21)
    close(run_xgemm(SEARCH_SPACE[0], a, b, act=act, **kw), fn(a.astype(np.float64) @ b).astype(np.float32))


def test_batched_with_broadcast_and_two_levels():
    """Two batch levels (z1 = z / D2, z2 = z % D2) with A broadcast over the inner one (stride 0)."""
    d1, d2, m, n, k = 2, 3, 13, 35, 18
    a, b = rand(d1, m, k), rand(d1, d2, k, n)
    cfg = SEARCH_SPACE[-1]
    launch = xgemm_launch(cfg, m=m, n=n, k=k, batch=d1 * d2, d2=d2, a=Operand(Buf("a"), s1=m * k, s2=0, ld=k, ld2=1),
                          b=Operand(Buf("b"), s1=d2 * k * n, s2=k * n, ld=n), c=Operand(Buf("c"), s1=d2 * m * n,
                                                                                        s2=m * n, ld=n))
    got = execute([launch], {"a": a, "b": b}, {"c": np.empty((d1, d2, m, n), np.float32)})["c"]
    close(got, a[:, None] @ b)


def test_b_panels():
    """B as im2col panels of NWG columns (B_PANEL), zero padded to whole panels."""
    cfg = SEARCH_SPACE[-1]
    m, n, k = 11, 37, 20
    a, b = rand(m, k), rand(k, n)
    npad = -(-n // cfg.nwg) * cfg.nwg
    panels = np.pad(b, [(0, 0), (0, npad - n)]).reshape(k, npad // cfg.nwg, cfg.nwg).swapaxes(0, 1).copy()
    launch = xgemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=Operand(Buf("a"), ld=k),
                          b=Operand(Buf("p"), packed=True), c=Operand(Buf("c"), ld=n))
    got = execute([launch], {"a": a, "p": panels}, {"c": np.empty((m, n), np.float32)})["c"]
    close(got, a @ b)


# --- the declared search space --------------------------------------------------------------------------
def test_search_space_within_limits():
    small = Target(max_work_group_size=64, max_work_item_sizes=(64, 64, 64), local_mem_size=8192, family="gpu")
    space = search_space(small)
    assert space and all(c.threads <= 64 and c.local_bytes <= 8192 for c in space)
    assert len(search_space(Target(family="gpu", max_work_group_size=1 << 12, local_mem_size=1 << 20))) == len(
        SEARCH_SPACE)
    assert xgemm_applicable(dataclasses.replace(small, local_mem_type="global")) is not None
    assert xgemm_applicable(dataclasses.replace(small, family="cpu")) is not None
    assert xgemm_applicable(small) is None


# --- the lowering: Gemm, MatMul, FusedMatMul and Conv on the xgemm path ------------------------------------
def _programs(launches: list) -> set:
    return {ln.program for ln in launches}


def test_lowering_chooses_xgemm_only_with_local_memory():
    node = helper.make_node("Gemm", ["a", "b"], ["y"])
    feeds, consts, outs = {"a": rand(5, 7)}, {"b": rand(7, 9)}, {"y": ((5, 9), np.float32)}
    assert _programs(lower(node, feeds, consts, outs, device=gpu_local())) == {"xgemm"}
    emulated = dataclasses.replace(gpu_local(), local_mem_type="global")
    assert "xgemm" not in _programs(lower(node, feeds, consts, outs, device=emulated))


@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("b_const", [False, True])
def test_gemm_node(ta, tb, b_const):
    m, n, k = 37, 45, 29
    a = rand(k, m) if ta else rand(m, k)
    b = rand(n, k) if tb else rand(k, n)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=0.75, beta=1.5)
    feeds, consts = {"a": a, "c": rand(m, 1)}, {}
    (consts if b_const else feeds)["b"] = b
    check(node, feeds, consts, device=gpu_local())


MATMUL_SHAPES = [
    ((33,), (33, 7)),
    ((7, 33), (33,)),
    ((3, 13, 33), (33, 20)),         # batch folded into M
    ((2, 3, 13, 17), (3, 17, 9)),    # broadcast batch
    ((2, 1, 5, 8), (1, 4, 8, 65)),   # both broadcast
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("b_const", [False, True])
def test_matmul_node(sa, sb, b_const):
    feeds, consts = {"a": rand(*sa)}, {}
    (consts if b_const else feeds)["b"] = rand(*sb)
    check(helper.make_node("MatMul", ["a", "b"], ["y"]), feeds, consts, device=gpu_local())


def test_fused_matmul_views():
    """FusedMatMul with transposed views (a transformer's head split): strided reads, no packing."""
    q, kt = rand(2, 7, 4, 16), rand(2, 7, 4, 16)
    node = helper.make_node("FusedMatMul", ["q", "k"], ["y"], domain="clglow", perm_a=[0, 2, 1, 3],
                            perm_b=[0, 2, 3, 1], alpha=0.25)
    want = 0.25 * (q.transpose(0, 2, 1, 3) @ kt.transpose(0, 2, 3, 1))
    check(node, {"q": q, "k": kt}, expected=[want], device=gpu_local())
    launches = lower(node, {"q": q, "k": kt}, {}, {"y": (want.shape, np.float32)}, device=gpu_local())
    assert _programs(launches) == {"xgemm"}


CONVS = [
    ((1, 8, 9, 11), (12, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 6, 8, 8), (6, 3, 3, 3), dict(group=2, strides=[2, 2])),
    ((1, 16, 7, 7), (24, 16, 1, 1), dict()),                        # 1x1: X in place
    ((2, 4, 10, 9), (5, 4, 1, 1), dict(strides=[2, 2])),             # strided 1x1: im2col
    ((1, 3, 12, 12), (7, 3, 5, 5), dict(pads=[2, 1, 2, 1], dilations=[1, 2])),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVS, ids=str)
def test_conv_node(xs, ws, attrs):
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    consts = {"w": rand(*ws), "b": rand(ws[0])}
    check(node, {"x": rand(*xs)}, consts, device=gpu_local())


def test_fused_conv_residual_activation():
    """FusedConv's epilogue on xgemm: bias, residual and Relu (onnx.reference of the unfused form)."""
    x, w, bias = rand(1, 8, 6, 6), rand(8, 8, 3, 3), rand(8)
    z = rand(1, 8, 6, 6)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="clglow", pads=[1, 1, 1, 1],
                            activation="Relu")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    try:
        from .run_launches import reference
    except ImportError:
        from run_launches import reference  # type: ignore
    want = np.maximum(reference(conv, {"x": x}, {"w": w, "b": bias}, 17)[0] + z, 0)
    check(node, {"x": x, "z": z}, {"w": w, "b": bias}, expected=[want], device=gpu_local())
    launches = lower(node, {"x": x, "z": z}, {"w": w, "b": bias}, {"y": (want.shape, np.float32)}, device=gpu_local())
    assert "xgemm" in _programs(launches) and "gemm" not in _programs(launches)


# --- whole models through sessions on a Target with local memory ---------------------------------------------
@pytest.fixture
def local_device():
    """A Device of its own (program cache, Target) on the test device, its local memory called dedicated."""
    from clglow.runtime import device as D

    base = D.select_device()
    dev = D.Device(base.context, base.cl_device)
    dev.info = dataclasses.replace(dev.info, local_mem_type="local")
    return dev


def _models():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import models  # tests/models.py

    return models


def _session(model, dev):
    import clglow

    return clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(target="gpu", tune=False),
                                   device=dev)


def _built_xgemm(dev) -> bool:
    """Whether the Device built an xgemm.cl program (its defines name MWG)."""
    return any(any(o.startswith("-DMWG=") for o in opts) for (_, opts) in dev.cache._memory)


def test_small_cnn_model(local_device):
    models = _models()
    model = models.pooling_cnn(batch=2, image_size=32)
    feeds = models.sample_inputs(model)
    got = _session(model, local_device).run(None, feeds)
    want = models.ort_run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert _built_xgemm(local_device)


def test_bert_style_encoder(local_device):
    models = _models()
    model = models.transformer_encoder(batch=2, seq=9, layers=1, d_model=32, heads=2, ffn=64)
    feeds = models.sample_inputs(model)
    sess = _session(model, local_device)
    got = sess.run(None, feeds)
    want = models.ort_run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
    assert _built_xgemm(local_device)
