"""Clients of the serving tests: tritonclient.http (binary tensors, its default) and plain
HTTP/JSON with requests, each returning {output name: numpy array}."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import requests

DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64", np.dtype(np.float64): "FP64",
             np.dtype(np.int32): "INT32", np.dtype(np.bool_): "BOOL"}
JSON_DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "BOOL": np.bool_}


def triton_client(url: str):
    import tritonclient.http as th

    return th.InferenceServerClient(url.split("://", 1)[-1], connection_timeout=60.0, network_timeout=60.0)


def triton_infer(client, model: str, feeds: dict, binary: bool = True,
                 outputs: Optional[Sequence[str]] = None) -> dict:
    import tritonclient.http as th

    inputs = []
    for name, x in feeds.items():
        inp = th.InferInput(name, list(x.shape), DATATYPES[x.dtype])
        inp.set_data_from_numpy(x, binary_data=binary)
        inputs.append(inp)
    req_out = None if outputs is None else [th.InferRequestedOutput(n, binary_data=binary) for n in outputs]
    result = client.infer(model, inputs, outputs=req_out)
    names = outputs or [o["name"] for o in result.get_response()["outputs"]]
    return {n: result.as_numpy(n) for n in names}


def json_request(feeds: dict) -> dict:
    return {"inputs": [{"name": n, "shape": list(x.shape), "datatype": DATATYPES[x.dtype], "data": x.ravel().tolist()}
                       for n, x in feeds.items()]}


def json_infer(url: str, model: str, feeds: dict, session: Optional[requests.Session] = None) -> dict:
    r = (session or requests).post(f"{url}/v2/models/{model}/infer", json=json_request(feeds), timeout=60)
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
    doc = r.json()
    return {o["name"]: np.array(o["data"], dtype=JSON_DTYPES[o["datatype"]]).reshape(o["shape"]) for o in doc["outputs"]}
