"""The zoo's model list: name -> how to build it (in torch) and what it stands for.

A builder returns a ``Built``: an eval-mode ``torch.nn.Module``, its example inputs (the
tensors the export traces with and the benchmark feeds) and the ONNX input/output names.
Builders import torch lazily, so the catalogue itself (``--list``) needs none of the zoo's
dependencies.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from .spec import Built, ZooModel

__all__ = ["Built", "ZooModel", "MODELS", "select"]


def _registry() -> Dict[str, ZooModel]:
    """Every zoo model in table order (vision CNNs, vision transformers, text/audio, own)."""
    from . import own, text, vision

    out: Dict[str, ZooModel] = {}
    for m in (*vision.MODELS, *text.MODELS, *own.MODELS):
        if m.name in out:
            raise ValueError(f"zoo model {m.name!r} is listed twice")
        out[m.name] = m
    return out


MODELS: Dict[str, ZooModel] = _registry()


def select(names: Sequence[str]) -> List[ZooModel]:
    """The catalogue entries for `names` (all when empty), in the order given; unknown names
    raise ValueError listing the valid ones."""
    if not names:
        return list(MODELS.values())
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise ValueError(f"unknown zoo model(s) {', '.join(unknown)}; available: {', '.join(MODELS)}")
    return [MODELS[n] for n in names]
