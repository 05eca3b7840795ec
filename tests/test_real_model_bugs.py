"""Regression graphs of the refusals real exports hit (issue 21, part 1), each built here with
onnx.helper and checked against onnxruntime:

- GatherElements with indices shorter than the data along the axis (Hugging Face BertModel's
  position ids: data [1, 64], indices [1, 32]) failed while folding constants, because
  onnx.reference's GatherElements returns one element per row there; clglow's host runs it by
  numpy's take_along_axis (runtime/host.py);
- a fusion that cannot be lowered refused the model (timm mixer_s16_224: the token-mixing MatMul
  after a Transpose became a FusedMatMul view of ranks 3 x 2 that its lowering refuses). The rule
  for every fusion: a fused node that no kernel covers, or whose lowering fails, runs as the
  nodes it replaced (Node.unfused, partition.unfuse, runtime/engine.Engine._build).
"""
from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.lower.base import GENERIC_TARGET, REGISTRY

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402  (tests/models.py: ort_run)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name: str, a, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, dtype=dtype), name)


def _check(model: onnx.ModelProto, feeds: dict, atol: float = 1e-4, **session_kwargs) -> clglow.InferenceSession:
    """Run on clglow and onnxruntime; every output matches. Returns the session."""
    ref = models.ort_run(model, feeds)
    sess = clglow.InferenceSession(model.SerializeToString(), **session_kwargs)
    got = sess.run(None, feeds)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=atol)
    return sess


# --- GatherElements with indices shorter than the data ----------------------------------------------
def _gather_elements_model(const_indices: bool, data_shape=(1, 64), idx_shape=(1, 32), axis=1):
    """Six nodes as BertModel exports them: position ids Range -> Unsqueeze (data [1, 64], folded),
    GatherElements of them by indices shorter along the axis, Cast, Add to the input."""
    rng = np.random.default_rng(3)
    n = data_shape[axis]
    idx = rng.integers(-n, n, size=idx_shape).astype(np.int64)
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Reshape", ["r", "dshape"], ["pos"]),
             helper.make_node("GatherElements", ["pos", "idx"], ["ge"], axis=axis),
             helper.make_node("Cast", ["ge"], ["gef"], to=T.FLOAT),
             helper.make_node("Mul", ["gef", "scale"], ["gs"]),
             helper.make_node("Add", ["x", "gs"], ["y"])]
    inits = [_c("start", 0, np.int64), _c("limit", int(np.prod(data_shape)), np.int64), _c("delta", 1, np.int64),
             _c("dshape", list(data_shape), np.int64), _c("scale", 0.01)]
    inputs = [_vi("x", T.FLOAT, list(idx_shape))]
    feeds = {"x": rng.standard_normal(idx_shape).astype(np.float32)}
    if const_indices:
        inits.append(_c("idx", idx, np.int64))
    else:
        inputs.append(_vi("idx", T.INT64, list(idx_shape)))
        feeds["idx"] = idx
    return _model(nodes, inputs, [_vi("y", T.FLOAT, list(idx_shape))], inits), feeds


@pytest.mark.parametrize("const_indices", [True, False], ids=["folded", "live"])
def test_gather_elements_indices_shorter_than_data(const_indices):
    model, feeds = _gather_elements_model(const_indices)
    _check(model, feeds)


@pytest.mark.parametrize("data_shape,idx_shape,axis", [((3, 70), (2, 40), 1), ((40, 5), (7, 5), 0),
                                                       ((2, 3, 50), (2, 2, 9), -1)])
def test_gather_elements_smaller_indices_folded(data_shape, idx_shape, axis):
    model, feeds = _gather_elements_model(True, data_shape, idx_shape, axis)
    _check(model, feeds)


