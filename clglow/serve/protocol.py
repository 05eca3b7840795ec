"""The Open Inference Protocol (KServe v2 REST), as pure data: no Ray, no HTTP server.

Decodes an infer request (JSON tensors, or the binary tensor data extension: a JSON header of
``Inference-Header-Content-Length`` bytes followed by the raw tensors in input order), checks it
against a model's inputs, and encodes the response the same two ways. Every fault a client can
cause raises `ProtocolError` (HTTP 400), naming the input or output involved, so the server never
answers a bad request with 500. The datatype names are the protocol's (``FP32``, ``INT64``, ...).

    req = decode_request(body, header_length=None, max_bytes=1 << 26)
    check_inputs(req.inputs, sess.get_inputs())
    body, headers = encode_response("m", "1", req.id, {"y": y}, req.binary_outputs(["y"]))
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import InvalidArgument

#: The header of the binary tensor data extension: the length of the JSON part of the body.
HEADER_LENGTH = "Inference-Header-Content-Length"

#: Protocol datatype -> numpy dtype (BYTES: numpy object arrays of bytes).
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8), "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}


class ProtocolError(InvalidArgument):
    """A request the protocol or the model rejects: the server answers 400 with its message."""

    http_status: int = 400


def datatype_of(dtype: Any) -> str:
    """The protocol datatype of a numpy dtype (strings and bytes are BYTES)."""
    dt = np.dtype(dtype)
    if dt.kind in "OSU":
        return "BYTES"
    for name, d in DATATYPES.items():
        if d == dt:
            return name
    raise ProtocolError(f"numpy dtype {dt.name} has no Open Inference Protocol datatype")


def numpy_dtype(datatype: Any, tensor: str) -> np.dtype:
    """The numpy dtype of a protocol datatype; ProtocolError naming `tensor` for an unknown one."""
    if not isinstance(datatype, str) or datatype.upper() not in DATATYPES:
        raise ProtocolError(f"unknown datatype {datatype!r}; the protocol's are {sorted(DATATYPES)}", tensor=tensor)
    return DATATYPES[datatype.upper()]


def protocol_shape(shape: Sequence[Any]) -> list[int]:
    """A model dimension list in the protocol's form: symbolic dims (strings, None) are -1."""
    return [d if isinstance(d, int) else -1 for d in shape]


def tensor_metadata(name: str, dtype: Optional[np.dtype], shape: Optional[Sequence[Any]]) -> dict:
    """One input or output of a model metadata document."""
    return {"name": name, "datatype": "BYTES" if dtype is None else datatype_of(dtype),
            "shape": protocol_shape(shape or [])}


def model_metadata(name: str, versions: Sequence[str], inputs: Sequence[Any], outputs: Sequence[Any],
                   platform: str = "onnx_clglow") -> dict:
    """GET /v2/models/{name}: `inputs`/`outputs` are NodeArg-like (name, dtype, shape)."""
    return {"name": name, "versions": list(versions), "platform": platform,
            "inputs": [tensor_metadata(a.name, a.dtype, a.shape) for a in inputs],
            "outputs": [tensor_metadata(a.name, a.dtype, a.shape) for a in outputs]}


def error_body(message: str) -> bytes:
    """The protocol's error document."""
    return json.dumps({"error": message}).encode()


# --- requests ------------------------------------------------------------------------------------
@dataclass
class InferRequest:
    """A decoded infer request: input arrays by name, and which outputs to return how."""

    inputs: dict[str, np.ndarray]
    id: Optional[str] = None
    outputs: Optional[list[str]] = None  # None: every output of the model
    binary: dict[str, bool] = field(default_factory=dict)  # per requested output
    binary_default: bool = False  # parameters.binary_data_output

    def binary_outputs(self, names: Sequence[str]) -> dict[str, bool]:
        """For each returned output, whether it travels as binary data."""
        return {n: self.binary.get(n, self.binary_default) for n in names}


