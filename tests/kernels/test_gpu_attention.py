"""clglow.FusedAttention on the GPU family's work-group kernel (gpu_attention.cl, lower/gpu_attention.py)
against numpy: decode rows and blocks of up to 16 query rows, ragged blocks, head sizes that are
not powers of two, masks broadcast over batch or heads, Q read through the head split and Y
stored through the head merge, every point of the search space, a row masked to -inf (NaN, as
ONNX Softmax gives), the selection under each family and local-memory type, and the space within
a small device's limits. As test_xgemm.py, a Target of the GPU family with local_mem_type="local"
makes pocl run the local-memory kernel. XGEMM_SMALL=1 (tests/oclgrind): the small shapes only.
"""
from __future__ import annotations

import dataclasses
import os

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
from clglow.lower.gpu_attention import BlockShape, block_applicable, block_launch, space
from clglow.lower.tunable import FAMILIES
from clglow.target import Target

RNG = np.random.default_rng(5)
SMALL = os.environ.get("XGEMM_SMALL") == "1"


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def gpu_local() -> Target:
    return dataclasses.replace(device_info().with_family("gpu"), local_mem_type="local")


def want(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask=None) -> np.ndarray:
    """softmax(scale * q k^T + mask) v in float64 (q, k, v as [B, H, S, D])."""
    s = scale * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p, v.astype(np.float64))


def node(mask: bool, perm_q=None, perm_y=None, scale: float = 0.25):
    attrs = dict(scale=scale)
    if perm_q:
        attrs["perm_q"] = perm_q
    if perm_y:
        attrs["perm_y"] = perm_y
    return helper.make_node("FusedAttention", ["q", "k", "v"] + (["mask"] if mask else []), ["y"], domain="clglow",
                            **attrs)


CASES = [  # (B, H, SQ, SKV, HD, HDV, mask shape or None, head split/merge)
    (2, 3, 1, 37, 16, 16, (2, 1, 1, 37), False),   # decode, a per-batch key mask
    (1, 2, 5, 70, 24, 8, None, True),              # a ragged block, HD not a power of two
    (2, 2, 16, 33, 8, 12, (1, 1, 16, 33), False),  # 16 rows, a mask shared by batch and heads
    (1, 1, 3, 1, 4, 4, None, False),               # one key
]
if not SMALL:
    CASES += [(1, 12, 16, 300, 64, 64, (1, 12, 16, 300), True), (4, 8, 1, 1025, 64, 64, (4, 1, 1, 1025), False)]


@pytest.mark.parametrize("b,h,sq,skv,hd,hdv,mshape,split", CASES, ids=str)
def test_fused_attention_block(b, h, sq, skv, hd, hdv, mshape, split):
    q, k, v = rand(b, h, sq, hd), rand(b, h, skv, hd), rand(b, h, skv, hdv)
    mask = rand(*mshape) if mshape else None
    expected = want(q, k, v, 0.25, mask)
    feeds = {"q": q.transpose(0, 2, 1, 3).copy() if split else q, "k": k, "v": v}
    if mask is not None:
        feeds["mask"] = mask
    nd = node(mask is not None, [0, 2, 1, 3] if split else None, [0, 2, 1, 3] if split else None)
    expected = expected.transpose(0, 2, 1, 3) if split else expected
    launches = lower(nd, feeds, {}, {"y": (expected.shape, np.float32)}, device=gpu_local())
    assert [ln.kernel for ln in launches] == ["attn_block"]
    check(nd, feeds, {}, expected=[expected.astype(np.float32)], device=gpu_local())


POINTS = space(gpu_local(), BlockShape(1, 2, 7, 45, 16, 20, True))


# On Oclgrind (XGEMM_SMALL): the default and the smallest groups with one and with all rows per group
@pytest.mark.parametrize("wg,rq", [POINTS[0]] + [p for p in POINTS if p[0] == 32][::3] if SMALL else POINTS, ids=str)
def test_every_point(wg, rq):
    """Each (work-group size, rows per group) of the space on one ragged masked shape."""
    s = BlockShape(1, 2, 7, 45, 16, 20, True)
    q, k, v, m = rand(1, 2, 7, 16), rand(1, 2, 45, 16), rand(1, 2, 45, 20), rand(1, 2, 7, 45)
    st = [2 * 7 * 16, 7 * 16, 16, 2 * 45 * 16, 45 * 16, 16, 2 * 45 * 20, 45 * 20, 20, 2 * 7 * 20, 7 * 20, 20,
          2 * 7 * 45, 7 * 45, 45, 1]
    launch = block_launch(s, wg, rq, Buf("q"), Buf("k"), Buf("v"), Buf("m"), Buf("y"), st, 0.5)
    got = execute([launch], {"q": q, "k": k, "v": v, "m": m}, {"y": np.empty((1, 2, 7, 20), np.float32)})["y"]
    np.testing.assert_allclose(got, want(q, k, v, 0.5, m), rtol=1e-4, atol=1e-5)


def test_row_masked_to_minus_infinity_is_nan():
    """A row whose keys are all -inf gives NaN (ONNX Softmax's result), the other rows are finite."""
    q, k, v = rand(1, 1, 3, 8), rand(1, 1, 9, 8), rand(1, 1, 9, 8)
    mask = np.zeros((1, 1, 3, 9), np.float32)
    mask[0, 0, 1] = -np.inf
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    launches = lower(node(True), feeds, {}, {"y": ((1, 1, 3, 8), np.float32)}, device=gpu_local())
    got = execute(launches, feeds, {"y": np.empty((1, 1, 3, 8), np.float32)})["y"]
    assert np.isnan(got[0, 0, 1]).all() and np.isfinite(got[0, 0, [0, 2]]).all()
    np.testing.assert_allclose(got[0, 0, [0, 2]], want(q, k, v, 0.25, mask)[0, 0, [0, 2]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family,local", [("gpu", "local"), ("gpu", "global"), ("cpu", "global"), ("cpu", "local")])
def test_selection(family, local):
    """The work-group kernel only under the GPU family with dedicated local memory; every choice right."""
    if SMALL and not (family == "gpu" and local == "local"):
        pytest.skip("attention.cl's row kernels under Oclgrind: tests/oclgrind/test_oclgrind.py's CPU-family run")
    target = dataclasses.replace(device_info().with_family(family), local_mem_type=local)
    q, k, v = rand(1, 2, 4, 16), rand(1, 2, 20, 16), rand(1, 2, 20, 16)
    feeds = {"q": q, "k": k, "v": v}
    kernels = [ln.kernel for ln in lower(node(False), feeds, {}, {"y": ((1, 2, 4, 16), np.float32)}, device=target)]
    assert ("attn_block" in kernels) == (family == "gpu" and local == "local"), kernels
    check(node(False), feeds, {}, expected=[want(q, k, v, 0.25).astype(np.float32)], device=target)


def test_space_within_a_small_device():
    """Work-group sizes and local memory within the device's limits; keys whose scores exceed its
    local memory leave the row kernels (not applicable)."""
    small = Target(max_work_group_size=64, max_work_item_sizes=(64, 64, 64), local_mem_size=4096, family="gpu")
    s = BlockShape(1, 4, 16, 200, 64, 64)
    pts = space(small, s)
    assert pts and all(wg <= 64 and s.local_bytes(wg, rq) <= 4096 for wg, rq in pts)
    assert block_applicable(small, BlockShape(1, 4, 1, 2000, 64, 64)) is not None
    assert block_applicable(small, s) is None
    fam = FAMILIES["gpu_attention"]
    key = dataclasses.astuple(s)
    assert fam.space(small, key)[0] == fam.default(small, key)


def test_family_benchmark_points_agree():
    """Every point's benchmark launch (what `clglow tune` times) runs and gives the default's result."""
    if SMALL:
        pytest.skip("every point again: test_every_point covers them on a simulator")
    target, s = gpu_local(), BlockShape(2, 2, 6, 50, 32, 32, True)
    fam, key = FAMILIES["gpu_attention"], dataclasses.astuple(s)
    arrays, results = None, []
    for p in fam.space(target, key):
        launch, sizes = fam.bench(target, key, p)
        if arrays is None:
            arrays = {name: rand(n // 4) for name, n in sizes.items() if name != "Y"}
        results.append(execute([launch], arrays, {"Y": np.empty(sizes["Y"] // 4, np.float32)})["Y"])
    assert len(results) > 1
    for got in results[1:]:
        np.testing.assert_allclose(got, results[0], rtol=1e-5, atol=1e-6)


def test_session_decoder_attention_block():
    """A decoder step's attention graph (head split, scores, scale, key mask, Softmax, context, head
    merge) through a session on a Device whose local memory is called dedicated: fused, run as
    attn_block (with the planner's buffers and start-up no-op launch), vs onnxruntime."""
    if SMALL:
        pytest.skip("a session under Oclgrind's uninitialised-value checker misreports its inputs "
                    "(tests/oclgrind/test_oclgrind_select.py's docstring)")
    import sys

    import clglow
    from clglow.runtime import device as D
    from onnx import TensorProto as T, numpy_helper

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import models  # tests/models.py

    s, t, h, d = 3, 29, 2, 16
    nodes = [helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qt", "kt"], ["qk"]), helper.make_node("Mul", ["qk", "scale"], ["qs"]),
             helper.make_node("Add", ["qs", "mask"], ["sc"]), helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["ctx"]),
             helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3])]
    mask = np.where(RNG.random((1, 1, 1, t)) < 0.2, np.float32(-3.4e38), np.float32(0)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale"), numpy_helper.from_array(mask, "mask")]
    ins = [helper.make_tensor_value_info(n, T.FLOAT, sh) for n, sh in
           (("q", [1, s, h, d]), ("k", [1, h, t, d]), ("v", [1, h, t, d]))]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [1, s, h, d])]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"q": rand(1, s, h, d), "k": rand(1, h, t, d), "v": rand(1, h, t, d)}
    base = D.select_device()
    dev = D.Device(base.context, base.cl_device)
    dev.info = dataclasses.replace(dev.info, local_mem_type="local")
    sess = clglow.InferenceSession(model.SerializeToString(), clglow.SessionOptions(target="gpu", tune=False),
                                   device=dev)
    (got,) = sess.run(None, feeds)
    np.testing.assert_allclose(got, models.ort_run(model, feeds)[0], rtol=1e-4, atol=1e-5)
    assert [n.op_type for n in sess.graph.nodes] == ["FusedAttention"]
    assert any(o.startswith("-DSKV_MAX=") for (_, opts) in dev.cache._memory for o in opts)  # attn_block built
