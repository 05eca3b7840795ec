"""Models built locally with seeded random weights (no download), e.g. for ``clglow demo``."""
from .resnet import resnet, resnet18, resnet50

__all__ = ["resnet", "resnet18", "resnet50"]
