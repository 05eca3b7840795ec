"""One ONNXIFI status table (clglow/errors.py): every facade maps the same error to the same status.

Facades: a clglow error's own ``onnxifi_status``, `clglow.errors.onnxifi_status_of`, the
Python ONNXIFI API (an error raised inside a call becomes its return value) and the C library
(the same, through the C ABI).
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from onnxifi_testutil import HERE, run

import clglow.errors as E
import onnxifi
from onnxifi import _boundary, compat, constants

pytestmark = pytest.mark.onnxifi
sys.path.insert(0, str(HERE))
from onnxifi_status_cases import MEMORY_EXHAUSTION, cases, opencl_error  # noqa: E402

CASES = cases()
IDS = [label for label, _, _ in CASES]


def test_constants_take_the_statuses_from_clglow_errors():
    """onnxifi/constants.py and onnxifi/_boundary.py write no status number and no mapping."""
    for name in E.ONNXIFI_STATUS_NAMES.values():
        assert getattr(constants, name) == getattr(E, name), name
    assert constants.STATUS_NAMES is E.ONNXIFI_STATUS_NAMES
    for module in (constants, _boundary):
        text = Path(module.__file__).read_text()
        assert not re.search(r"^\s*ONNXIFI_STATUS_\w+\s*=", text, re.M), f"{module.__name__} defines a status"
        assert "status_code" not in text and "OutOfDeviceMemory" not in text, f"{module.__name__} maps errors"
    assert not re.search(r"0x[0-9A-Fa-f]+", Path(_boundary.__file__).read_text())


def test_every_clglow_error_has_a_row():
    classes = [c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E.ClglowError)]
    assert len(classes) >= 9
    for cls in classes:
        row = next((E.EXCEPTION_STATUS[c.__name__] for c in cls.__mro__ if c.__name__ in E.EXCEPTION_STATUS), None)
        assert row in E.ONNXIFI_STATUS_NAMES and row != E.ONNXIFI_STATUS_SUCCESS, cls.__name__
        if isinstance(vars(cls).get("onnxifi_status"), int):
            assert cls.onnxifi_status == row, cls.__name__
    for table in (E.EXCEPTION_STATUS, E.OPENCL_STATUS):
        assert all(v in E.ONNXIFI_STATUS_NAMES and v != E.ONNXIFI_STATUS_SUCCESS for v in table.values())


@pytest.mark.parametrize("name", MEMORY_EXHAUSTION)
def test_memory_exhaustion_is_one_rule(name):
    """OUT_OF_RESOURCES and the other allocation failures are NO_DEVICE_MEMORY however they arrive."""
    from clglow.runtime.executor import cl_error

    raw = opencl_error(name)
    wrapped = cl_error("allocating x", raw)  # what clglow's OpenCL calls raise
    assert isinstance(wrapped, E.OutOfDeviceMemory)
    assert E.OPENCL_STATUS[name] == E.EXCEPTION_STATUS["OutOfDeviceMemory"] == E.ONNXIFI_STATUS_NO_DEVICE_MEMORY
    for exc in (raw, wrapped, E.DeviceError("enqueue", name), E.OutOfDeviceMemory("allocating")):
        assert E.onnxifi_status_of(exc) == _boundary.status_of(exc) == E.ONNXIFI_STATUS_NO_DEVICE_MEMORY


@pytest.mark.parametrize("label,exc,expected", CASES, ids=IDS)
def test_python_facades_agree(label, exc, expected, monkeypatch):
    assert E.onnxifi_status_of(exc) == expected
    if isinstance(exc, E.ClglowError):
        assert exc.onnxifi_status == expected
    assert onnxifi.status_of(exc) == expected

    n = onnxifi.Ref(0)
    onnxifi.onnxGetBackendIDs(None, n)
    ids: list = [None] * int(n.value)
    if not ids or onnxifi.onnxGetBackendIDs(ids, n) != onnxifi.ONNXIFI_STATUS_SUCCESS:
        pytest.skip("no ONNXIFI backend (no OpenCL device)")

    def judge(data: bytes, target: object = None) -> None:
        raise exc

    monkeypatch.setattr(compat, "judge_bytes", judge)
    try:
        assert onnxifi.onnxGetBackendCompatibility(ids[0], 2, b"\x08\x07") == expected
    finally:
        for i in ids:
            onnxifi.onnxReleaseBackendID(i)


def test_c_library_agrees(library, device_env):
    """The same errors raised under the C ABI (the library loaded into a child Python process)."""
    # The child imports the clglow and onnxifi this process tests (not whatever its sys.path finds first).
    where = str(Path(onnxifi.__file__).resolve().parents[1])
    env = {**device_env, "PYTHONPATH": os.pathsep.join(p for p in (where, device_env.get("PYTHONPATH")) if p)}
    p = run([sys.executable, HERE / "status_probe.py", library], timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    if "skip" in got:
        pytest.skip(got["skip"])
    expected = {label: [st, st, st] for label, _, st in CASES}
    assert got == expected
