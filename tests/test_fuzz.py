"""Property-based fuzzing of the frontend: mutated valid models either load and run, or raise a
clglow error. Run in a child process so that a crash (in clglow or in a library below it) fails
the test instead of the test run."""
from __future__ import annotations

import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(r'''
    import sys
    import numpy as np
    from hypothesis import HealthCheck, given, settings, strategies as st
    from onnx import TensorProto, helper
    import clglow

    def model_bytes():
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 27])
        w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2, 3, 3], np.linspace(-1, 1, 54).tolist())
        s = helper.make_tensor("s", TensorProto.INT64, [2], [1, -1])
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Reshape", ["p", "s"], ["y"])]
        g = helper.make_graph(nodes, "fuzz", [x], [y], [w, s])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()

    BASE = model_bytes()
    X = np.linspace(-1, 1, 72, dtype=np.float32).reshape(1, 2, 6, 6)
    seen = {"ok": 0, "clean": 0}

    def attempt(data):
        try:
            sess = clglow.InferenceSession(data)
            feeds = {a.name: X for a in sess.get_inputs() if a.shape == [1, 2, 6, 6] and a.type == "tensor(float)"}
            if len(feeds) == len(sess.get_inputs()):
                sess.run(None, feeds)
            seen["ok"] += 1
        except clglow.ClglowError:
            seen["clean"] += 1

    @settings(max_examples=int(sys.argv[1]), deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 255)), min_size=0, max_size=3),
           st.one_of(st.just(len(BASE)), st.integers(1, len(BASE))))
    def mutated(flips, cut):
        data = bytearray(BASE[:cut])
        for pos, val in flips:
            if pos < len(data):
                data[pos] = val
        attempt(bytes(data))

    mutated()
    print("FUZZ", seen["ok"], seen["clean"])
''')


def test_mutated_models_never_crash_or_raise_foreign_errors():
    out = subprocess.run([sys.executable, "-c", _CHILD, "150"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("FUZZ")][-1]
    ok, clean = map(int, line.split()[1:])
    assert ok + clean >= 150
    assert clean > 0 and ok > 0  # the mutations reach both the error paths and the running path
