"""ONNXIFI over clglow: the ONNX backend interface in Python and as a C shared library.

``onnxifi.api`` holds the ONNXIFI 1.0 functions with their C names and status codes;
``onnxifi.constants`` mirrors every value of ``onnx/onnxifi.h``; ``onnxifi.types``
holds the Python stand-ins for the C structures; ``python -m onnxifi --library``
prints the path of ``libonnxifi-clglow.so`` (building it first if needed).
"""
from __future__ import annotations

from .api import *  # noqa: F401,F403
from .api import __all__ as _api_all
from .constants import *  # noqa: F401,F403
from .types import MemoryFence, Ref, TensorDescriptor, TraceEvent, TraceEventList

__all__ = list(_api_all) + ["MemoryFence", "Ref", "TensorDescriptor", "TraceEvent", "TraceEventList",
                            "library_path"]


def library_path(build: bool = True) -> str:
    """Absolute path of the C library ``libonnxifi-clglow.so``; (re)builds it when missing or stale and `build`."""
    from ._build import library_path as _lp

    return _lp(build=build)