def check_body_size(length: int, max_bytes: int) -> None:
    """The body-size cap, checked before (Content-Length) and while the body is read."""
    if max_bytes and length > max_bytes:
        raise ProtocolError(f"request body of {length} bytes is over the server's limit of {max_bytes} bytes")


def _split_body(body: bytes, header_length: Optional[str]) -> tuple[dict, memoryview]:
    """The JSON header of a body and the binary data after it."""
    if header_length is None or header_length == "":
        json_len = len(body)
    else:
        try:
            json_len = int(header_length)
        except ValueError:
            raise ProtocolError(f"{HEADER_LENGTH} must be an integer, got {header_length!r}") from None
        if not 0 <= json_len <= len(body):
            raise ProtocolError(f"{HEADER_LENGTH} is {json_len} but the body has {len(body)} bytes")
    try:
        doc = json.loads(bytes(body[:json_len]))
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"the request is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("the request must be a JSON object with an \"inputs\" list")
    return doc, memoryview(body)[json_len:]


def _shape_of(entry: dict, name: str) -> tuple[int, ...]:
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ProtocolError(f"\"shape\" must be a list of non-negative integers, got {shape!r}", tensor=name)
    return tuple(shape)


def _flatten(data: Any) -> list:
    """A JSON tensor's data, row-major nested lists or flat, as one flat list."""
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(x, list) for x in data):
        return data
    out: list = []
    for x in data:
        out.extend(_flatten(x))
    return out


def _bytes_from_json(values: list, name: str) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ProtocolError(f"BYTES data must be strings, got {type(v).__name__}", tensor=name)
        arr[i] = v.encode()
    return arr


def _from_json(entry: dict, name: str, dtype: np.dtype, shape: tuple) -> np.ndarray:
    if "data" not in entry:
        raise ProtocolError("an input needs \"data\" or parameters.binary_data_size", tensor=name)
    values = _flatten(entry["data"])
    count = int(np.prod(shape, dtype=np.int64))
    if len(values) != count:
        raise ProtocolError(f"shape {list(shape)} has {count} elements but \"data\" has {len(values)}", tensor=name)
    if dtype == object:
        return _bytes_from_json(values, name).reshape(shape)
    kinds = (bool,) if dtype.kind == "b" else (int,) if dtype.kind in "iu" else (int, float)
    if not all(isinstance(v, kinds) and (dtype.kind == "b" or not isinstance(v, bool)) for v in values):
        raise ProtocolError(f"\"data\" holds values that are not {datatype_of(dtype)}", tensor=name)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except (OverflowError, ValueError) as e:
        raise ProtocolError(f"\"data\" does not fit {datatype_of(dtype)}: {e}", tensor=name) from None


def _bytes_from_binary(raw: memoryview, name: str, count: int) -> np.ndarray:
    """BYTES in binary form: each element a 4-byte little-endian length, then its bytes."""
    arr = np.empty(count, dtype=object)
    pos = 0
    for i in range(count):
        if pos + 4 > len(raw):
            raise ProtocolError("BYTES binary data ends inside an element's length", tensor=name)
        (n,) = struct.unpack_from("<I", raw, pos)
        if pos + 4 + n > len(raw):
            raise ProtocolError("BYTES binary data ends inside an element", tensor=name)
        arr[i] = bytes(raw[pos + 4:pos + 4 + n])
        pos += 4 + n
    if pos != len(raw):
        raise ProtocolError(f"BYTES binary data has {len(raw) - pos} bytes after its {count} elements", tensor=name)
    return arr


def _from_binary(raw: memoryview, name: str, dtype: np.dtype, shape: tuple) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == object:
        return _bytes_from_binary(raw, name, count).reshape(shape)
    if len(raw) != count * dtype.itemsize:
        raise ProtocolError(f"shape {list(shape)} of {datatype_of(dtype)} needs {count * dtype.itemsize} bytes, "
                            f"binary_data_size is {len(raw)}", tensor=name)
    arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=True)
    if dtype.kind == "b" and arr.size and np.frombuffer(raw, np.uint8).max() > 1:
        raise ProtocolError("BOOL binary data must be bytes 0 or 1", tensor=name)
    return arr.reshape(shape)


