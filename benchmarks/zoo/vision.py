"""Vision models of the zoo: timm CNNs and vision transformers, torchvision classification,
segmentation, detection and video models; random seeded weights, nothing downloaded."""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from .spec import Built, ZooModel

SEED = 0


def _image(size: int = 224, batch: int = 1, channels: int = 3) -> Any:
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(batch, channels, size, size, generator=g)


def _timm(name: str, size: int = 224, **kwargs: Any) -> Callable[[], Built]:
    """A builder of timm model `name` (pretrained=False; kwargs override its config)."""

    def build() -> Built:
        import timm
        import torch

        torch.manual_seed(SEED)
        m = timm.create_model(name, pretrained=False, **kwargs).eval()
        return Built(m, (_image(size),), ["image"], ["logits"])

    return build


def _tv_classifier(name: str, size: int = 224) -> Callable[[], Built]:
    def build() -> Built:
        import torch
        import torchvision

        torch.manual_seed(SEED)
        m = torchvision.models.get_model(name, weights=None).eval()
        return Built(m, (_image(size),), ["image"], ["logits"])

    return build


def _deeplab() -> Built:
    import torch
    import torchvision

    class Seg(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
                weights=None, weights_backbone=None, aux_loss=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)["out"]

    torch.manual_seed(SEED)
    return Built(Seg().eval(), (_image(320),), ["image"], ["mask"])


def _ssdlite() -> Built:
    import torch
    import torchvision

    class Det(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
                weights=None, weights_backbone=None, num_classes=91)

        def forward(self, x: torch.Tensor) -> tuple:
            d = self.net(list(x))[0]
            return d["boxes"], d["scores"], d["labels"]

    torch.manual_seed(SEED)
    return Built(Det().eval(), (torch.rand(1, 3, 320, 320, generator=torch.Generator().manual_seed(1)),),
                 ["image"], ["boxes", "scores", "labels"])


def _r3d() -> Built:
    import torch
    import torchvision

    torch.manual_seed(SEED)
    m = torchvision.models.video.r3d_18(weights=None).eval()
    clip = torch.randn(1, 3, 8, 64, 64, generator=torch.Generator().manual_seed(1))
    return Built(m, (clip,), ["clip"], ["logits"])


def _swin_small() -> Callable[[], Built]:
    # swin-tiny's layout (4 stages, window 7) at half the width and 2 blocks per stage
    return _timm("swin_tiny_patch4_window7_224", embed_dim=48, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16))


def _models() -> List[ZooModel]:
    timm_rows: Dict[str, tuple] = {
        "convnext_atto": ("ConvNeXt-atto: 7x7 depthwise, LayerNorm, GELU MLP", _timm("convnext_atto")),
        "mobilenetv3_small": ("MobileNetV3-small: depthwise, SE, hard-swish", _timm("mobilenetv3_small_100")),
        "regnetx_002": ("RegNetX-200MF: grouped 3x3 convs", _timm("regnetx_002")),
        "efficientnet_lite0": ("EfficientNet-lite0: depthwise, ReLU6", _timm("efficientnet_lite0")),
        "ghostnet": ("GhostNet-1.0: ghost modules, SE, concat", _timm("ghostnet_100")),
        "mobilevit_xxs": ("MobileViT-xxs: convs + transformer blocks, 256x256", _timm("mobilevit_xxs", 256)),
        "vit_tiny": ("ViT-tiny/16 (timm)", _timm("vit_tiny_patch16_224")),
        "deit_tiny_distilled": ("DeiT-tiny/16 distilled: class + distillation tokens, two heads",
                                _timm("deit_tiny_distilled_patch16_224")),
        "swin_small": ("Swin (tiny layout, width 48, 2 blocks per stage): windowed attention", _swin_small()),
        "levit_128s": ("LeViT-128S: conv stem, attention with BatchNorm", _timm("levit_128s")),
        "poolformer_s12": ("PoolFormer-S12: average-pool token mixer, GroupNorm", _timm("poolformer_s12")),
        "mixer_s16": ("MLP-Mixer-S/16: token and channel MLPs", _timm("mixer_s16_224")),
        "edgenext_xx_small": ("EdgeNeXt-xx-small: conv encoders + transposed attention",
                              _timm("edgenext_xx_small", 256)),
        "fastvit_t8": ("FastViT-T8: reparameterisable convs, RepMixer", _timm("fastvit_t8", 256)),
    }
    out = [ZooModel(k, "timm", d, b, ("vit",) if "vit" in k or "deit" in k else ()) for k, (d, b) in timm_rows.items()]
    out += [
        ZooModel("deeplabv3_mobilenet_v3", "torchvision", "DeepLabV3 + MobileNetV3-large, 320x320 segmentation",
                 _deeplab),
        # 3504 nodes with data-dependent shapes, run in stages (first run ~2 s now; once over 9
        # minutes): 120 s for it; "detection": its near-tied random-weight scores are checked by
        # benchmarks.zoo.detection when the whole model's detections differ
        ZooModel("ssdlite320", "torchvision", "SSDlite320 + MobileNetV3-large detection (NMS, TopK)", _ssdlite,
                 ("detection",), timeout_s=120),
        ZooModel("shufflenet_v2_x0_5", "torchvision", "ShuffleNetV2 x0.5: channel shuffle, split",
                 _tv_classifier("shufflenet_v2_x0_5")),
        ZooModel("mnasnet0_5", "torchvision", "MnasNet 0.5", _tv_classifier("mnasnet0_5")),
        ZooModel("regnet_y_400mf", "torchvision", "RegNetY-400MF: grouped convs, SE", _tv_classifier("regnet_y_400mf")),
        ZooModel("r3d_18", "torchvision", "R3D-18 video, clip of 8 frames at 64x64 (Conv3d)", _r3d),
    ]
    return out


MODELS: List[ZooModel] = _models()
