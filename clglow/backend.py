"""clglow as an ONNX backend (`onnx.backend.base.Backend`).

    import clglow.backend as backend
    rep = backend.prepare(model, "CPU")          # "CPU" = the selected OpenCL device
    outputs = rep.run([x])                       # list/tuple (graph input order) or dict
    outputs = backend.run_node(node, [x, y])     # one node, types taken from the inputs

Device strings: "CPU" (and "OpenCL") mean the OpenCL device that CLGLOW_DEVICE selects (the
default device otherwise); "OpenCL:<selector>" picks one explicitly, e.g. "OpenCL:0:1" or
"OpenCL:gpu". CUDA and other onnx device types are not supported.

Host fallback follows CLGLOW_HOST_FALLBACK unless `prepare(..., host_fallback=False/True)` says
otherwise; with it disabled, a node without an OpenCL kernel raises UnsupportedOperator.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from .dtypes import numpy_to_onnx
from .errors import InvalidArgument
from .session import InferenceSession, SessionOptions

log = logging.getLogger(__name__)

_CPU_ALIASES = ("CPU", "OPENCL", "")


def _device_selector(device: Optional[str]) -> Optional[str]:
    """The CLGLOW_DEVICE-style selector for an onnx backend device string (None: the default)."""
    if device is None:
        return None
    d = str(device).strip()
    if d.upper() in _CPU_ALIASES:
        return None
    if d.upper().startswith("OPENCL:"):
        return d.split(":", 1)[1] or None
    raise InvalidArgument(f"unsupported device {device!r}; use 'CPU' (the selected OpenCL device), "
                          f"'OpenCL' or 'OpenCL:<platform:device selector>'")


def _as_array(x: Any, dtype: Optional[np.dtype]) -> Any:
    """numpy arrays as they are; numpy scalars and Python numbers as arrays of the declared dtype."""
    if isinstance(x, np.ndarray) or isinstance(x, (list, dict)) and dtype is None:
        return x
    if isinstance(x, np.generic):
        arr = np.asarray(x)
        if dtype is not None and arr.dtype != dtype and np.can_cast(arr.dtype, dtype, "same_kind"):
            arr = arr.astype(dtype)
        return arr
    if isinstance(x, (bool, int, float, complex)):
        return np.asarray(x, dtype=dtype) if dtype is not None else np.asarray(x)
    if x is None:
        return x
    arr = np.asarray(x)
    if dtype is not None and arr.dtype != dtype and arr.dtype.kind in "biuf" and np.dtype(dtype).kind in "biuf" \
            and not isinstance(x, np.ndarray):
        arr = arr.astype(dtype)
    return arr


class ClglowRep(BackendRep):
    """A prepared model: `run(inputs)` returns the outputs as a namedtuple-like dict."""

    def __init__(self, session: InferenceSession):
        self.session = session
        self._inputs = session.get_inputs()
        self._outputs = [o.name for o in session.get_outputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """`inputs`: a list/tuple in graph input order, a dict by name, or one array/scalar."""
        names = [a.name for a in self._inputs]
        dtypes = {a.name: a.dtype for a in self._inputs}
        if isinstance(inputs, Mapping):
            feed = {k: _as_array(v, dtypes.get(k)) for k, v in inputs.items()}
        else:
            if isinstance(inputs, (np.ndarray, np.generic, int, float, bool)):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(names):
                raise InvalidArgument(f"{len(inputs)} inputs given, the model has {len(names)}: {names}")
            feed = {n: _as_array(x, dtypes[n]) for n, x in zip(names, inputs)}
        outs = self.session.run(None, feed)
        return namedtupledict("Outputs", self._outputs)(*outs)


class ClglowBackend(Backend):
    """onnx backend over clglow's InferenceSession."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> ClglowRep:
        """Load `model` (ModelProto, bytes or path). kwargs: host_fallback (bool),
        graph_optimization_level (int), precision ("fp32", "fp16", "auto"), sess_options
        (SessionOptions)."""
        opts = kwargs.pop("sess_options", None) or SessionOptions()
        if "host_fallback" in kwargs:
            opts.host_fallback = kwargs.pop("host_fallback")
        if "precision" in kwargs:
            opts.precision = kwargs.pop("precision")
        if "graph_optimization_level" in kwargs:
            opts.graph_optimization_level = int(kwargs.pop("graph_optimization_level"))
        if kwargs:
            log.debug("clglow backend ignores prepare() options %s", sorted(kwargs))
        session = InferenceSession(model, opts, device=_device_selector(device))
        return ClglowRep(session)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence[tuple]] = None, **kwargs: Any) -> tuple:
        """Run one node; input types and shapes come from `inputs` (list in node input order or dict)."""
        opset = kwargs.pop("opset_version", None)
        if isinstance(inputs, Mapping):
            arrays = [inputs.get(n) for n in node.input]
        else:
            arrays = list(inputs)
        graph_inputs, feed = [], {}
        for name, x in zip(node.input, arrays):
            if not name or x is None:
                continue
            arr = np.asarray(x)
            graph_inputs.append(helper.make_tensor_value_info(name, numpy_to_onnx(arr.dtype), arr.shape))
            feed[name] = arr
        outs = []
        for k, name in enumerate(o for o in node.output if o):
            if outputs_info and k < len(outputs_info):
                dt, shape = outputs_info[k]
                outs.append(helper.make_tensor_value_info(name, numpy_to_onnx(np.dtype(dt)), shape))
            else:
                outs.append(helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None))
        graph = helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, outs)
        opsets = [helper.make_opsetid(node.domain or "", opset)] if opset else None
        model = helper.make_model(graph, opset_imports=opsets) if opsets else helper.make_model(graph)
        rep = cls.prepare(model, device, **kwargs)
        return rep.run(feed)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """"CPU" (the selected OpenCL device) and "OpenCL[:selector]"; not CUDA."""
        try:
            sel = _device_selector(device)
        except InvalidArgument:
            return False
        if sel is None:
            return True
        try:
            from .runtime.device import select_device

            select_device(sel)
            return True
        except Exception:
            return False


prepare = ClglowBackend.prepare
run_model = ClglowBackend.run_model
run_node = ClglowBackend.run_node
supports_device = ClglowBackend.supports_device
is_compatible = ClglowBackend.is_compatible

__all__ = ["ClglowBackend", "ClglowRep", "prepare", "run_model", "run_node", "supports_device"]
