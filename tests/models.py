"""Test-only model builders: seeded, onnx.checker(full_check)-valid, runnable by onnxruntime.

Each builder returns an ``onnx.ModelProto``; see ``MODEL_SPECS`` at the bottom for the
input/output names, dtypes and shapes of each, and ``sample_inputs`` for seeded feeds.
"""
from __future__ import annotations

import math
from typing import Callable, Literal, Mapping

import numpy as np
import onnx

from clglow.models import resnet50
from clglow.models._graph import GraphBuilder, TensorProto
from clglow.models.calibrate import calibrate_batchnorm, scale_logits

Dim = int | str


def ort_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> list[np.ndarray]:
    """Run a model with onnxruntime (CPU provider): the test oracle."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(outputs, dict(feeds))

# --------------------------------------------------------------------------------------------
# Transformer pieces
# --------------------------------------------------------------------------------------------


def _linear(g: GraphBuilder, x: str, d_in: int, d_out: int, name: str, gain: float = 1.0) -> str:
    """MatMul + Add bias (the torch.onnx export of nn.Linear on a 3-D input)."""
    w = g.he_normal((d_in, d_out), d_in, gain=gain)
    b = (0.02 * g.rng.standard_normal(d_out)).astype(np.float32)
    y = g.node("MatMul", [x, g.const(f"{name}.weight", w)], f"{name}.mm")
    return g.node("Add", [y, g.const(f"{name}.bias", b)], f"{name}.out")


def _layer_norm(g: GraphBuilder, x: str, d: int, name: str) -> str:
    """LayerNormalization-17 over the last axis."""
    gamma = (1.0 + 0.05 * g.rng.standard_normal(d)).astype(np.float32)
    beta = (0.05 * g.rng.standard_normal(d)).astype(np.float32)
    ins = [x, g.const(f"{name}.weight", gamma), g.const(f"{name}.bias", beta)]
    return g.node("LayerNormalization", ins, f"{name}.out", axis=-1, epsilon=1e-5)


def _gelu_erf(g: GraphBuilder, x: str, name: str) -> str:
    """x * 0.5 * (1 + Erf(x / sqrt(2))) as exported by torch (exact GELU)."""
    t = g.node("Div", [x, g.f32("sqrt2", math.sqrt(2.0))], f"{name}.div")
    t = g.node("Erf", [t], f"{name}.erf")
    t = g.node("Add", [t, g.f32("one", 1.0)], f"{name}.add")
    t = g.node("Mul", [x, t], f"{name}.mul")
    return g.node("Mul", [t, g.f32("half", 0.5)], f"{name}.out")


def _gelu_tanh(g: GraphBuilder, x: str, name: str) -> str:
    """0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) (GPT-2 GELU), with Pow."""
    x3 = g.node("Pow", [x, g.f32("three", 3.0)], f"{name}.pow")
    t = g.node("Mul", [x3, g.f32("c", 0.044715)], f"{name}.cube")
    t = g.node("Add", [x, t], f"{name}.inner")
    t = g.node("Mul", [t, g.f32("k", math.sqrt(2.0 / math.pi))], f"{name}.scale")
    t = g.node("Tanh", [t], f"{name}.tanh")
    t = g.node("Add", [t, g.f32("one", 1.0)], f"{name}.add")
    t = g.node("Mul", [x, t], f"{name}.mul")
    return g.node("Mul", [t, g.f32("half", 0.5)], f"{name}.out")


def _attention(
    g: GraphBuilder, x: str, d: int, heads: int, name: str, additive_mask: str | None
) -> str:
    """Multi-head self-attention on x [B, S, D]; additive_mask broadcasts to [B, H, S, S]."""
    dh = d // heads
    split = g.i64("heads_shape", [0, 0, heads, dh])

    def proj(kind: str, perm: list[int]) -> str:
        t = _linear(g, x, d, d, f"{name}.{kind}", gain=1.0)
        t = g.node("Reshape", [t, split], f"{name}.{kind}.heads")
        return g.node("Transpose", [t], f"{name}.{kind}.t", perm=perm)

    q = proj("q", [0, 2, 1, 3])  # [B, H, S, dh]
    k = proj("k", [0, 2, 3, 1])  # [B, H, dh, S]
    v = proj("v", [0, 2, 1, 3])
    s = g.node("MatMul", [q, k], f"{name}.scores")
    s = g.node("Mul", [s, g.f32("inv_sqrt_dh", 1.0 / math.sqrt(dh))], f"{name}.scaled")
    if additive_mask is not None:
        s = g.node("Add", [s, additive_mask], f"{name}.masked")
    p = g.node("Softmax", [s], f"{name}.probs", axis=-1)
    o = g.node("MatMul", [p, v], f"{name}.ctx")
    o = g.node("Transpose", [o], f"{name}.ctx.t", perm=[0, 2, 1, 3])
    o = g.node("Reshape", [o, g.i64("merge_shape", [0, 0, d])], f"{name}.ctx.merged")
    return _linear(g, o, d, d, f"{name}.o", gain=1.0)


def _positions(g: GraphBuilder, ids: str, max_pos: int, d: int) -> str:
    """Positional embeddings [S, D] for the dynamic sequence length of ids [B, S]."""
    shape = g.node("Shape", [ids], "ids_shape")
    seq = g.node("Gather", [shape, g.i64("one_idx", 1)], "seq_len", axis=0)  # scalar
    pos = g.node("Range", [g.i64("zero", 0), seq, g.i64("step", 1)], "positions")
    table = (0.1 * g.rng.standard_normal((max_pos, d))).astype(np.float32)
    return g.node("Gather", [g.const("pos_embedding", table), pos], "pos_emb", axis=0)


def transformer_encoder(
    batch: Dim = 1,
    seq: Dim = "seq_len",
    vocab: int = 1000,
    d_model: int = 64,
    heads: int = 4,
    ffn: int = 256,
    layers: int = 2,
    max_pos: int = 512,
    seed: int = 0,
) -> onnx.ModelProto:
    """BERT-style post-LN encoder (opset 17).

    Inputs: ``input_ids`` int64 [batch, seq], ``attention_mask`` float32 [batch, seq] (1 keep,
    0 pad). Output: ``last_hidden_state`` float32 [batch, seq, d_model].
    """
    g = GraphBuilder("transformer_encoder", opset=17, seed=seed)
    ids = g.input("input_ids", TensorProto.INT64, [batch, seq])
    mask = g.input("attention_mask", TensorProto.FLOAT, [batch, seq])
    emb = (0.5 * g.rng.standard_normal((vocab, d_model))).astype(np.float32)
    x = g.node("Gather", [g.const("word_embedding", emb), ids], "tok_emb", axis=0)
    x = g.node("Add", [x, _positions(g, ids, max_pos, d_model)], "emb_sum")
    x = _layer_norm(g, x, d_model, "emb_ln")
    # [B, S] -> [B, 1, 1, S]; (1 - mask) * -10000
    m = g.unsqueeze(mask, [1, 2], "mask4d")
    m = g.node("Sub", [g.f32("mask_one", 1.0), m], "mask_inv")
    m = g.node("Mul", [m, g.f32("mask_neg", -10000.0)], "mask_add")
    for i in range(layers):
        name = f"layer{i}"
        a = _attention(g, x, d_model, heads, f"{name}.attn", m)
        x = _layer_norm(g, g.node("Add", [x, a], f"{name}.res1"), d_model, f"{name}.ln1")
        h = _linear(g, x, d_model, ffn, f"{name}.fc1", gain=2.0)
        h = _gelu_erf(g, h, f"{name}.gelu")
        h = _linear(g, h, ffn, d_model, f"{name}.fc2", gain=1.0)
        x = _layer_norm(g, g.node("Add", [x, h], f"{name}.res2"), d_model, f"{name}.ln2")
    x = g.node("Identity", [x], "last_hidden_state")
    g.output(x, TensorProto.FLOAT, [batch, seq, d_model])
    return g.model(doc=f"2-layer transformer encoder, seed={seed}")


def causal_decoder(
    vocab: int = 512,
    d_model: int = 64,
    heads: int = 4,
    layers: int = 2,
    max_pos: int = 256,
    mask: Literal["less", "trilu"] = "less",
    seed: int = 0,
) -> onnx.ModelProto:
    """GPT-style pre-LN decoder (opset 17) with a causal mask built in-graph.

    Input ``input_ids`` int64 [1, "seq"]; output ``logits`` float32 [1, "seq", vocab].
    ``mask="less"`` builds the mask with Range/Unsqueeze/Less; ``"trilu"`` with
    ConstantOfShape/Trilu/Cast; both then use Where(…, 0, -1e9).
    """
    g = GraphBuilder("causal_decoder", opset=17, seed=seed)
    ids = g.input("input_ids", TensorProto.INT64, [1, "seq"])
    emb = (0.5 * g.rng.standard_normal((vocab, d_model))).astype(np.float32)
    x = g.node("Gather", [g.const("wte", emb), ids], "tok_emb", axis=0)
    x = g.node("Add", [x, _positions(g, ids, max_pos, d_model)], "emb_sum")
    seq_len = "seq_len"  # produced by _positions
    if mask == "less":
        r = "positions"
        rows = g.unsqueeze(r, [1], "rows")  # [S, 1]
        cols = g.unsqueeze(r, [0], "cols")  # [1, S]
        future = g.node("Less", [rows, cols], "future")  # j > i
    elif mask == "trilu":
        s1 = g.unsqueeze(seq_len, [0], "seq_1d")
        ss = g.node("Concat", [s1, s1], "mask_shape", axis=0)
        ones = g.node(
            "ConstantOfShape", [ss], "ones", value=onnx.helper.make_tensor("v", TensorProto.INT64, [1], [1])
        )
        upper = g.node("Trilu", [ones, g.i64("diag", 1)], "strict_upper", upper=1)
        future = g.node("Cast", [upper], "future", to=TensorProto.BOOL)
    else:
        raise ValueError(f"mask must be 'less' or 'trilu', got {mask!r}")
    causal = g.node("Where", [future, g.f32("neg_big", -1e9), g.f32("zero_f", 0.0)], "causal_mask")
    for i in range(layers):
        name = f"h{i}"
        a = _attention(g, _layer_norm(g, x, d_model, f"{name}.ln1"), d_model, heads, f"{name}.attn", causal)
        x = g.node("Add", [x, a], f"{name}.res1")
        h = _linear(g, _layer_norm(g, x, d_model, f"{name}.ln2"), d_model, 4 * d_model, f"{name}.fc", 2.0)
        h = _gelu_tanh(g, h, f"{name}.gelu")
        h = _linear(g, h, 4 * d_model, d_model, f"{name}.proj", gain=1.0)
        x = g.node("Add", [x, h], f"{name}.res2")
    x = _layer_norm(g, x, d_model, "ln_f")
    w = g.he_normal((d_model, vocab), d_model, gain=4.0)
    y = g.node("MatMul", [x, g.const("lm_head", w)], "logits")
    g.output(y, TensorProto.FLOAT, [1, "seq", vocab])
    return g.model(doc=f"2-layer causal decoder, mask={mask}, seed={seed}")


# --------------------------------------------------------------------------------------------
# CNNs
# --------------------------------------------------------------------------------------------


def _conv(
    g: GraphBuilder,
    x: str,
    c_in: int,
    c_out: int,
    k: int,
    name: str,
    stride: int = 1,
    group: int = 1,
    bias: bool = False,
    pads: list[int] | None = None,
) -> str:
    w = g.he_normal((c_out, c_in // group, k, k), (c_in // group) * k * k)
    ins = [x, g.const(f"{name}.weight", w)]
    if bias:
        ins.append(g.const(f"{name}.bias", (0.05 * g.rng.standard_normal(c_out)).astype(np.float32)))
    return g.node(
        "Conv", ins, f"{name}.out", kernel_shape=[k, k], strides=[stride, stride],
        pads=pads if pads is not None else [k // 2] * 4, group=group,
    )


def _bn(g: GraphBuilder, x: str, c: int, name: str, var_scale: float = 2.0) -> str:
    """BatchNormalization with running var ~ the He-init conv output variance (so output ~1)."""
    rng = g.rng
    ins = [
        x,
        g.const(f"{name}.weight", rng.uniform(0.8, 1.2, c).astype(np.float32)),
        g.const(f"{name}.bias", (0.1 * rng.standard_normal(c)).astype(np.float32)),
        g.const(f"{name}.mean", (0.1 * rng.standard_normal(c)).astype(np.float32)),
        g.const(f"{name}.var", (var_scale * rng.uniform(0.8, 1.25, c)).astype(np.float32)),
    ]
    return g.node("BatchNormalization", ins, f"{name}.out", epsilon=1e-5)


def _silu(g: GraphBuilder, x: str, name: str) -> str:
    return g.node("Mul", [x, g.node("Sigmoid", [x], f"{name}.sig")], f"{name}.out")


def _relu6(g: GraphBuilder, x: str, name: str) -> str:
    return g.node("Clip", [x, g.f32("clip_min", 0.0), g.f32("clip_max", 6.0)], f"{name}.out")


def _squeeze_excite(g: GraphBuilder, x: str, c: int, name: str) -> str:
    r = max(c // 4, 8)
    s = g.node("GlobalAveragePool", [x], f"{name}.gap")
    s = _conv(g, s, c, r, 1, f"{name}.reduce", bias=True)
    s = _silu(g, s, f"{name}.act")
    s = _conv(g, s, r, c, 1, f"{name}.expand", bias=True)
    s = g.node("Sigmoid", [s], f"{name}.gate")
    return g.node("Mul", [x, s], f"{name}.out")


def mobilenet_se(
    batch: Dim = 1, image_size: int = 96, num_classes: int = 100, seed: int = 0, calibrate: bool = True
) -> onnx.ModelProto:
    """MobileNetV2/EfficientNet-style CNN (opset 13): inverted residuals, depthwise convs,
    squeeze-excite, SiLU and ReLU6 (Clip with min/max inputs), residual Adds, BatchNorm.

    Input ``input`` float32 [batch, 3, image_size, image_size]; output ``logits`` float32
    [batch, num_classes]. With ``calibrate`` the BN statistics and the classifier scale are
    measured with onnxruntime on two seeded images (activations stay O(1)).
    """
    g = GraphBuilder("mobilenet_se", opset=13, seed=seed)
    x = g.input("input", TensorProto.FLOAT, [batch, 3, image_size, image_size])
    y = _relu6(g, _bn(g, _conv(g, x, 3, 16, 3, "stem", stride=2), 16, "stem.bn"), "stem.act")
    c = 16
    # (expand ratio, out channels, stride, activation, squeeze-excite)
    cfg = [
        (1, 16, 1, "relu6", False),
        (4, 24, 2, "relu6", False),
        (4, 24, 1, "relu6", False),
        (4, 40, 2, "silu", True),
        (4, 40, 1, "silu", True),
        (6, 80, 2, "silu", True),
        (6, 80, 1, "silu", True),
    ]
    for i, (t, c_out, stride, act_kind, se) in enumerate(cfg):
        name = f"block{i}"
        act = _relu6 if act_kind == "relu6" else _silu
        h, ch = y, c
        if t != 1:
            ch = c * t
            h = act(g, _bn(g, _conv(g, h, c, ch, 1, f"{name}.expand"), ch, f"{name}.bn0"), f"{name}.act0")
        h = _conv(g, h, ch, ch, 3, f"{name}.dw", stride=stride, group=ch)
        h = act(g, _bn(g, h, ch, f"{name}.bn1"), f"{name}.act1")
        if se:
            h = _squeeze_excite(g, h, ch, f"{name}.se")
        h = _bn(g, _conv(g, h, ch, c_out, 1, f"{name}.project"), c_out, f"{name}.bn2", var_scale=4.0)
        y = g.node("Add", [y, h], f"{name}.res") if stride == 1 and c == c_out else h
        c = c_out
    y = _silu(g, _bn(g, _conv(g, y, c, 256, 1, "head"), 256, "head.bn"), "head.act")
    y = g.node("GlobalAveragePool", [y], "gap")
    y = g.node("Flatten", [y], "flat", axis=1)
    w = g.he_normal((num_classes, 256), 256, gain=1.0)
    b = (0.01 * g.rng.standard_normal(num_classes)).astype(np.float32)
    y = g.node("Gemm", [y, g.const("classifier.weight", w), g.const("classifier.bias", b)], "logits", transB=1)
    g.output(y, TensorProto.FLOAT, [batch, num_classes])
    model = g.model(doc=f"MobileNet-style CNN with squeeze-excite, seed={seed}")
    if calibrate:
        calib = {"input": np.random.default_rng([seed, 1]).standard_normal((2, 3, image_size, image_size), dtype=np.float32)}
        if isinstance(batch, int) and batch != 2:
            calib = {"input": np.concatenate([calib["input"][:1]] * batch)}
        model = calibrate_batchnorm(model, calib, ort_run, seed=seed)
        model = scale_logits(model, calib, ort_run, target_std=2.0)
    return model


def mlp(batch: Dim = "N", width: int = 1024, hidden: int = 4096, blocks: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A weight-bound MLP (Gemm -> Relu -> Gemm, `blocks` times; opset 17): one row reads every
    weight once, so a batch of rows costs little more than one row (what dynamic batching is for).
    Input ``x`` float32 [batch, width]; output ``y`` float32 [batch, width]."""
    g = GraphBuilder("mlp", opset=17, seed=seed)
    y = g.input("x", TensorProto.FLOAT, [batch, width])
    for i in range(blocks):
        for j, (d_in, d_out) in enumerate(((width, hidden), (hidden, width))):
            w = g.he_normal((d_in, d_out), d_in, gain=0.5 if j else 1.0)
            b = (0.02 * g.rng.standard_normal(d_out)).astype(np.float32)
            y = g.node("Gemm", [y, g.const(f"fc{i}{j}.weight", w), g.const(f"fc{i}{j}.bias", b)], f"fc{i}{j}")
            if j == 0:
                y = g.node("Relu", [y], f"relu{i}")
    y = g.node("Identity", [y], "y")
    g.output(y, TensorProto.FLOAT, [batch, width])
    return g.model(doc=f"weight-bound MLP {width}-{hidden} x {blocks}, seed={seed}")