def _binary_size(entry: dict, name: str) -> Optional[int]:
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError("\"parameters\" must be an object", tensor=name)
    size = params.get("binary_data_size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ProtocolError(f"binary_data_size must be a non-negative integer, got {size!r}", tensor=name)
    return size


def _decode_inputs(doc: dict, binary: memoryview) -> dict[str, np.ndarray]:
    entries = doc.get("inputs")
    if not isinstance(entries, list) or not entries:
        raise ProtocolError("the request needs a non-empty \"inputs\" list")
    inputs: dict[str, np.ndarray] = {}
    pos = 0
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ProtocolError("each input must be an object with a \"name\"")
        name = entry["name"]
        if name in inputs:
            raise ProtocolError("input given twice", tensor=name)
        dtype = numpy_dtype(entry.get("datatype"), name)
        shape = _shape_of(entry, name)
        size = _binary_size(entry, name)
        if size is None:
            inputs[name] = _from_json(entry, name, dtype, shape)
            continue
        if pos + size > len(binary):
            raise ProtocolError(f"binary_data_size {size} runs past the body's binary data "
                                f"({len(binary) - pos} bytes left)", tensor=name)
        inputs[name] = _from_binary(binary[pos:pos + size], name, dtype, shape)
        pos += size
    if pos != len(binary):
        raise ProtocolError(f"the body has {len(binary) - pos} bytes of binary data no input claims")
    return inputs


def _decode_outputs(doc: dict, req: InferRequest) -> None:
    entries = doc.get("outputs")
    if entries is None:
        return
    if not isinstance(entries, list):
        raise ProtocolError("\"outputs\" must be a list")
    req.outputs = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ProtocolError("each requested output must be an object with a \"name\"")
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise ProtocolError("\"parameters\" must be an object", tensor=entry["name"])
        req.outputs.append(entry["name"])
        if "binary_data" in params:
            req.binary[entry["name"]] = bool(params["binary_data"])


def decode_request(body: bytes, header_length: Optional[str] = None, max_bytes: int = 0) -> InferRequest:
    """An infer request's body (plus its Inference-Header-Content-Length, when sent) -> InferRequest."""
    check_body_size(len(body), max_bytes)
    doc, binary = _split_body(body, header_length)
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError("\"parameters\" must be an object")
    req = InferRequest(inputs=_decode_inputs(doc, binary), binary_default=bool(params.get("binary_data_output")))
    rid = doc.get("id")
    req.id = None if rid is None else str(rid)
    _decode_outputs(doc, req)
    return req


def check_inputs(inputs: Mapping[str, np.ndarray], model_inputs: Sequence[Any]) -> None:
    """Names, datatypes and shapes of `inputs` against a model's NodeArg-like inputs (ProtocolError)."""
    known = {a.name: a for a in model_inputs}
    for name in inputs:
        if name not in known:
            raise ProtocolError(f"unknown input; the model's inputs are {sorted(known)}", tensor=name)
    symbols: dict[str, tuple[int, str]] = {}
    for name, arg in known.items():
        if name not in inputs:
            raise ProtocolError(f"missing input; the model's inputs are {sorted(known)}", tensor=name)
        x = inputs[name]
        if arg.dtype is not None and x.dtype != np.dtype(arg.dtype):
            raise ProtocolError(f"datatype must be {datatype_of(arg.dtype)}, got {datatype_of(x.dtype)}", tensor=name)
        if not arg.shape and x.ndim == 0:
            continue
        if len(arg.shape) != x.ndim:
            raise ProtocolError(f"shape must be {protocol_shape(arg.shape)}, got {list(x.shape)}", tensor=name)
        for d, s in zip(arg.shape, x.shape):
            if isinstance(d, int) and d != s:
                raise ProtocolError(f"shape must be {protocol_shape(arg.shape)}, got {list(x.shape)}", tensor=name)
            if isinstance(d, str) and d != "?" and symbols.setdefault(d, (s, name))[0] != s:
                raise ProtocolError(f"dimension {d!r} is {s} here but {symbols[d][0]} in input "
                                    f"{symbols[d][1]!r}", tensor=name)


def check_outputs(requested: Optional[Sequence[str]], model_outputs: Sequence[str]) -> list[str]:
    """The outputs to return: the requested ones (each must exist), else all of the model's."""
    if requested is None:
        return list(model_outputs)
    for n in requested:
        if n not in model_outputs:
            raise ProtocolError(f"unknown output; the model's outputs are {list(model_outputs)}", tensor=n)
    return list(requested)


# --- responses -----------------------------------------------------------------------------------
def _raw_bytes(arr: np.ndarray) -> bytes:
    if arr.dtype == object or arr.dtype.kind in "SU":
        parts = []
        for v in arr.reshape(-1):
            b = v.encode() if isinstance(v, str) else bytes(v)
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()


def _json_data(arr: np.ndarray) -> list:
    if arr.dtype == object or arr.dtype.kind in "SU":
        return [v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)]
    return arr.reshape(-1).tolist()


