"""A C host compiled here with gcc dlopen()s libonnxifi-clglow.so and runs a model end to end."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxifi_testutil import HERE, run

pytestmark = pytest.mark.onnxifi
sys.path.insert(0, str(HERE))
from onnxifi_models import reference, small_convnet  # noqa: E402

DATATYPES = {np.dtype(np.float32): 1, np.dtype(np.int64): 7, np.dtype(np.int32): 6, np.dtype(np.uint8): 2}


def write_case(folder: Path, model: onnx.ModelProto, weights: dict, inputs: dict, outputs: dict) -> Path:
    """model.onnx + tensors.txt + raw files, as c_host.c reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    lines = []
    for role, tensors in (("weight", weights), ("input", inputs), ("output", outputs)):
        for i, (name, arr) in enumerate(tensors.items()):
            arr = np.ascontiguousarray(arr)
            fname = f"{role}_{i}.bin"
            (folder / fname).write_bytes(arr.tobytes())
            lines.append(" ".join([role, name, str(DATATYPES[arr.dtype]), str(arr.ndim)]
                                  + [str(d) for d in arr.shape] + [fname]))
    (folder / "tensors.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def c_host(cc, header, tmp_path_factory) -> Path:
    import onnxifi

    exe = tmp_path_factory.mktemp("chost") / "c_host"
    include = Path(onnxifi.__file__).parent / "csrc"
    p = run([cc, "-std=c11", "-O1", "-Wall", "-Werror", "-I", include, "-I", header.parent.parent,
             HERE / "c_host.c", "-o", exe, "-ldl", "-lm"], timeout=120)
    assert p.returncode == 0, "c_host.c does not compile"
    return exe


def test_c_host_small_convnet(c_host, library, device_env, tmp_path):
    model, weights = small_convnet(seed=3, weights_as_inputs=True)
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y = reference(model, {"x": x, **weights})[0]
    case = write_case(tmp_path / "case", model, weights, {"x": x}, {"y": y})
    p = run([c_host, library, case, "1e-4"], timeout=600, env=device_env)
    assert p.returncode == 0 and "PASS" in p.stdout


@pytest.mark.slow
def test_c_host_resnet50(c_host, library, device_env, tmp_path):
    from clglow.models import resnet50

    model = resnet50(opset=13, batch=1, seed=0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    import onnxruntime as ort

    name = model.graph.input[0].name
    out = model.graph.output[0].name
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {name: x})[0]
    case = write_case(tmp_path / "resnet", model, {}, {name: x}, {out: y})
    p = run([c_host, library, case, "1e-3"], timeout=1200, env=device_env)
    assert p.returncode == 0 and "PASS" in p.stdout