def pooling_cnn(batch: Dim = 1, image_size: int = 64, num_classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """A CNN exercising pooling corner cases (opset 11).

    MaxPool ceil_mode=1, AveragePool count_include_pad=1 with asymmetric pads, LRN, Concat,
    Dropout (inference), Identity, Flatten, Gemm, Softmax(axis=1) on 2-D.
    Input ``input`` float32 [batch, 3, image_size, image_size]; output ``probs`` float32
    [batch, num_classes].
    """
    g = GraphBuilder("pooling_cnn", opset=11, seed=seed)
    x = g.input("input", TensorProto.FLOAT, [batch, 3, image_size, image_size])
    y = g.node("Relu", [_conv(g, x, 3, 16, 3, "conv1", bias=True)], "relu1")
    # 64 -> 32 with ceil_mode (floor would give 31)
    y = g.node("MaxPool", [y], "pool1", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    y = g.node("LRN", [y], "lrn1", size=5, alpha=1e-4, beta=0.75, bias=1.0)
    a = g.node("Relu", [_conv(g, y, 16, 8, 1, "branch1x1", bias=True)], "b1")
    b = g.node("Relu", [_conv(g, y, 16, 8, 3, "branch3x3", bias=True)], "b3")
    c = g.node(
        "MaxPool", [y], "b_pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]
    )
    y = g.node("Concat", [a, b, c], "concat", axis=1)  # 32 channels
    # asymmetric pads (end only), zero padding counted in the average
    y = g.node(
        "AveragePool", [y], "pool2", kernel_shape=[3, 3], strides=[2, 2],
        pads=[0, 0, 1, 1], count_include_pad=1,
    )
    y = g.node("Relu", [_conv(g, y, 32, 32, 3, "conv2", stride=1, bias=True, pads=[1, 0, 1, 2])], "relu2")
    y = g.node(
        "AveragePool", [y], "pool3", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
        pads=[0, 1, 0, 0], count_include_pad=1,
    )
    y = g.node("Dropout", [y], "dropout", ratio=0.3)
    y = g.node("Identity", [y], "identity")
    y = g.node("Flatten", [y], "flat", axis=1)
    feat = _pooling_cnn_features(image_size)
    w = g.he_normal((num_classes, feat), feat, gain=8.0)
    bias = (0.05 * g.rng.standard_normal(num_classes)).astype(np.float32)
    y = g.node("Gemm", [y, g.const("fc.weight", w), g.const("fc.bias", bias)], "fc", transB=1)
    y = g.node("Softmax", [y], "probs", axis=1)
    g.output(y, TensorProto.FLOAT, [batch, num_classes])
    return g.model(doc=f"pooling corner cases CNN, seed={seed}")


def _pooling_cnn_features(s: int) -> int:
    """Flattened feature count of pooling_cnn for an s x s input."""
    s = math.ceil((s - 3) / 2) + 1  # maxpool ceil
    s = (s + 1 - 3) // 2 + 1  # avgpool pads end 1
    h, w = s + 2 - 3 + 1, s + 2 - 3 + 1  # conv2 pads [1,0,1,2]: H 1+1, W 0+2
    h = math.ceil((h - 2) / 2) + 1
    w = math.ceil((w + 1 - 2) / 2) + 1
    return 32 * h * w


def resnet50_dynamic_batch(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """clglow.models.resnet50 with a symbolic batch ``N``: ``data`` [N,3,224,224] -> ``logits`` [N,1000]."""
    return resnet50(opset=opset, batch="N", seed=seed)


# --------------------------------------------------------------------------------------------
# Registry and inputs
# --------------------------------------------------------------------------------------------

#: name -> (builder, {input name: (numpy dtype, shape with symbolic dims)}, [output names])
MODEL_SPECS: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, tuple[type, tuple[Dim, ...]]], list[str]]] = {
    "transformer_encoder": (
        transformer_encoder,
        {"input_ids": (np.int64, (1, "seq_len")), "attention_mask": (np.float32, (1, "seq_len"))},
        ["last_hidden_state"],
    ),
    "causal_decoder": (causal_decoder, {"input_ids": (np.int64, (1, "seq"))}, ["logits"]),
    "causal_decoder_trilu": (
        lambda: causal_decoder(mask="trilu"), {"input_ids": (np.int64, (1, "seq"))}, ["logits"],
    ),
    "mobilenet_se": (mobilenet_se, {"input": (np.float32, (1, 3, 96, 96))}, ["logits"]),
    "pooling_cnn": (pooling_cnn, {"input": (np.float32, (1, 3, 64, 64))}, ["probs"]),
    "resnet50_dynamic_batch": (resnet50_dynamic_batch, {"data": (np.float32, ("N", 3, 224, 224))}, ["logits"]),
}


def sample_inputs(model: onnx.ModelProto, seed: int = 0, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded feeds for a model's graph inputs; symbolic dims take values from ``dims``
    (default 7 for sequence-like names, 2 otherwise). int64 inputs named ``*ids`` draw token
    ids below the vocabulary size of the first Gather table; ``attention_mask`` gets a padded
    tail on the last batch row."""
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    inits = {t.name: t for t in model.graph.initializer}
    vocab = 2
    for n in model.graph.node:
        if n.op_type == "Gather" and n.input[0] in inits:
            vocab = int(inits[n.input[0]].dims[0])
            break
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = []
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            else:
                shape.append(dims.setdefault(d.dim_param, 7 if "seq" in d.dim_param else 2))
        et = vi.type.tensor_type.elem_type
        if et == TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, vocab, size=shape, dtype=np.int64)
        elif vi.name == "attention_mask":
            m = np.ones(shape, dtype=np.float32)
            if shape[-1] > 2:
                m[-1, -2:] = 0.0
            feeds[vi.name] = m
        else:
            feeds[vi.name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds
