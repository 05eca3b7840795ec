"""The server over HTTP: tritonclient.http (binary) and plain JSON get what a direct
InferenceSession and onnxruntime compute, for ResNet-style and BERT-style models with a fixed
and a symbolic batch; health and metadata; every bad request a 400 and the server serving on."""
from __future__ import annotations

import json

import numpy as np
import pytest
import requests
from serve_clients import json_infer, triton_client, triton_infer
from serve_helpers import MAX_BODY, close

import clglow

MODELS = ["resnet_fixed", "resnet_dyn", "bert_fixed", "bert_dyn"]


@pytest.fixture(scope="module")
def direct(server):
    """A direct InferenceSession per model file (the in-process answer)."""
    _, models = server
    return {name: clglow.InferenceSession(m.path) for name, m in models.items()}


def test_health_and_metadata(server):
    url, _ = server
    client = triton_client(url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("resnet_dyn") and not client.is_model_ready("no_such_model")
    meta = client.get_model_metadata("bert_dyn")
    assert meta["inputs"] == [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]},
                              {"name": "attention_mask", "datatype": "FP32", "shape": [-1, -1]}]
    assert meta["outputs"] == [{"name": "last_hidden_state", "datatype": "FP32", "shape": [-1, -1, 64]}]
    meta = requests.get(f"{url}/v2/models/resnet_fixed", timeout=10).json()
    assert meta["inputs"][0]["shape"] == [1, 3, 32, 32] and meta["outputs"][0]["shape"] == [1, 10]
    assert requests.get(f"{url}/v2/health/live", timeout=10).status_code == 200
    assert requests.get(f"{url}/v2/models/resnet_dyn/versions/1/ready", timeout=10).status_code == 200


@pytest.mark.parametrize("name", MODELS)
def test_clients_get_the_direct_sessions_outputs(server, direct, name):
    url, models = server
    m = models[name]
    batch = 3 if name.endswith("_dyn") else 1
    client = triton_client(url)
    for seed in range(2):
        feeds = m.make(seed, batch)
        want = dict(zip([o.name for o in direct[name].get_outputs()], direct[name].run(None, feeds)))
        ref = m.reference(feeds)
        for how, got in (("tritonclient binary", triton_infer(client, name, feeds)),
                         ("tritonclient JSON", triton_infer(client, name, feeds, binary=False)),
                         ("requests JSON", json_infer(url, name, feeds))):
            assert set(got) == set(want), how
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * float(np.abs(want[k]).max()),
                                           err_msg=f"{how} vs InferenceSession")
                assert close(got[k], ref[k]), f"{how} vs onnxruntime: {k}"


def test_requested_outputs_and_request_id(server):
    url, models = server
    feeds = models["resnet_dyn"].make(5, 2)
    doc = {"id": "abc", "inputs": [{"name": "data", "shape": list(feeds["data"].shape), "datatype": "FP32",
                                    "data": feeds["data"].ravel().tolist()}], "outputs": [{"name": "logits"}]}
    r = requests.post(f"{url}/v2/models/resnet_dyn/infer", json=doc, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == "abc" and body["model_name"] == "resnet_dyn" and [o["name"] for o in body["outputs"]] == ["logits"]
    got = np.array(body["outputs"][0]["data"], np.float32).reshape(body["outputs"][0]["shape"])
    assert close(got, models["resnet_dyn"].reference(feeds)["logits"])


def _good_json(feeds: dict) -> dict:
    return {"inputs": [{"name": n, "shape": list(x.shape), "datatype": "FP32" if x.dtype == np.float32 else "INT64",
                        "data": x.ravel().tolist()} for n, x in feeds.items()]}


def _bad_requests(models) -> list:
    """(what, path, body bytes, headers, a word the error must hold) for every bad request."""
    good = _good_json(models["resnet_fixed"].make(0, 1))
    inp = good["inputs"][0]

    def with_input(**over) -> bytes:
        return json.dumps({"inputs": [dict(inp, **over)]}).encode()

    bert = _good_json(models["bert_dyn"].make(0, 2))
    bert["inputs"][1]["shape"], bert["inputs"][1]["data"] = [2, 7], bert["inputs"][1]["data"][:14]
    return [
        ("unknown model", "no_such_model", json.dumps(good).encode(), {}, "no_such_model"),
        ("unknown input", "resnet_fixed", with_input(name="pixels"), {}, "pixels"),
        ("missing input", "bert_dyn", json.dumps({"inputs": [bert["inputs"][0]]}).encode(), {}, "attention_mask"),
        ("wrong shape", "resnet_fixed", with_input(shape=[1, 3, 16, 64]), {}, "data"),
        ("wrong rank", "resnet_fixed", with_input(shape=[3, 32, 32]), {}, "data"),
        ("fixed batch", "resnet_fixed", with_input(shape=[2, 3, 32, 16]), {}, "data"),
        ("inconsistent symbol", "bert_dyn", json.dumps(bert).encode(), {}, "seq"),
        ("wrong datatype", "resnet_fixed", with_input(datatype="FP64"), {}, "FP64"),
        ("unknown datatype", "resnet_fixed", with_input(datatype="FLOAT"), {}, "FLOAT"),
        ("data count", "resnet_fixed", with_input(data=inp["data"][:-1]), {}, "elements"),
        ("malformed JSON", "resnet_fixed", b'{"inputs": [', {}, "JSON"),
        ("not an object", "resnet_fixed", b"[]", {}, "object"),
        ("unknown output", "resnet_fixed", json.dumps(dict(good, outputs=[{"name": "probs"}])).encode(), {}, "probs"),
        ("binary size", "resnet_fixed", with_input(parameters={"binary_data_size": 12288}) + b"\0" * 100,
         {"Inference-Header-Content-Length": str(len(with_input(parameters={"binary_data_size": 12288})))}, "data"),
        ("header length", "resnet_fixed", json.dumps(good).encode(), {"Inference-Header-Content-Length": "x"},
         "Inference-Header-Content-Length"),
        ("bad gzip", "resnet_fixed", b"not gzip", {"Content-Encoding": "gzip"}, "gzip"),
        ("body over the cap", "resnet_fixed", b" " * (MAX_BODY + 1), {}, "limit"),
    ]


def test_every_bad_request_is_a_400_and_the_server_serves_on(server):
    url, models = server
    for what, model, body, headers, word in _bad_requests(models):
        r = requests.post(f"{url}/v2/models/{model}/infer", data=body,
                          headers={"Content-Type": "application/json", **headers}, timeout=60)
        assert r.status_code == 400, f"{what}: {r.status_code} {r.text[:300]}"
        err = r.json()["error"]
        assert word in err, f"{what}: {err!r} does not name {word!r}"
    assert requests.get(f"{url}/v2/models/no_such_model", timeout=10).status_code == 400
    feeds = models["resnet_fixed"].make(3, 1)
    got = json_infer(url, "resnet_fixed", feeds)
    assert close(got["logits"], models["resnet_fixed"].reference(feeds)["logits"])
    assert requests.get(f"{url}/v2/health/ready", timeout=10).status_code == 200
