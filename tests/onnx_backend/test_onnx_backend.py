"""The ONNX project's own backend test suite over clglow.

Node cases are built in memory by the installed onnx; the simple, pytorch-converted and
pytorch-operator model groups ship with it too. The "real" group (model zoo downloads) is
excluded. Every case either passes or sits in EXCLUDED below with its reason.

A node without an OpenCL kernel raises UnsupportedOperator when host fallback is disabled
(CLGLOW_HOST_FALLBACK=0); the suite reports that as a skip, as onnxruntime's backend does
with `disable_fallback()`. Counts: `python tests/onnx_backend/counts.py`.
"""
from __future__ import annotations

import unittest
import warnings

import pytest

onnx_test = pytest.importorskip("onnx.backend.test")

from clglow import backend as clglow_backend  # noqa: E402
from clglow.errors import UnsupportedOperator  # noqa: E402

from .exclusions import EXCLUDED  # noqa: E402


def _skip_message(e: UnsupportedOperator) -> str:
    """One line naming every unsupported node's op and why (the suite's skip reason)."""
    parts = sorted({f"{n.op_type}: {n.reason}" for n in e.nodes}) or [str(e)]
    return "UnsupportedOperator: " + " | ".join(parts)


class _SuiteBackend(clglow_backend.ClglowBackend):
    """clglow's backend, with UnsupportedOperator (host fallback off) reported as a skip."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        try:
            rep = super().prepare(model, device, **kwargs)
        except UnsupportedOperator as e:
            raise unittest.SkipTest(_skip_message(e)) from None
        return _SkipRep(rep.session)


class _SkipRep(clglow_backend.ClglowRep):
    def run(self, inputs, **kwargs):
        try:
            return super().run(inputs, **kwargs)
        except UnsupportedOperator as e:  # placement of a later stage (data-dependent shapes)
            raise unittest.SkipTest(_skip_message(e)) from None


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    backend_test = onnx_test.BackendTest(_SuiteBackend, __name__)

for pattern, _reason in EXCLUDED:
    backend_test.exclude(pattern)

_cases = backend_test.test_cases
# The "real" group downloads model-zoo models: not run here.
_cases.pop("OnnxBackendRealModelTest", None)
for _name, _case in _cases.items():
    for _attr in [a for a in vars(_case) if a.startswith("test_") and a.endswith("_cuda")]:
        delattr(_case, _attr)  # only the OpenCL device ("CPU") runs; CUDA cases would all skip
    globals()[_name] = pytest.mark.onnx_backend(_case)

del _name, _case
