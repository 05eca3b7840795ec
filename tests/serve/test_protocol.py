"""The KServe v2 codec (clglow.serve.protocol) against tritonclient's own encoder and decoder
(a client nobody here wrote) and numpy; no Ray, no OpenCL."""
from __future__ import annotations

import json

import numpy as np
import pytest

from clglow.serve import protocol
from clglow.serve.protocol import ProtocolError, check_inputs, decode_request, encode_response

th = pytest.importorskip("tritonclient.http")

ARRAYS = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.arange(6, dtype=np.uint8).reshape(2, 3), "UINT16": np.arange(4, dtype=np.uint16),
    "UINT32": np.arange(4, dtype=np.uint32), "UINT64": np.arange(4, dtype=np.uint64) * 2**40,
    "INT8": np.arange(-3, 3, dtype=np.int8), "INT16": np.arange(-3, 3, dtype=np.int16),
    "INT32": np.arange(-3, 3, dtype=np.int32), "INT64": np.arange(-3, 3, dtype=np.int64) * 2**40,
    "FP16": np.linspace(-2, 2, 5, dtype=np.float16), "FP32": np.random.default_rng(0).random((2, 2, 3), np.float32),
    "FP64": np.random.default_rng(1).random(4), "BYTES": np.array([b"a", b"", b"hello\x00w"], dtype=object),
}


def _triton_body(arrays: dict, binary: bool, outputs=None) -> tuple[bytes, object]:
    inputs = []
    for name, arr in arrays.items():
        dt = name if name in protocol.DATATYPES else protocol.datatype_of(arr.dtype)
        inp = th.InferInput(name, list(arr.shape), dt)
        inp.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(inp)
    body, json_size = th.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    return body, json_size


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_decodes_tritonclient_requests_of_every_datatype(binary):
    body, json_size = _triton_body(ARRAYS, binary)
    req = decode_request(body, None if json_size is None else str(json_size))
    assert set(req.inputs) == set(ARRAYS)
    for name, ref in ARRAYS.items():
        got = req.inputs[name]
        assert got.shape == ref.shape and got.dtype == protocol.DATATYPES[name], name
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_decodes_responses_of_every_datatype(binary):
    body, headers = encode_response("m", "1", "req-7", ARRAYS, {n: binary for n in ARRAYS})
    assert (protocol.HEADER_LENGTH in headers) == binary
    result = th.InferResult.from_response_body(body, header_length=headers.get(protocol.HEADER_LENGTH)
                                               and int(headers[protocol.HEADER_LENGTH]))
    assert result.get_response()["id"] == "req-7"
    for name, ref in ARRAYS.items():
        got = result.as_numpy(name)
        if name == "BYTES":
            as_bytes = [v.encode() if isinstance(v, str) else v for v in got.reshape(-1)]  # JSON gives str
            assert as_bytes == list(ref.reshape(-1))
        else:
            assert got.dtype == ref.dtype, name
            np.testing.assert_array_equal(got, ref)


def test_requested_outputs_and_their_form():
    outs = [th.InferRequestedOutput("a", binary_data=True), th.InferRequestedOutput("b", binary_data=False)]
    body, size = _triton_body({"FP32": ARRAYS["FP32"]}, True, outputs=outs)
    req = decode_request(body, str(size))
    assert req.outputs == ["a", "b"] and req.binary_outputs(["a", "b"]) == {"a": True, "b": False}
    doc = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}],
           "parameters": {"binary_data_output": True}}
    req = decode_request(json.dumps(doc).encode())
    assert req.outputs is None and req.binary_outputs(["y"]) == {"y": True}
    assert protocol.check_outputs(None, ["y", "z"]) == ["y", "z"]
    with pytest.raises(ProtocolError, match="'w'.*unknown output"):
        protocol.check_outputs(["w"], ["y", "z"])


def test_nested_json_data_is_row_major():
    doc = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "INT32", "data": [[1, 2, 3], [4, 5, 6]]}]}
    np.testing.assert_array_equal(decode_request(json.dumps(doc).encode()).inputs["x"],
                                  np.arange(1, 7, dtype=np.int32).reshape(2, 3))


