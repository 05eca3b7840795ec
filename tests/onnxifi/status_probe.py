"""Child process of test_status_table.py: `python status_probe.py LIBRARY` prints JSON
{label: [onnxifi_status_of, Python API status, C library status]} for each error of
onnxifi_status_cases, raised inside onnxGetBackendCompatibility (its model judge replaced).

The library is loaded with ctypes into this process, so its C entry points run in this
interpreter and meet the same replaced judge.
"""
from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnxifi_status_cases  # noqa: E402

import onnxifi as o  # noqa: E402
from clglow.errors import onnxifi_status_of  # noqa: E402
from onnxifi import compat  # noqa: E402


def main(library: str) -> int:
    lib = ctypes.CDLL(library)
    fn = lib.onnxGetBackendCompatibility
    fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    n = o.Ref(0)
    o.onnxGetBackendIDs(None, n)
    ids: list = [None] * int(n.value)
    if not ids or o.onnxGetBackendIDs(ids, n) != o.ONNXIFI_STATUS_SUCCESS:
        print(json.dumps({"skip": "no ONNXIFI backend (no OpenCL device)"}))
        return 0
    model = b"\x08\x07"  # never parsed: the judge raises first
    out = {}
    for label, exc, _ in onnxifi_status_cases.cases():
        def judge(data: bytes, target: object = None, exc: BaseException = exc) -> None:
            raise exc

        compat.judge_bytes = judge
        py = o.onnxGetBackendCompatibility(ids[0], len(model), model)
        c = fn(ctypes.c_void_p(ids[0]), len(model), ctypes.create_string_buffer(model, len(model)))
        out[label] = [onnxifi_status_of(exc), py, c]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
