"""The two records a zoo builder deals in (kept apart from the catalogue so that the builder
modules import them without importing the catalogue)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence


@dataclass
class Built:
    """What one builder makes: module, example inputs and the ONNX names to export with."""
    module: Any
    inputs: tuple
    input_names: List[str]
    output_names: List[str]
    # the opset to export at (17 unless an exporter symbolic needs another)
    opset: int = 17


@dataclass
class ZooModel:
    name: str
    family: str  # "timm" | "transformers" | "torchvision" | "own"
    description: str
    build: Callable[[], Built]
    tags: Sequence[str] = field(default_factory=tuple)
    # seconds before the runner abandons this model (None: the runner's --timeout)
    timeout_s: Optional[float] = None