def _json(doc) -> bytes:
    return json.dumps(doc).encode()


GOOD = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}
BAD_BODIES = [
    (b"{not json", None, "not valid JSON"),
    (b"[1, 2]", None, "JSON object"),
    (_json({"inputs": []}), None, "non-empty"),
    (_json({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}), None, "\"name\""),
    (_json({"inputs": [dict(GOOD, datatype="FP8")]}), None, "'x'.*unknown datatype"),
    (_json({"inputs": [dict(GOOD, shape=[3])]}), None, "'x'.*3 elements"),
    (_json({"inputs": [dict(GOOD, shape=[-1])]}), None, "'x'.*non-negative"),
    (_json({"inputs": [dict(GOOD, data=["a", "b"])]}), None, "'x'.*not FP32"),
    (_json({"inputs": [dict(GOOD, datatype="INT8", data=[1, 300])]}), None, "'x'.*INT8"),
    (_json({"inputs": [GOOD, GOOD]}), None, "'x'.*twice"),
    (_json({"inputs": [{k: v for k, v in GOOD.items() if k != "data"}]}), None, "'x'.*data"),
    (_json({"inputs": [dict(GOOD, parameters={"binary_data_size": 8})]}) + b"\0" * 4, "auto", "'x'.*runs past"),
    (_json({"inputs": [dict(GOOD, parameters={"binary_data_size": 4})]}) + b"\0" * 4, "auto", "'x'.*needs 8 bytes"),
    (_json({"inputs": [GOOD]}) + b"junk", "auto", "no input claims"),
    (_json({"inputs": [GOOD]}), "999999", "Inference-Header-Content-Length is 999999"),
    (_json({"inputs": [GOOD]}), "ten", "must be an integer"),
]


@pytest.mark.parametrize("body,header,message", BAD_BODIES, ids=[m for _, _, m in BAD_BODIES])
def test_bad_requests_raise_protocol_error(body, header, message):
    if header == "auto":
        header = str(body.index(b"}]}") + 3)
    with pytest.raises(ProtocolError, match=message) as info:
        decode_request(body, header)
    assert info.value.http_status == 400


def test_body_size_cap():
    body = _json({"inputs": [GOOD]})
    decode_request(body, None, max_bytes=len(body))
    with pytest.raises(ProtocolError, match="over the server's limit"):
        decode_request(body, None, max_bytes=len(body) - 1)


class Arg:
    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, np.dtype(dtype), shape


MODEL_INPUTS = [Arg("ids", np.int64, ["batch", "seq"]), Arg("mask", np.float32, ["batch", "seq"]),
                Arg("img", np.float32, ["batch", 3])]


def _feeds(**over):
    feeds = {"ids": np.zeros((2, 5), np.int64), "mask": np.zeros((2, 5), np.float32),
             "img": np.zeros((2, 3), np.float32)}
    feeds.update(over)
    return {k: v for k, v in feeds.items() if v is not None}


@pytest.mark.parametrize("feeds,message", [
    (_feeds(extra=np.zeros(1)), "'extra'.*unknown input"),
    (_feeds(img=None), "'img'.*missing input"),
    (_feeds(mask=np.zeros((2, 5), np.float64)), "'mask'.*must be FP32, got FP64"),
    (_feeds(img=np.zeros((2, 4), np.float32)), r"'img'.*must be \[-1, 3\]"),
    (_feeds(img=np.zeros((2, 3, 1), np.float32)), r"'img'.*must be \[-1, 3\]"),
    (_feeds(mask=np.zeros((2, 6), np.float32)), "'mask'.*'seq' is 6 here but 5"),
])
def test_check_inputs_names_the_input(feeds, message):
    with pytest.raises(ProtocolError, match=message):
        check_inputs(feeds, MODEL_INPUTS)


def test_metadata_has_minus_one_for_symbolic_dims():
    doc = protocol.model_metadata("m", ["1"], MODEL_INPUTS, [Arg("y", np.float32, ["batch", 10])])
    assert doc["inputs"][0] == {"name": "ids", "datatype": "INT64", "shape": [-1, -1]}
    assert doc["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 10]}]
    assert json.loads(protocol.error_body("boom")) == {"error": "boom"}
