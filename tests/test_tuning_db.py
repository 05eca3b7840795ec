"""The tuning database (clglow/runtime/tuning_db.py): entries survive a truncated or corrupt file
(ignored, measured again, the next write repairs it), malformed entries are skipped, and two
processes writing different entries at once both keep theirs. No OpenCL needed."""
from __future__ import annotations

import json
import logging
import multiprocessing
from pathlib import Path

import pytest

from clglow.lower import tunable
from clglow.runtime import tuning_db
from clglow.runtime.tuning_db import TuningDB, entry_key, table_from


def _entry(mr: int) -> dict:
    return {"params": {"mr": mr, "vw": 16, "nv": 2, "lsize": [1, 1, 1]}, "ms": 1.0, "default_ms": 1.1}


def _key(i: int, family: str = "gemm") -> str:
    return entry_key("cpu", family, tuning_db.family_hash(family), tunable.key_str((i, 64, 64, "inplace")))


def test_round_trip_and_merge(tmp_path: Path):
    path = tmp_path / "db.json"
    a, b = TuningDB(path), TuningDB(path)
    a.put(_key(1), _entry(8))
    b.put(_key(2), _entry(12))  # b never read a's entry: merge-on-write keeps it
    got = TuningDB(path).entries()
    assert set(got) == {_key(1), _key(2)}
    assert got[_key(1)]["params"]["mr"] == 8 and "at" in got[_key(1)]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "wrong_format"])
def test_corrupt_file_is_ignored_then_repaired(tmp_path: Path, caplog, damage: str):
    path = tmp_path / "db.json"
    db = TuningDB(path)
    db.put_many({_key(i): _entry(8) for i in range(5)})
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    else:
        path.write_text(json.dumps({"format": 999, "entries": {}}))
    with caplog.at_level(logging.WARNING, logger="clglow.runtime.tuning_db"):
        assert db.entries() == {}
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    db.put(_key(9), _entry(12))  # measured again and stored: the file is whole again
    assert set(TuningDB(path).entries()) == {_key(9)}


def test_malformed_entries_are_skipped(tmp_path: Path, caplog):
    path = tmp_path / "db.json"
    good = _key(1)
    data = {"format": tuning_db.FORMAT, "device": {}, "entries": {
        good: _entry(8), "no-slashes": _entry(8), _key(2): {"params": "not a dict"}, _key(3): {"ms": 1.0}}}
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="clglow.runtime.tuning_db"):
        assert set(TuningDB(path).entries()) == {good}
    assert sum("malformed" in r.getMessage() for r in caplog.records) == 3


def test_changed_kernel_source_invalidates_its_entries(tmp_path: Path, monkeypatch):
    db = TuningDB(tmp_path / "db.json")
    db.put(_key(1), _entry(8))
    db.put(entry_key("gpu", "gemm", tuning_db.family_hash("gemm"), tunable.key_str((2, 64, 64, "inplace"))), _entry(4))
    (row,) = table_from(db, "cpu")  # the other target family's entry is not this family's
    assert row[0] == "gemm" and dict(row[2])["mr"] == 8
    monkeypatch.setitem(tuning_db._hashes, "gemm", "0" * 16)  # as if gemm.cl changed
    assert table_from(db, "cpu") == ()


def test_in_memory_database_without_cache(monkeypatch):
    db = TuningDB(None)
    db.put(_key(1), _entry(8))
    assert set(db.entries()) == {_key(1)}


def _writer(path: str, start: int, count: int) -> None:
    db = TuningDB(Path(path))
    for i in range(start, start + count):
        db.put(_key(i), _entry(8))


def test_concurrent_writers_keep_every_entry(tmp_path: Path):
    """Two processes storing different entries at the same time: none lost, the file valid."""
    path = str(tmp_path / "db.json")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, start, 40)) for start in (0, 1000)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    got = TuningDB(Path(path)).entries()
    assert set(got) == {_key(i) for i in list(range(40)) + list(range(1000, 1040))}
    json.loads(Path(path).read_text())  # whole
