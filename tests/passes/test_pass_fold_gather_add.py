"""passes/fold_gather_add.py: Add(Gather(W, ids), P) with constant W and P, P the same for every
gathered row, becomes a Gather from W + P (a decode step's token + position embedding); a P that
differs across the index axes, a table with another user, a live P or another Gather axis stay.
Results against onnxruntime, bit for bit (the folded table rounds W + P once, as the Add did)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import clglow
from clglow.frontend.onnx_model import import_model
from clglow.passes.dead_code import remove_dead_nodes
from clglow.passes.fold_gather_add import fold_gather_add

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import models  # noqa: E402  (tests/models.py: ort_run)

RNG = np.random.default_rng(31)


def _model(case: str):
    ids_shape = [2, 3] if case == "per_index_row" else [1, 1]
    p_shape = {"per_index_row": [2, 1, 8], "short_p": [8]}.get(case, [1, 1, 8])
    axis = 1 if case == "axis1" else 0
    w_shape = [8, 50] if case == "axis1" else [50, 8]
    out = ids_shape + [8] if axis == 0 else [8] + ids_shape
    nodes = [helper.make_node("Gather", ["w", "ids"], ["e"], axis=axis),
             helper.make_node("Add", ["p", "e"] if case == "p_first" else ["e", "p"], ["y"])]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, out)]
    if case == "table_used_twice":
        nodes.append(helper.make_node("ReduceSum", ["w"], ["z"], keepdims=0))
        outs.append(helper.make_tensor_value_info("z", T.FLOAT, []))
    if case == "axis1":
        p_shape = [8, 1, 1]
    inits = [numpy_helper.from_array(RNG.standard_normal(w_shape).astype(np.float32), "w")]
    ins = [helper.make_tensor_value_info("ids", T.INT64, ids_shape)]
    if case == "live_p":
        ins.append(helper.make_tensor_value_info("p", T.FLOAT, p_shape))
    else:
        inits.append(numpy_helper.from_array(RNG.standard_normal(p_shape).astype(np.float32), "p"))
    g = helper.make_graph(nodes, "g", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"ids": RNG.integers(0, 50 if axis == 0 else 8, ids_shape).astype(np.int64)}
    if case == "live_p":
        feeds["p"] = RNG.standard_normal(p_shape).astype(np.float32)
    return m, feeds


@pytest.mark.parametrize("case,ops", [
    ("decode", ["Gather"]), ("p_first", ["Gather"]), ("short_p", ["Gather"]), ("per_index_row", ["Gather", "Add"]),
    ("table_used_twice", ["Gather", "Add", "ReduceSum"]), ("live_p", ["Gather", "Add"]), ("axis1", ["Gather", "Add"])])
def test_fold_gather_add(case, ops):
    m, feeds = _model(case)
    assert [n.op_type for n in remove_dead_nodes(fold_gather_add(import_model(m))).nodes] == ops
    got, want = clglow.InferenceSession(m.SerializeToString()).run(None, feeds), models.ort_run(m, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    if len(got) > 1:  # the table's sum: a reduction, in another order
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-4)