def _bert_embeddings(seq: int = 32, max_pos: int = 64, vocab: int = 50, d: int = 32, symbolic: bool = False):
    """A BertModel-style embedding and one attention layer: word + position (GatherElements of the
    buffered position ids by Range(0, L) ids) + token-type embeddings, a LayerNorm written out in
    primitive ops, an attention mask (1 - mask) * -10000 added to the scores."""
    rng = np.random.default_rng(5)
    seq_dim = "seq" if symbolic else seq
    nodes = [
        helper.make_node("Gather", ["wte", "input_ids"], ["we"]),
        helper.make_node("Shape", ["input_ids"], ["ishape"]),
        helper.make_node("Gather", ["ishape", "one"], ["L"], axis=0),
        helper.make_node("Range", ["zero", "L", "one"], ["ar"]),
        helper.make_node("Unsqueeze", ["ar", "axes0"], ["ar1"]),
        helper.make_node("Range", ["zero", "maxpos", "one"], ["pr"]),
        helper.make_node("Unsqueeze", ["pr", "axes0"], ["buffered"]),          # [1, max_pos]
        helper.make_node("GatherElements", ["buffered", "ar1"], ["pos_ids"], axis=1),  # [1, L]
        helper.make_node("Gather", ["wpe", "pos_ids"], ["pe"]),
        helper.make_node("Gather", ["wtt", "zero"], ["te"]),
        helper.make_node("Add", ["we", "pe"], ["e1"]),
        helper.make_node("Add", ["e1", "te"], ["e2"]),
        helper.make_node("ReduceMean", ["e2"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["e2", "mu"], ["dev"]),
        helper.make_node("Pow", ["dev", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["dev", "sd"], ["nrm"]),
        helper.make_node("Mul", ["nrm", "gamma"], ["ng"]),
        helper.make_node("Add", ["ng", "beta"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["mf"], to=T.FLOAT),
        helper.make_node("Sub", ["onef", "mf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["madd"]),
        helper.make_node("Unsqueeze", ["madd", "axes1"], ["mask"]),            # [B, 1, L]
        helper.make_node("MatMul", ["h", "wq"], ["q"]),
        helper.make_node("MatMul", ["h", "wk"], ["k"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Add", ["ss", "mask"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "h"], ["y"]),
    ]
    inits = [_c("wte", rng.standard_normal((vocab, d))), _c("wpe", rng.standard_normal((max_pos, d))),
             _c("wtt", rng.standard_normal((2, d))), _c("one", 1, np.int64), _c("zero", 0, np.int64),
             _c("maxpos", max_pos, np.int64), _c("axes0", [0], np.int64), _c("axes1", [1], np.int64),
             _c("two", 2.0), _c("eps", 1e-12), _c("gamma", rng.random(d) + 0.5), _c("beta", rng.standard_normal(d)),
             _c("onef", 1.0), _c("neg", -10000.0), _c("wq", rng.standard_normal((d, d)) * 0.2),
             _c("wk", rng.standard_normal((d, d)) * 0.2), _c("scale", d ** -0.5)]
    model = _model(nodes, [_vi("input_ids", T.INT64, [1, seq_dim]), _vi("attention_mask", T.INT64, [1, seq_dim])],
                   [_vi("y", T.FLOAT, [1, seq_dim, d])], inits, opset=13)
    return model


def _bert_feeds(seq: int, vocab: int = 50, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((1, seq), np.int64)
    mask[0, seq - seq // 4:] = 0  # padding at the end
    return {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64), "attention_mask": mask}


def test_bert_embeddings_with_attention_mask():
    _check(_bert_embeddings(), _bert_feeds(32))


def test_bert_embeddings_symbolic_sequence():
    """The position ids fold per input shape (shapes.specialize): L = 32 and L = 20."""
    model = _bert_embeddings(symbolic=True)
    sess = clglow.InferenceSession(model.SerializeToString())
    for seq in (32, 20):
        feeds = _bert_feeds(seq, seed=seq)
        ref = models.ort_run(model, feeds)
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref[0], rtol=1e-4, atol=1e-4)


# --- MLP-mixer block ---------------------------------------------------------------------------------
def _gelu(x: str, y: str) -> list:
    return [helper.make_node("Div", [x, "sqrt2"], [f"{y}_d"]), helper.make_node("Erf", [f"{y}_d"], [f"{y}_e"]),
            helper.make_node("Add", [f"{y}_e", "onef"], [f"{y}_e1"]),
            helper.make_node("Mul", [x, f"{y}_e1"], [f"{y}_m"]), helper.make_node("Mul", [f"{y}_m", "half"], [y])]


def _mixer_block(b: int = 2, t: int = 16, c: int = 32, ht: int = 24, hc: int = 64) -> onnx.ModelProto:
    """One timm MixerBlock: x + T(mlp_tokens(T(LN(x)))), then + mlp_channels(LN(.)); the token
    MLP is a [B, C, T] x [T, H] MatMul after a Transpose, with bias and the erf Gelu."""
    rng = np.random.default_rng(7)

    def lin(name: str, i: int, o: int) -> list:
        return [_c(f"{name}_w", rng.standard_normal((i, o)) * i ** -0.5), _c(f"{name}_b", rng.standard_normal(o) * 0.1)]

    nodes = [helper.make_node("LayerNormalization", ["x", "g1", "b1"], ["ln1"], axis=-1, epsilon=1e-6),
             helper.make_node("Transpose", ["ln1"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t1", "tok1_w"], ["tm1"]), helper.make_node("Add", ["tm1", "tok1_b"], ["ta1"]),
             *_gelu("ta1", "tg"),
             helper.make_node("MatMul", ["tg", "tok2_w"], ["tm2"]), helper.make_node("Add", ["tm2", "tok2_b"], ["ta2"]),
             helper.make_node("Transpose", ["ta2"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Add", ["x", "t2"], ["r1"]),
             helper.make_node("LayerNormalization", ["r1", "g2", "b2"], ["ln2"], axis=-1, epsilon=1e-6),
             helper.make_node("MatMul", ["ln2", "ch1_w"], ["cm1"]), helper.make_node("Add", ["cm1", "ch1_b"], ["ca1"]),
             *_gelu("ca1", "cg"),
             helper.make_node("MatMul", ["cg", "ch2_w"], ["cm2"]), helper.make_node("Add", ["cm2", "ch2_b"], ["ca2"]),
             helper.make_node("Add", ["r1", "ca2"], ["y"])]
    inits = [_c("g1", rng.random(c) + 0.5), _c("b1", rng.standard_normal(c) * 0.1), _c("g2", rng.random(c) + 0.5),
             _c("b2", rng.standard_normal(c) * 0.1), _c("sqrt2", 2 ** 0.5), _c("onef", 1.0), _c("half", 0.5),
             *lin("tok1", t, ht), *lin("tok2", ht, t), *lin("ch1", c, hc), *lin("ch2", hc, c)]
    return _model(nodes, [_vi("x", T.FLOAT, [b, t, c])], [_vi("y", T.FLOAT, [b, t, c])], inits)


def test_mlp_mixer_block():
    model = _mixer_block()
    x = np.random.default_rng(1).standard_normal((2, 16, 32)).astype(np.float32)
    sess = _check(model, {"x": x})
    assert all(p.where == "opencl" for p in sess.placement)
    assert sum(p.op_type == "FusedMatMul" for p in sess.placement) == 4  # bias + Gelu epilogues kept


# --- the fallback rule, forced for each kind of fused node --------------------------------------------
def _fused_models() -> dict:
    """One small graph per fused op kind: {clglow op type: (model, feeds)}."""
    rng = np.random.default_rng(9)
    conv = _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("Relu", ["c"], ["y"])],
                  [_vi("x", T.FLOAT, [2, 3, 12, 12])], [_vi("y", T.FLOAT, [2, 8, 12, 12])],
                  [_c("w", rng.standard_normal((8, 3, 3, 3)) * 0.3), _c("b", rng.standard_normal(8))])
    matmul = _model([helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                     helper.make_node("MatMul", ["xt", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                     helper.make_node("Relu", ["a"], ["y"])],
                    [_vi("x", T.FLOAT, [2, 16, 8]), _vi("w", T.FLOAT, [2, 16, 12])], [_vi("y", T.FLOAT, [2, 8, 12])],
                    [_c("b", rng.standard_normal(12))])
    elementwise = _model([helper.make_node("Add", ["x", "z"], ["a"]), helper.make_node("Mul", ["a", "x"], ["m"]),
                          helper.make_node("Tanh", ["m"], ["y"])],
                         [_vi("x", T.FLOAT, [4, 33]), _vi("z", T.FLOAT, [4, 33])], [_vi("y", T.FLOAT, [4, 33])])
    ln_nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]), helper.make_node("Sub", ["x", "mu"], ["d"]),
                helper.make_node("Mul", ["d", "d"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["v"], axes=[-1]),
                helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
                helper.make_node("Div", ["d", "s"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
                helper.make_node("Add", ["ng", "bb"], ["y"])]
    layernorm = _model(ln_nodes, [_vi("x", T.FLOAT, [3, 5, 48])], [_vi("y", T.FLOAT, [3, 5, 48])],
                       [_c("eps", 1e-5), _c("g", rng.random(48) + 0.5), _c("bb", rng.standard_normal(48))], opset=13)
    feeds = {
        "FusedConv": {"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)},
        "FusedMatMul": {"x": rng.standard_normal((2, 16, 8)).astype(np.float32),
                        "w": rng.standard_normal((2, 16, 12)).astype(np.float32)},
        "FusedElementwise": {"x": rng.standard_normal((4, 33)).astype(np.float32),
                             "z": rng.standard_normal((4, 33)).astype(np.float32)},
        "LayerNormalization": {"x": rng.standard_normal((3, 5, 48)).astype(np.float32)},
    }
    built = {"FusedConv": conv, "FusedMatMul": matmul, "FusedElementwise": elementwise, "LayerNormalization": layernorm}
    return {k: (built[k], feeds[k]) for k in built}


FUSED_KINDS = ["FusedConv", "FusedMatMul", "FusedElementwise", "LayerNormalization"]


def _fused_kinds_in(sess: clglow.InferenceSession) -> set:
    return {p.op_type for p in sess.placement} & set(FUSED_KINDS)


@pytest.mark.parametrize("kind", FUSED_KINDS)
def test_fused_kind_is_made(kind):
    """Each graph of _fused_models does fuse (so the tests below test the fallback)."""
    model, feeds = _fused_models()[kind]
    assert kind in _fused_kinds_in(_check(model, feeds))


@pytest.mark.parametrize("kind", FUSED_KINDS)
def test_fused_lowering_failure_runs_the_original_nodes(kind, monkeypatch):
    def broken(ctx):
        raise RuntimeError("forced lowering failure")

    key = ("clglow", kind)
    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(REGISTRY[key], lower=broken))
    model, feeds = _fused_models()[kind]
    sess = _check(model, feeds)
    assert kind not in _fused_kinds_in(sess)
    assert all(p.where == "opencl" for p in sess.placement)


@pytest.mark.parametrize("kind", FUSED_KINDS)
def test_fused_node_refused_on_the_target_runs_the_original_nodes(kind, monkeypatch):
    """The passes fuse for a generic device; the session's Target refuses the fused node."""
    key = ("clglow", kind)
    op = REGISTRY[key]

    def refuse(node, graph, target):
        return op.supports(node, graph, target) if target is GENERIC_TARGET else "refused for this test"

    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(op, supports=refuse))
    model, feeds = _fused_models()[kind]
    sess = _check(model, feeds)
    assert kind not in _fused_kinds_in(sess)


@pytest.mark.parametrize("kind", FUSED_KINDS)
def test_fused_kernel_build_failure_runs_the_original_nodes(kind, monkeypatch):
    """A fused node whose OpenCL program fails to build (a driver bug, say) falls back to its
    original nodes; the error of a node with no originals still names it."""
    key = ("clglow", kind)
    op = REGISTRY[key]

    def unbuildable(ctx):  # `__kernel` defined away: every kernel of the program fails to compile
        return [dataclasses.replace(la, defines={**la.defines, "__kernel": "!"}) for la in op.lower(ctx)]

    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(op, lower=unbuildable))
    model, feeds = _fused_models()[kind]
    sess = _check(model, feeds)
    assert kind not in _fused_kinds_in(sess)
    assert all(p.where == "opencl" for p in sess.placement)


def test_unfused_kernel_build_failure_names_the_node(monkeypatch):
    key = ("", "Tanh")
    op = REGISTRY[key]
    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(
        op, lower=lambda ctx: [dataclasses.replace(la, defines={**la.defines, "__kernel": "!"})
                               for la in op.lower(ctx)]))
    model = _model([helper.make_node("Tanh", ["x"], ["y"], name="the_tanh")], [_vi("x", T.FLOAT, [3, 7])],
                   [_vi("y", T.FLOAT, [3, 7])])
    with pytest.raises(clglow.errors.CompileError, match="the_tanh"):
        clglow.InferenceSession(model).run(None, {"x": np.ones((3, 7), np.float32)})


def test_fallback_without_host_fallback(monkeypatch):
    """The original nodes run on the device: host fallback off changes nothing."""
    key = ("clglow", "FusedMatMul")
    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(REGISTRY[key], lower=lambda ctx: 1 / 0))
    monkeypatch.setenv("CLGLOW_HOST_FALLBACK", "0")
    model, feeds = _fused_models()["FusedMatMul"]
    _check(model, feeds)


def test_fallback_in_a_dynamic_batch(monkeypatch):
    """A failure at one input signature falls back there and at later ones."""
    key = ("clglow", "FusedConv")
    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(REGISTRY[key], lower=lambda ctx: 1 / 0))
    model, _ = _fused_models()["FusedConv"]
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    sess = clglow.InferenceSession(model.SerializeToString())
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 3, 12, 12)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], models.ort_run(model, {"x": x})[0],
                                   rtol=1e-4, atol=1e-4)
