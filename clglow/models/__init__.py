"""Models built locally with seeded random weights (no download), e.g. for ``clglow demo``."""
from .recurrent import recurrent_lm
from .resnet import resnet, resnet18, resnet50

__all__ = ["resnet", "resnet18", "resnet50", "recurrent_lm"]
