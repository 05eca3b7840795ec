"""Resize kernel vs every Resize case of the ONNX backend suite, with roi/scales/sizes given as
constants (the suite feeds them as run-time inputs, which makes the output shape data-dependent)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

pytest.importorskip("pyopencl")
try:  # tests/kernels may or may not be a package
    from .harness import check, lower  # noqa: E402
    from .run_launches import check as check_ref  # noqa: E402
except ImportError:
    from harness import check, lower  # type: ignore  # noqa: E402
    from run_launches import check as check_ref  # type: ignore  # noqa: E402


def _cases():
    try:
        from onnx.backend.test.case.node import collect_testcases
    except ImportError:  # pragma: no cover
        return []
    out = []
    for c in collect_testcases(None):
        nodes = c.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type == "Resize" and c.data_sets:
            out.append(c)
    return out


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resize_backend_case(case):
    node = case.model.graph.node[0]
    inputs, outputs = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    vals = dict(zip(names, inputs))
    feeds = {node.input[0]: np.asarray(vals[node.input[0]])}
    consts = {n: np.asarray(vals[n]) for n in node.input[1:] if n}
    opset = case.model.opset_import[0].version
    check(node, feeds, consts, opset=opset, expected=[np.asarray(o) for o in outputs], rtol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_upsample_2x(mode):
    x = np.random.default_rng(41).standard_normal((1, 2, 5, 6)).astype(np.float32)
    check_ref(helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode), {"x": x},
              {"s": np.array([1, 1, 2, 2], np.float32)}, opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scales,kernel", [
    ([1, 1, 2.0, 2.0], "resize_2d"),       # the last two axes at once
    ([1, 1, 1.0, 1.7], "resize_2d"),       # one of them unchanged (the identity tap on the other)
    ([1, 1, 0.6, 3.0], "resize_2d"),       # down and up
    ([1, 2, 2.0, 2.0], "resize_axis"),     # a channel axis resized too: one launch per axis
])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_paths(scales, kernel, mode):
    """Rows wider than one 16-output run (37 -> 74) and ragged ends, against onnxruntime
    (onnx.reference where onnxruntime refuses: linear/cubic along the channels)."""
    x = np.random.default_rng(43).standard_normal((2, 3, 9, 37)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)
    consts = {"s": np.array(scales, np.float32)}
    oracle = "reference" if scales[1] != 1 else "onnxruntime"
    check_ref(node, {"x": x}, consts, opset=19, rtol=1e-4, atol=1e-5, oracle=oracle)
    out = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales))
    names = [l.kernel for l in lower(node, {"x": x}, consts, {"y": (out, np.float32)}, opset=19)]
    names = ["resize_2d" if n == "resize_2d_win" else n for n in names]  # the 2-D pass, rows per work-item
    assert kernel in names and (kernel == "resize_axis") == ("resize_2d" not in names), names
