"""Seeded random statistics for the parts of a freshly initialised model that would otherwise
make the comparison with onnxruntime blind.

A new model's BatchNorm layers are the identity (running mean 0, variance 1, weight 1, bias
0), so a wrong BatchNorm fold would still match; some heads and layer scales start at zero
(timm's MLP-Mixer head: every logit 0, any conv stack "matches"). Before export, every norm
layer gets random running statistics and affine parameters, and every parameter that is all
zeros gets small random values. Trained weights look like this too.
"""
from __future__ import annotations

from typing import Any

SEED = 1234


def perturb(module: Any, seed: int = SEED) -> Any:
    """Give `module` (in place) random BatchNorm statistics, random norm affine parameters and
    random values where a parameter is all zeros; return it."""
    import torch

    g = torch.Generator().manual_seed(seed)
    norm_types = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
            if isinstance(m, norm_types) and getattr(m, "weight", None) is not None:
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        for p in module.parameters():
            if p.numel() and not torch.any(p):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return module