def encode_response(model_name: str, model_version: Optional[str], request_id: Optional[str],
                    outputs: Mapping[str, np.ndarray], binary: Mapping[str, bool]) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, or JSON + binary data with Inference-Header-Content-Length."""
    doc: dict = {"model_name": model_name, "outputs": []}
    if model_version:
        doc["model_version"] = model_version
    if request_id is not None:
        doc["id"] = request_id
    chunks = []
    for name, arr in outputs.items():
        doc["outputs"].append(_tensor_entry(name, np.asarray(arr), bool(binary.get(name)), chunks))
    head = json.dumps(doc).encode()
    if not chunks:
        return head, {"Content-Type": "application/json"}
    return head + b"".join(chunks), {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}


def _tensor_entry(name: str, arr: np.ndarray, binary: bool, chunks: list) -> dict:
    """One tensor of a request or response: its data inline as JSON, or (binary) its raw bytes
    appended to `chunks` with their size in the entry's parameters."""
    entry: dict = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
    if binary:
        raw = _raw_bytes(arr)
        entry["parameters"] = {"binary_data_size": len(raw)}
        chunks.append(raw)
    else:
        entry["data"] = _json_data(arr)
    return entry


# --- the client's side (the load generator, benchmarks) -----------------------------------------
def encode_request(inputs: Mapping[str, np.ndarray], binary: bool = True,
                   outputs: Optional[Sequence[str]] = None, request_id: Optional[str] = None) -> tuple[bytes, dict]:
    """An infer request body and headers, as tritonclient.http sends it (binary: JSON header + raw tensors)."""
    doc: dict = {"inputs": []}
    if request_id is not None:
        doc["id"] = request_id
    chunks = []
    for name, arr in inputs.items():
        doc["inputs"].append(_tensor_entry(name, np.asarray(arr), binary, chunks))
    if outputs is not None:
        doc["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
    else:
        doc["parameters"] = {"binary_data_output": binary}
    head = json.dumps(doc).encode()
    headers = {"Content-Type": "application/octet-stream" if binary else "application/json"}
    if binary:
        headers[HEADER_LENGTH] = str(len(head))
    return head + b"".join(chunks), headers


def decode_response(body: bytes, header_length: Optional[str] = None) -> dict[str, np.ndarray]:
    """The outputs of an infer response (JSON or binary), by name."""
    doc, binary = _split_body(body, header_length)
    if "error" in doc:
        raise ProtocolError(f"the server answered an error: {doc['error']}")
    out, pos = {}, 0
    for entry in doc.get("outputs") or []:
        name, dtype, shape = entry["name"], numpy_dtype(entry["datatype"], entry["name"]), tuple(entry["shape"])
        size = _binary_size(entry, name)
        if size is None:
            out[name] = _from_json(entry, name, dtype, shape)
        else:
            out[name] = _from_binary(binary[pos:pos + size], name, dtype, shape)
            pos += size
    return out
