"""The com.microsoft domain in the frontend: the schema registry against onnxruntime's own schemas,
refusals (unknown contrib ops and domains, broken nodes) and the shape/dtype rules against the
shapes onnxruntime produces."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import clglow
from clglow.errors import InvalidModel, UnsupportedOperator
from clglow.frontend import contrib_ops
from clglow.frontend.onnx_model import import_model
from quant_oracle import ort_literal_run

MS = "com.microsoft"


def _ort_schemas() -> dict:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return {s.name: s for s in C.get_all_operator_schema() if s.domain == MS}


@pytest.mark.parametrize("op", sorted(contrib_ops.SCHEMAS))
def test_registry_matches_onnxruntime_schema(op):
    ours, theirs = contrib_ops.SCHEMAS[op], _ort_schemas()[op]
    names = [i.name for i in theirs.inputs]
    if ours.variadic is None:
        assert list(ours.inputs) == names
        assert ours.max_inputs == theirs.max_input
    else:  # onnxruntime lists the variadic tail as one formal parameter
        assert list(ours.inputs[:ours.variadic]) == names[:ours.variadic]
        assert theirs.max_input > 1000
    group = len(ours.inputs) - (ours.variadic if ours.variadic is not None else len(ours.inputs))
    # the variadic tail's unit is one input there, a whole (X, scale, zero point) group here (as its kernel needs)
    assert ours.min_inputs == theirs.min_input + max(group - 1, 0)
    assert list(ours.outputs) == [o.name for o in theirs.outputs]
    assert set(ours.attrs) == set(theirs.attributes)
    assert set(ours.required) == {k for k, a in theirs.attributes.items() if a.required}


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _ms_model(nodes, inputs, outputs, inits=(), ms_version=1, extra=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, ms_version)] + [helper.make_opsetid(d, 1) for d in extra]
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m.SerializeToString()


def test_unknown_contrib_ops_are_all_listed():
    nodes = [helper.make_node("QLinearWhere", ["x"], ["y"], name="qwhere", domain=MS),
             helper.make_node("FancyOp", ["y"], ["z"], name="fancy", domain=MS)]
    m = _ms_model(nodes, [_vi("x", TensorProto.UINT8, [2])], [_vi("z", TensorProto.UINT8, [2])])
    with pytest.raises(UnsupportedOperator) as e:
        clglow.InferenceSession(m)
    msg = str(e.value)
    assert "qwhere" in msg and "fancy" in msg and "com.microsoft" in msg
    assert [n.name for n in e.value.nodes] == ["qwhere", "fancy"]


def test_unknown_domain_is_refused_at_load():
    nodes = [helper.make_node("Thing", ["x"], ["y"], name="thing_node", domain="org.example")]
    m = _ms_model(nodes, [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])],
                  extra=["org.example"])
    with pytest.raises(UnsupportedOperator, match="thing_node.*org.example"):
        clglow.InferenceSession(m)


@pytest.mark.parametrize("inputs,attrs,match", [
    (["a", "s", "z", "b", "s"], {}, "at least 7"),
    (["a", "s", "z", "b", "s", "z", "s", "z", "s"], {}, "at most 8"),
    (["a", "s", "z", "b", "s", "z", "s", "z"], {"beta": 1.0}, "does not define"),
])
def test_broken_contrib_node_is_invalid_model(inputs, attrs, match):
    node = helper.make_node("QLinearAdd", inputs, ["c"], name="bad_add", domain=MS, **attrs)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")]
    m = _ms_model([node], [_vi("a", TensorProto.UINT8, [2]), _vi("b", TensorProto.UINT8, [2])],
                  [_vi("c", TensorProto.UINT8, [2])], inits)
    with pytest.raises(InvalidModel, match=match) as e:
        clglow.InferenceSession(m)
    assert e.value.node == "bad_add"


def test_required_attribute_and_concat_groups():
    node = helper.make_node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], name="sm", domain=MS)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")]
    m = _ms_model([node], [_vi("x", TensorProto.UINT8, [2])], [_vi("y", TensorProto.UINT8, [2])], inits)
    with pytest.raises(InvalidModel, match="required attribute.*opset"):
        clglow.InferenceSession(m)
    node = helper.make_node("QLinearConcat", ["s", "z", "x", "s", "z", "x", "s"], ["y"], name="cat", domain=MS, axis=0)
    m = _ms_model([node], [_vi("x", TensorProto.UINT8, [2])], [_vi("y", TensorProto.UINT8, [2])], inits)
    with pytest.raises(InvalidModel, match="groups of 3"):
        clglow.InferenceSession(m)


def test_contrib_opset_version():
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], domain=MS)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s")]
    m = _ms_model([node], [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.UINT8, [2])], inits, ms_version=3)
    with pytest.raises(InvalidModel, match="com.microsoft"):
        clglow.InferenceSession(m)


def _q(rng, shape, dt=np.uint8):
    return rng.integers(0, 255, size=shape).astype(dt) if dt == np.uint8 else rng.integers(-128, 127, size=shape).astype(dt)


def _consts(**kw):
    return {k: np.asarray(v) for k, v in kw.items()}


S, Z, ZI = np.float32(0.05), np.uint8(3), np.int8(1)
SHAPE_CASES = [
    ("QGemm", ["a", "s", "z", "b", "s", "zi"], {"transB": 1},
     {"a": ((3, 4), np.uint8)}, _consts(b=np.ones((5, 4), np.int8), s=S, z=Z, zi=ZI)),
    ("QGemm", ["a", "s", "z", "b", "s", "zi", "", "s", "z"], {"transA": 1},
     {"a": ((4, 3), np.uint8)}, _consts(b=np.ones((4, 5), np.int8), s=S, z=Z, zi=ZI)),
    ("MatMulIntegerToFloat", ["a", "b", "s", "s", "z", "zi"], {},
     {"a": ((2, 3, 4), np.uint8)}, _consts(b=np.ones((4, 5), np.int8), s=S, z=Z, zi=ZI)),
    ("DynamicQuantizeMatMul", ["x", "b", "s", "zi"], {},
     {"x": ((2, 3, 4), np.float32)}, _consts(b=np.ones((4, 6), np.int8), s=S, zi=ZI)),
    ("QLinearConv", ["a", "s", "z", "w", "s", "zi", "s", "z"], {"strides": [2, 2], "pads": [1, 1, 1, 1]},
     {"a": ((1, 3, 9, 9), np.uint8)}, _consts(w=np.ones((4, 3, 3, 3), np.int8), s=S, z=Z, zi=ZI)),
    ("QLinearAveragePool", ["a", "s", "z", "s", "z"], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
     {"a": ((1, 2, 8, 8), np.uint8)}, _consts(s=S, z=Z)),
    ("QLinearGlobalAveragePool", ["a", "s", "z", "s", "z"], {"channels_last": 1},
     {"a": ((2, 5, 5, 7), np.uint8)}, _consts(s=S, z=Z)),
    ("QLinearConcat", ["s", "z", "a", "s", "z", "a2", "s", "z"], {"axis": 2},
     {"a": ((2, 3, 4), np.uint8), "a2": ((2, 3, 1), np.uint8)}, _consts(s=S, z=Z)),
    ("QLinearMul", ["a", "s", "z", "a2", "s", "z", "s", "z"], {},
     {"a": ((2, 1, 4), np.uint8), "a2": ((3, 1), np.uint8)}, _consts(s=S, z=Z)),
    ("DequantizeLinear", ["a", "s", "z"], {}, {"a": ((2, 3), np.uint8)}, _consts(s=S, z=Z)),
    ("QuantizeLinear", ["x", "s"], {}, {"x": ((2, 3), np.float32)}, _consts(s=S)),
]


@pytest.mark.parametrize("op,ins,attrs,inputs,consts", SHAPE_CASES, ids=[c[0] + str(i) for i, c in enumerate(SHAPE_CASES)])
def test_shape_rules_match_onnxruntime(op, ins, attrs, inputs, consts):
    rng = np.random.default_rng(0)
    feeds = {k: (_q(rng, s, dt) if dt != np.float32 else rng.standard_normal(s).astype(dt)) for k, (s, dt) in inputs.items()}
    elem = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
            np.dtype(np.float32): TensorProto.FLOAT}
    node = helper.make_node(op, ins, ["y"], name="n", domain=MS, **attrs)
    gin = [_vi(k, elem[v.dtype], list(v.shape)) for k, v in feeds.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    # the output declared with a symbolic rank-free type of the expected element type: onnxruntime decides
    out_elem = TensorProto.FLOAT if op in ("MatMulIntegerToFloat", "DynamicQuantizeMatMul", "DequantizeLinear") or (
        op == "QGemm" and "" not in ins) else TensorProto.UINT8
    proto = onnx.load_from_string(_ms_model([node], gin, [_vi("y", out_elem, None)], inits))
    del proto.graph.output[0].type.tensor_type.shape.dim[:]
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    ref = ort_literal_run(proto, feeds)[0]
    graph = import_model(proto, check=False)
    (dtype, shape), = contrib_ops.infer(graph.nodes[0], graph).values()
    assert tuple(shape) == ref.shape
    assert np.dtype(dtype) == ref.dtype


def test_ops_table_lists_the_contrib_ops():
    """`python -m clglow.ops_table com.microsoft`: every registry op, with its OpenCL/host columns."""
    import io

    from clglow import ops_table
    from clglow.lower import REGISTRY

    buf = io.StringIO()
    ops_table.main(buf, domain="com.microsoft")
    text = buf.getvalue()
    for op in contrib_ops.SCHEMAS:
        dev = "yes" if (MS, op) in REGISTRY else ""
        assert f"| {op} | {dev} | yes |" in text
    for op in ("QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QuantizeLinear", "DequantizeLinear"):
        assert (MS, op) in REGISTRY, op


def test_contrib_outputs_typed_at_import():
    """onnx's shape inference leaves com.microsoft outputs untyped; the import types them (a chain
    of contrib nodes through), so the session reports real output types."""
    s, z = numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")
    nodes = [helper.make_node("QLinearSigmoid", ["x", "s", "z", "s", "z"], ["a"], domain=MS),
             helper.make_node("QLinearAdd", ["a", "s", "z", "x", "s", "z", "s", "z"], ["b"], domain=MS),
             helper.make_node("QLinearGlobalAveragePool", ["b", "s", "z", "s", "z"], ["y"], domain=MS)]
    proto = onnx.load_from_string(_ms_model(nodes, [_vi("x", TensorProto.UINT8, [2, 3, 4, 5])],
                                            [_vi("y", TensorProto.UINT8, ["n", "c", "h", "w"])], [s, z]))
    g = import_model(proto)
    assert g.values["a"].shape == (2, 3, 4, 5) and g.values["a"].dtype == np.uint8
    assert g.values["b"].shape == (2, 3, 4, 5)
    assert g.values["y"].dtype == np.uint8


def test_channels_last_qlinear_conv_runs_on_the_host():
    """No NHWC kernel: the com.microsoft QLinearConv with channels_last runs on the host reference
    (and CLGLOW_HOST_FALLBACK=0 refuses it, naming the node)."""
    from quant_oracle import clglow_session_run

    rng = np.random.default_rng(0)
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8), "w": rng.integers(-128, 127, (4, 3, 3, 3)).astype(np.int8),
             "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8), "ys": np.array(0.2, np.float32),
             "yz": np.array(100, np.uint8)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="nhwc_conv",
                            domain=MS, channels_last=1, pads=[1, 1, 1, 1])
    m = onnx.load_from_string(_ms_model([node], [_vi("x", TensorProto.UINT8, [1, 6, 6, 3])],
                                        [_vi("y", TensorProto.UINT8, [1, 6, 6, 4])],
                                        [numpy_helper.from_array(v, k) for k, v in inits.items()]))
    x = rng.integers(0, 255, (1, 6, 6, 3)).astype(np.uint8)
    (y,), sess = clglow_session_run(m, {"x": x}, device_only=False)
    assert [p.where for p in sess.placement] == ["host"] and "channels_last" in sess.placement[0].reason
    assert y.shape == (1, 6, 6, 4)
    with pytest.raises(UnsupportedOperator, match="nhwc_conv"):
        clglow_session_run(m, {"x": x}, device_only=True)
