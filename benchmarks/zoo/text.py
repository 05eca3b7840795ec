"""Hugging Face transformers models of the zoo, each from a small config object (a few layers,
hidden 128-256, random seeded weights, nothing downloaded). Attention is the eager
implementation: the TorchScript exporter traces it into plain MatMul/Softmax graphs, which
is what most exported transformer ONNX files look like."""
from __future__ import annotations

from typing import Any, Callable, List

from .spec import Built, ZooModel

SEED = 0
VOCAB = 8000


def _ids(seq: int, vocab: int = VOCAB, batch: int = 1) -> Any:
    import torch

    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(SEED + 1))


def _wrap(model: Any, fields: List[str], kwarg_names: List[str]) -> Any:
    """An nn.Module calling `model(**dict(zip(kwarg_names, args)))` and returning `fields`."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, *args: torch.Tensor) -> tuple:
            out = self.m(**dict(zip(kwarg_names, args)))
            return tuple(getattr(out, f) for f in fields)

    return Wrapped().eval()


def _encoder(cfg_fn: Callable[[], Any], model_fn: Callable[[Any], Any], seq: int,
             fields: List[str], mask: bool = True) -> Callable[[], Built]:
    """A token-in encoder builder: input_ids (+ attention_mask of ones) -> `fields`."""

    def build() -> Built:
        import torch

        torch.manual_seed(SEED)
        cfg = cfg_fn()
        cfg._attn_implementation = "eager"
        model = model_fn(cfg).eval()
        ids = _ids(seq, cfg.vocab_size)
        names = ["input_ids", "attention_mask"] if mask else ["input_ids"]
        inputs = (ids, torch.ones_like(ids)) if mask else (ids,)
        return Built(_wrap(model, fields, names), inputs, names, fields)

    return build


def _bert_cfg() -> Any:
    from transformers import BertConfig

    return BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=1024, max_position_embeddings=512)


def _distilbert_cfg() -> Any:
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=VOCAB, dim=256, n_layers=3, n_heads=4, hidden_dim=1024)


def _gpt2_cfg() -> Any:
    from transformers import GPT2Config

    return GPT2Config(vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=4, n_positions=512)


def _llama_cfg() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)


def _t5_cfg() -> Any:
    from transformers import T5Config

    return T5Config(vocab_size=VOCAB, d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_heads=8)


def _clip_cfg() -> Any:
    from transformers import CLIPTextConfig

    return CLIPTextConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                          num_attention_heads=4, max_position_embeddings=77)


def _auto(cls_name: str) -> Callable[[Any], Any]:
    def make(cfg: Any) -> Any:
        import transformers

        return getattr(transformers, cls_name)(cfg)

    return make


def _gpt2_decode() -> Built:
    """One GPT-2 decode step: a new token with 63 tokens of past keys/values in, logits and the
    grown keys/values out (the inputs and outputs a generation loop binds)."""
    import torch
    from transformers import DynamicCache, GPT2LMHeadModel

    torch.manual_seed(SEED)
    cfg = _gpt2_cfg()
    cfg._attn_implementation = "eager"
    model = GPT2LMHeadModel(cfg).eval()
    n_layer, past_len, heads, hd = cfg.n_layer, 63, cfg.n_head, cfg.n_embd // cfg.n_head

    class Decode(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor) -> tuple:
            cache = DynamicCache()
            for i in range(n_layer):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
            flat = []
            for layer in out.past_key_values.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    g = torch.Generator().manual_seed(SEED + 2)
    past = [torch.randn(1, heads, past_len, hd, generator=g) for _ in range(2 * n_layer)]
    names = ["input_ids", "attention_mask"] + [f"past_{k}_{i}" for i in range(n_layer) for k in ("key", "value")]
    outs = ["logits"] + [f"present_{k}_{i}" for i in range(n_layer) for k in ("key", "value")]
    inputs = (_ids(1), torch.ones(1, past_len + 1, dtype=torch.int64), *past)
    return Built(Decode().eval(), inputs, names, outs)


def _vit_hf() -> Built:
    import torch
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(SEED)
    cfg = ViTConfig(hidden_size=192, num_hidden_layers=4, num_attention_heads=3, intermediate_size=768,
                    image_size=224, patch_size=16)
    cfg._attn_implementation = "eager"
    model = ViTModel(cfg, add_pooling_layer=False).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED + 1))
    return Built(_wrap(model, ["last_hidden_state"], ["pixel_values"]), (x,), ["pixel_values"],
                 ["last_hidden_state"])


def _whisper_encoder() -> Built:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(SEED)
    cfg = WhisperConfig(d_model=256, encoder_layers=4, encoder_attention_heads=4, encoder_ffn_dim=1024,
                        num_mel_bins=80, max_source_positions=750, vocab_size=VOCAB)
    cfg._attn_implementation = "eager"
    model = WhisperEncoder(cfg).eval()
    x = torch.randn(1, 80, 1500, generator=torch.Generator().manual_seed(SEED + 1))
    return Built(_wrap(model, ["last_hidden_state"], ["input_features"]), (x,), ["input_features"],
                 ["last_hidden_state"])


def _wav2vec2() -> Built:
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(SEED)
    cfg = Wav2Vec2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                         conv_dim=(128,) * 7, num_conv_pos_embeddings=64, num_conv_pos_embedding_groups=16)
    cfg._attn_implementation = "eager"
    model = Wav2Vec2Model(cfg).eval()
    x = torch.randn(1, 16000, generator=torch.Generator().manual_seed(SEED + 1))
    return Built(_wrap(model, ["last_hidden_state"], ["input_values"]), (x,), ["input_values"],
                 ["last_hidden_state"])


MODELS: List[ZooModel] = [
    ZooModel("bert", "transformers", "BERT: 4 layers, hidden 256, 4 heads, sequence 128",
             _encoder(_bert_cfg, _auto("BertModel"), 128, ["last_hidden_state"]), ("launch",)),
    ZooModel("distilbert", "transformers", "DistilBERT: 3 layers, hidden 256, sequence 128",
             _encoder(_distilbert_cfg, _auto("DistilBertModel"), 128, ["last_hidden_state"]), ("launch",)),
    ZooModel("gpt2_prefill", "transformers", "GPT-2 LM: 4 layers, hidden 256, prompt of 64 tokens",
             _encoder(_gpt2_cfg, _auto("GPT2LMHeadModel"), 64, ["logits"])),
    ZooModel("gpt2_decode", "transformers", "GPT-2 LM decode step: 1 token, 63 past keys/values in and out",
             _gpt2_decode, ("launch",)),
    ZooModel("llama", "transformers", "Llama: 4 layers, hidden 256, 8 heads / 2 KV heads (GQA), rotary, 64 tokens",
             _encoder(_llama_cfg, _auto("LlamaForCausalLM"), 64, ["logits"])),
    ZooModel("t5_encoder", "transformers", "T5 encoder: 4 layers, d_model 256, relative position bias, 128 tokens",
             _encoder(_t5_cfg, _auto("T5EncoderModel"), 128, ["last_hidden_state"])),
    ZooModel("vit_hf", "transformers", "ViT (transformers): 4 layers, hidden 192, 224x224 / 16",
             _vit_hf, ("vit",)),
    ZooModel("whisper_encoder", "transformers", "Whisper encoder: 4 layers, d_model 256, 80 x 1500 mel frames",
             _whisper_encoder),
    ZooModel("wav2vec2", "transformers", "Wav2Vec2: conv feature extractor (128 ch) + 4 layers, 1 s of 16 kHz",
             _wav2vec2),
    ZooModel("clip_text", "transformers", "CLIP text encoder: 4 layers, hidden 256, 77 tokens, causal mask",
             _encoder(_clip_cfg, _auto("CLIPTextModel"), 77, ["last_hidden_state", "pooler_output"]),
             ("launch",)),
]
