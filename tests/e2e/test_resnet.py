"""ResNet-50, the first proof: end to end on OpenCL, every node on the device, matching onnxruntime."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import assert_all_on_device, assert_close

import clglow
from clglow.models import resnet18, resnet50

ort = pytest.importorskip("onnxruntime")


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _image(batch=1, seed=0):
    return np.random.default_rng(seed).random((batch, 3, 224, 224), dtype=np.float64).astype(np.float32)


@pytest.mark.parametrize("opset", [13, 9])
def test_resnet50_matches_onnxruntime(opset):
    model = resnet50(opset=opset, seed=opset)
    sess = clglow.InferenceSession(model)
    assert_all_on_device(sess)
    x = _image(seed=opset)
    (got,) = sess.run(None, {"data": x})
    (ref,) = _ort(model, {"data": x})
    assert_close(got, ref)
    assert list(np.argsort(-got[0])[:5]) == list(np.argsort(-ref[0])[:5])
    # one plan, reused: a second run with new data is also right
    x2 = _image(seed=opset + 100)
    assert_close(sess.run(None, {"data": x2})[0], _ort(model, {"data": x2})[0])


def test_resnet50_fuses_conv_bn_add_relu():
    sess = clglow.InferenceSession(resnet50())
    ops = [p.op_type for p in sess.placement]
    assert "BatchNormalization" not in ops and "Relu" not in ops and "Add" not in ops
    assert ops.count("FusedConv") + ops.count("Conv") == 53


def test_resnet18_batch3():
    model = resnet18(batch=3, seed=3)
    sess = clglow.InferenceSession(model)
    x = _image(3, seed=5)
    assert_close(sess.run(None, {"data": x})[0], _ort(model, {"data": x})[0])


@pytest.mark.slow
def test_resnet50_dynamic_batch():
    model = resnet50(batch="N", seed=1)
    sess = clglow.InferenceSession(model)
    assert sess.get_inputs()[0].shape == ["N", 3, 224, 224]
    for n in (1, 2):
        x = _image(n, seed=n)
        assert_close(sess.run(None, {"data": x})[0], _ort(model, {"data": x})[0])
    assert_all_on_device(sess)


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import clglow
    from clglow.models import resnet50
    from clglow.runtime import cache
    sess = clglow.InferenceSession(resnet50())
    y = sess.run(None, {"data": np.zeros((1, 3, 224, 224), np.float32)})[0]
    print("STATS" + json.dumps(cache.stats()))
""")


def test_second_process_builds_no_program(tmp_path):
    # CLGLOW_CACHE=1: our disk layer even on pocl (which by default is left to pocl's own cache);
    # no compile helpers, so that the first process's own counters hold every build
    env = dict(os.environ, CLGLOW_CACHE_DIR=str(tmp_path / "cache"), CLGLOW_CACHE="1", CLGLOW_COMPILE_WORKERS="0")
    stats = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("STATS")][-1]
        stats.append(json.loads(line[5:]))
    assert stats[0]["source_builds"] > 0
    assert stats[1]["source_builds"] == 0, stats[1]
    # every program comes from the disk (the first process also built the GEMM tiles it measured)
    assert 0 < stats[1]["binary_loads"] <= stats[0]["source_builds"]
