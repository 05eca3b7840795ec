"""Every ONNXIFI_* value in onnxifi.constants matches onnx/onnxifi.h, and vice versa."""
from __future__ import annotations

import re

import pytest

from onnxifi import constants

pytestmark = pytest.mark.onnxifi

# Values that are not in ONNX's onnxifi.h (Glow/foxi extension header, our own helpers).
NOT_IN_HEADER = {"ONNXIFI_GRAPH_PROPERTY_AUTO_INSTRUMENT_NODES", "ONNXIFI_TRACE_EVENT_NAME_SIZE",
                 "ONNXIFI_VERSION_1_0"}


def header_values(path) -> dict[str, int]:
    text = path.read_text()
    found = re.findall(r"^\s*#\s*define\s+(ONNXIFI_[A-Z0-9_]+)\s+(0x[0-9A-Fa-f]+|\d+)\s*$", text, re.M)
    return {name: int(value, 0) for name, value in found if name != "ONNXIFI_H"}


def test_every_header_constant_is_mirrored(header):
    values = header_values(header)
    assert len(values) > 100
    missing = sorted(n for n in values if not hasattr(constants, n))
    assert not missing, f"not in onnxifi.constants: {missing}"
    wrong = {n: (getattr(constants, n), v) for n, v in values.items() if getattr(constants, n) != v}
    assert not wrong, f"(ours, header) differ: {wrong}"


def test_no_invented_constants(header):
    values = header_values(header)
    ours = {n for n in dir(constants) if n.startswith("ONNXIFI_")}
    assert ours - set(values) == NOT_IN_HEADER


def test_extension_header_agrees():
    from pathlib import Path

    ext = Path(constants.__file__).parent / "csrc" / "onnxifi_clglow.h"
    values = header_values(ext)
    for name in ("ONNXIFI_TRACE_EVENT_NAME_SIZE", "ONNXIFI_GRAPH_PROPERTY_AUTO_INSTRUMENT_NODES"):
        assert values[name] == getattr(constants, name)
    for name, value in values.items():  # the fallback copy of the core ABI
        if name in NOT_IN_HEADER or name.endswith("_H"):
            continue
        assert getattr(constants, name) == value, name


def test_clglow_error_statuses_are_header_values(header):
    """clglow/errors.py holds the status table: its numbers must be onnxifi.h's, all of them."""
    import clglow.errors as errors

    values = {n: v for n, v in header_values(header).items() if n.startswith("ONNXIFI_STATUS_")}
    ours = {n: getattr(errors, n) for n in dir(errors) if n.startswith("ONNXIFI_STATUS_") and n != "ONNXIFI_STATUS_NAMES"}
    assert ours == values
    assert errors.ONNXIFI_STATUS_NAMES == {v: n for n, v in values.items()}
