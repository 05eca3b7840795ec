"""InferenceSession: the onnxruntime-shaped Python API.

    sess = clglow.InferenceSession("model.onnx")            # path, bytes or onnx.ModelProto
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})

Loading does the whole pipeline once (import, passes, placement); when every
input shape is static the execution plan (kernels built, buffers allocated,
weights uploaded) is built at load too, otherwise on the first run of each new
input shape.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pyopencl as cl

from . import config
from .config import PRECISIONS, PlanOptions
from .dtypes import onnx_type_string
from .errors import InvalidArgument
from .frontend import graph_cache
from .frontend.onnx_model import ModelLike, import_model, load_model
from .ir import Graph
from .lower import has_kernel
from .partition import Placement, format_placement, place
from .passes.pipeline import optimize
from .passes.half_islands import widen_half_nodes
from .passes.precision import apply_precision, resolve_precision
from .runtime.binding import HostStep
from .runtime.cache import disk_key
from .lower.tunable import request_mark, requests_since
from .runtime.engine import Engine
from .runtime.search import start_background
from .target import FAMILIES

log = logging.getLogger(__name__)

from .errors import ONNXIFI_STATUS_MISMATCHING_DATATYPE as _ONNXIFI_MISMATCHING_DATATYPE  # noqa: E402
from .errors import ONNXIFI_STATUS_MISMATCHING_SHAPE as _ONNXIFI_MISMATCHING_SHAPE  # noqa: E402
from .errors import ONNXIFI_STATUS_UNIDENTIFIED_NAME as _ONNXIFI_UNIDENTIFIED_NAME  # noqa: E402


@dataclass
class SessionOptions:
    """Options of a session: the subset of onnxruntime's that means something here, and
    clglow's behaviour switches. Each switch left at None takes its CLGLOW_* environment
    variable's value (config.py), so the environment only sets defaults; the switches that
    change a plan (winograd, zero_copy, sub_batch_bytes, target, host_fallback) become the
    session's `PlanOptions`, part of every plan's cache key.

    Example::

        SessionOptions(target="gpu", winograd=False)   # the GPU kernel families, no Winograd
    """

    enable_profiling: bool = False
    profile_file_prefix: str = "clglow_profile"
    host_fallback: Optional[bool] = None  # CLGLOW_HOST_FALLBACK (default on)
    graph_optimization_level: int = 99  # 0 disables fusions (constant folding always runs)
    log_severity_level: int = 2
    target: Optional[str] = None  # CLGLOW_TARGET: "cpu" | "gpu" kernel families (default: the device's)
    winograd: Optional[bool] = None  # CLGLOW_WINOGRAD: Winograd for stride-1 3x3 convs (default on)
    zero_copy: Optional[bool] = None  # CLGLOW_ZERO_COPY: kernels use the caller's arrays where allowed
    sub_batch_bytes: Optional[int] = None  # CLGLOW_SUB_BATCH_BYTES: bytes per sub-batch piece (0: off)
    tune: Optional[bool] = None  # CLGLOW_TUNE: measure the GEMM tiles on the device's first use
    max_tensor_bytes: Optional[int] = None  # CLGLOW_MAX_TENSOR_BYTES: cap on any declared tensor
    # CLGLOW_PRECISION: storage of float tensors, "fp32" (default), "fp16" (half storage, fp32
    # arithmetic; inputs and outputs keep their types) or "auto" (fp16 where the device's profile
    # says it pays: passes/precision.py); InferenceSession.precision is the resolved value
    precision: Optional[str] = None

    def plan_options(self) -> PlanOptions:
        """The plan switches: these options over the CLGLOW_* defaults."""
        for name in ("winograd", "zero_copy", "host_fallback", "tune"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (bool, np.bool_)) or value in (0, 1)):
                raise InvalidArgument(f"SessionOptions.{name} must be True, False or None, got {value!r}")
        if self.sub_batch_bytes is not None and (not isinstance(self.sub_batch_bytes, int) or self.sub_batch_bytes < 0):
            raise InvalidArgument(f"SessionOptions.sub_batch_bytes must be an int >= 0 or None, "
                                  f"got {self.sub_batch_bytes!r}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise InvalidArgument(f"SessionOptions.precision must be one of {list(PRECISIONS)} or None, "
                                  f"got {self.precision!r}")
        if self.target is not None and self.target not in FAMILIES:
            raise InvalidArgument(f"SessionOptions.target must be one of {list(FAMILIES)} or None, got {self.target!r}")
        try:
            return PlanOptions.from_env(winograd=self.winograd, zero_copy=self.zero_copy,
                                        sub_batch_bytes=self.sub_batch_bytes, target=self.target,
                                        precision=self.precision,
                                        host_fallback=None if self.host_fallback is None else bool(self.host_fallback))
        except ValueError as e:  # a bad CLGLOW_TARGET
            raise InvalidArgument(str(e)) from None


@dataclass(frozen=True)
class NodeArg:
    """An input or output of the model: name, shape (ints, str for symbolic dims), type string."""

    name: str
    shape: list
    type: str
    dtype: Optional[np.dtype] = None


class RunHandle:
    """A run in flight: `event` completes when every output has been written."""

    def __init__(self, event: cl.Event, outputs: dict, error: Optional[BaseException] = None,
                 thread: Optional[threading.Thread] = None):
        self.event, self.outputs, self.error, self._thread = event, outputs, error, thread
        self.hold: list = []  # events and staging arrays the run still uses
        self.kernel_events: list = []  # (node, kernel, op type, cl.Event) when profiling is enabled

    def wait(self) -> dict:
        if self._thread is not None:
            self._thread.join()
        else:
            self.event.wait()
        self.hold = []
        if self.error is not None:
            raise self.error
        return self.outputs

    def done(self) -> bool:
        if self._thread is not None:
            return not self._thread.is_alive()
        return self.event.command_execution_status == cl.command_execution_status.COMPLETE


def _resolve_device(device: Any):
    from .runtime.device import Device, select_device

    if isinstance(device, Device):
        return device
    if device is None or isinstance(device, str):
        return select_device(device)
    raise InvalidArgument(f"device must be a selector string or a clglow Device, got {type(device).__name__}")


class InferenceSession:
    """Runs an ONNX model on one OpenCL device.

    `providers` is accepted for onnxruntime compatibility and ignored; `device` selects the
    OpenCL device (a `CLGLOW_DEVICE`-style selector or a Device); `weights` provides or
    overrides initializer values by name.
    """

    def __init__(self, model: ModelLike, sess_options: Optional[SessionOptions] = None,
                 providers: Optional[Sequence[Any]] = None, device: Any = None,
                 weights: Optional[Mapping[str, np.ndarray]] = None, **kwargs: Any):
        self.options = sess_options or SessionOptions()
        plan_options = self.options.plan_options()
        t0 = time.perf_counter()
        self.device = _resolve_device(device)
        self.device.start_compile_helpers_if_cold()  # pocl: build in helper processes too (cold start)
        # GEMM tiles for this device and family as stored on disk; a miss starts on the defaults and
        # measures them in the background after the first run (start_background), never before it
        tune = config.tuning_enabled() if self.options.tune is None else bool(self.options.tune)
        self.device.load_tuned(plan_options.target, tune)
        key = graph_cache.model_key(model, weights, (self.options.graph_optimization_level > 0,
                                                     self.options.max_tensor_bytes, config.max_tensor_bytes()))
        programs_key = graph_cache.programs_key(key, disk_key("", (), self.device.cl_device), (plan_options,))
        known_programs = graph_cache.load_programs(programs_key)
        self.device.prefetch(known_programs)  # a warm start: the programs build while the model loads
        loaded = self._load(model, weights, key)
        self._base_dir, self._proto_meta, self._declared = loaded.base_dir, loaded.meta, loaded.declared
        self._input_args = [self._node_arg(n, loaded.declared) for n in loaded.inputs]
        self._output_args = [self._node_arg(n, loaded.declared, named=True) for n in loaded.outputs]
        target = self.device.target(plan_options.target)
        self.precision = resolve_precision(plan_options.precision, target)  # "fp32" | "fp16", as resolved
        if plan_options.precision != "fp32":
            log.info("precision %s resolved to %s on %s", plan_options.precision, self.precision, target.name)
        self.graph: Graph = apply_precision(widen_half_nodes(loaded.graph, target), self.precision, target)
        self.host_fallback = plan_options.host_fallback
        mark = request_mark()  # the tunable shapes lowering asks for from here on (lower/tunable.py)
        self._engine = Engine(self.graph, self.device, plan_options, self.options.enable_profiling)
        self.graph = self._engine.graph  # fused nodes the Target refuses run as their original nodes
        static = all(isinstance(d, int) for a in self._input_args for d in a.shape) \
            and not self._has_unknown_inputs() and not self._engine.shape_inputs  # else plans wait for inputs
        # the static placement report (raises UnsupportedOperator now if something cannot run at all)
        self._static_placement = place(self.graph, self._engine.target, self.host_fallback)
        self._last_plan = None
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._profile_start = time.time()
        if static:
            with self.device.recording() as used:
                self._last_plan = self._engine.plan(self._input_types_static())
            graph_cache.save_programs(programs_key, used, known_programs)
        # database misses among this model's shapes: measured in the background between runs
        # (runtime/search.py: after the first run, only while idle, bounded), for later sessions
        self._tune_gate = start_background(self.device, self._engine.target,
                                           requests_since(mark, self._engine.target)) if tune and static else None
        log.info("loaded %s in %.2fs on %s", self._proto_meta["graph"], time.perf_counter() - t0,
                 getattr(self.device, "name", self.device))

    def _load(self, model: ModelLike, weights: Optional[Mapping[str, np.ndarray]],
              key: Optional[str]) -> graph_cache.Loaded:
        """Parse, import and optimize `model`, or read the result a previous process stored under
        `key` (frontend.graph_cache: large models given as a path or bytes, without `weights`)."""
        cap = self.options.max_tensor_bytes
        loaded = graph_cache.load(key)
        if loaded is not None:
            return loaded
        external: list = []
        proto, base_dir = load_model(model, external)
        meta = {"producer": proto.producer_name, "graph": proto.graph.name,
                "opsets": {o.domain or "ai.onnx": o.version for o in proto.opset_import}}
        imported = import_model(proto, weights, max_tensor_bytes=cap, has_kernel=has_kernel)
        del proto
        declared = {name: imported.values[name] for name in imported.inputs + imported.outputs}
        graph = optimize(imported, enabled=self.options.graph_optimization_level > 0)
        loaded = graph_cache.Loaded(graph, declared, list(imported.inputs), list(imported.outputs), meta, base_dir)
        graph_cache.save(key, loaded, external)
        return loaded

    # -- model description -------------------------------------------------------------------------
    @staticmethod
    def _node_arg(name: str, values: Mapping[str, Any], named: bool = False) -> NodeArg:
        """`name`'s NodeArg: ints for static dims, onnx's symbolic names (the model's, or shape
        inference's unk__N); a dim nothing names is "?", or with `named` (outputs, whose size may
        only be known after a run: NonZero, NonMaxSuppression) '<output>_dim_<i>'."""
        v = values[name]
        shape = [] if v.shape is None else [d if d is not None else (f"{name}_dim_{i}" if named else "?")
                                            for i, d in enumerate(v.shape)]
        tstr = onnx_type_string(v.dtype) if v.dtype is not None else "unknown"
        return NodeArg(name, shape, tstr, v.dtype)

    def _has_unknown_inputs(self) -> bool:
        return any(self._declared[a.name].shape is None or a.dtype is None for a in self._input_args)

    def _input_types_static(self) -> dict:
        return {a.name: (a.dtype, tuple(a.shape)) for a in self._input_args}

    def get_inputs(self) -> list[NodeArg]:
        return list(self._input_args)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._output_args)

    def get_providers(self) -> list[str]:
        return ["OpenCLExecutionProvider"]

    @property
    def placement(self) -> list[Placement]:
        """Which node runs where and why: of the last plan run, else of the loaded graph."""
        plan = self._last_plan
        if plan is None:
            return list(self._static_placement)
        out = list(plan.placement)
        st = plan
        while st.stop is not None and st.next_stages:
            st = next(iter(st.next_stages.values()))
            out += st.placement
        return out

    def explain(self) -> str:
        return format_placement(self.placement)

    # -- validation --------------------------------------------------------------------------------
    def _check_feeds(self, input_feed: Mapping[str, Any], device_buffers: bool = False) -> tuple:
        """Validate a feed against the model's inputs: (host arrays, device buffers, types).

        With `device_buffers`, an input may be a `(cl.Buffer, dtype, shape)` triple (enqueue());
        its host entry is then None.
        """
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"input_feed must be a dict of name -> array, got {type(input_feed).__name__}")
        known = {a.name: a for a in self._input_args}
        for name in input_feed:
            if name not in known:
                raise InvalidArgument(f"unknown input name; the model's inputs are {sorted(known)}", tensor=str(name),
                                      status=_ONNXIFI_UNIDENTIFIED_NAME)
        feeds: dict = {}
        device_feeds: dict = {}
        symbols: dict = {}
        types: dict = {}
        for name, arg in known.items():
            if name not in input_feed:
                raise InvalidArgument(f"missing input; the model's inputs are {sorted(known)}", tensor=name,
                                      status=_ONNXIFI_UNIDENTIFIED_NAME)
            x = input_feed[name]
            if device_buffers and isinstance(x, tuple) and len(x) == 3 and isinstance(x[0], cl.Buffer):
                buf, dtype, shape = x
                self._check_one(name, arg, np.dtype(dtype), tuple(shape), symbols)
                device_feeds[name] = buf
                feeds[name] = None
                types[name] = (np.dtype(dtype), tuple(shape))
                continue
            if isinstance(x, cl.Buffer):
                raise InvalidArgument("a cl.Buffer input goes through enqueue() as (buffer, dtype, shape)",
                                      tensor=name)
            try:
                arr = np.asarray(x)
            except Exception as e:
                raise InvalidArgument(f"cannot convert to a numpy array: {e}", tensor=name) from None
            self._check_one(name, arg, arr.dtype, arr.shape, symbols)
            feeds[name] = arr
            types[name] = (arr.dtype, arr.shape)
        return feeds, device_feeds, types

    def _check_one(self, name: str, arg: NodeArg, dtype: np.dtype, shape: tuple, symbols: dict) -> None:
        if arg.dtype is not None and np.dtype(dtype) != np.dtype(arg.dtype):
            raise InvalidArgument(f"expected {arg.type} ({np.dtype(arg.dtype).name}), got {np.dtype(dtype).name}",
                                  tensor=name, status=_ONNXIFI_MISMATCHING_DATATYPE)
        declared = self._declared[name].shape
        if declared is None:
            return
        if len(shape) != len(declared):
            raise InvalidArgument(f"expected rank {len(declared)} (shape {list(arg.shape)}), got shape "
                                  f"{list(shape)}", tensor=name, status=_ONNXIFI_MISMATCHING_SHAPE)
        for i, (d, s) in enumerate(zip(declared, shape)):
            if isinstance(d, int) and d != s:
                raise InvalidArgument(f"dimension {i} must be {d} (shape {list(arg.shape)}), got shape {list(shape)}",
                                      tensor=name, status=_ONNXIFI_MISMATCHING_SHAPE)
            if isinstance(d, str):
                if symbols.setdefault(d, (s, name))[0] != s:
                    other = symbols[d]
                    raise InvalidArgument(f"dimension {i} ({d!r}) is {s} but {d!r} is {other[0]} in input "
                                          f"{other[1]!r}", tensor=name, status=_ONNXIFI_MISMATCHING_SHAPE)

    def _select_outputs(self, output_names: Optional[Sequence[str]]) -> list[str]:
        names = [a.name for a in self._output_args]
        if output_names is None:
            return names
        if isinstance(output_names, str):
            raise InvalidArgument("output_names must be a list of names or None")
        for n in output_names:
            if n not in names:
                raise InvalidArgument(f"unknown output name; the model's outputs are {names}", tensor=str(n),
                                      status=_ONNXIFI_UNIDENTIFIED_NAME)
        return list(output_names)

    # -- running -----------------------------------------------------------------------------------
    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """Run the model; returns the requested outputs (all when None) in order."""
        names = self._select_outputs(output_names)
        feeds, _, types = self._check_feeds(input_feed)
        with self._running():
            outs = self._engine.run(feeds, types=types)
        self._last_plan = self._engine.last_plan
        return [outs[n] for n in names]

    def _running(self) -> Any:
        """Around a run: a background tuning search pauses until the session is idle again."""
        gate = getattr(self, "_tune_gate", None)
        return gate.running() if gate is not None else contextlib.nullcontext()

    def run_async(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
                  callback: Optional[Callable] = None, user_data: Any = None,
                  run_options: Any = None) -> concurrent.futures.Future:
        """Start a run and return at once. `callback(results, user_data, error_str)` is called when
        it finishes (as in onnxruntime); the returned Future yields the outputs list."""
        names = self._select_outputs(output_names)
        feeds, _, types = self._check_feeds(input_feed)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clglow-run")

        def job() -> list:
            try:
                with self._running():
                    outs = self._engine.run(feeds, types=types)
                result = [outs[n] for n in names]
            except Exception as e:
                if callback is not None:
                    callback(None, user_data, str(e))
                raise
            if callback is not None:
                callback(result, user_data, "")
            return result

        return self._pool.submit(job)

    def enqueue(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any],
                wait_for: Sequence[cl.Event] = ()) -> RunHandle:
        """Queue a run reading `inputs` (numpy arrays or cl.Buffers) and writing into `outputs`
        (preallocated numpy arrays or cl.Buffers); returns at once.

        Nothing runs before the `wait_for` events complete. The returned handle's event completes
        when every output is written; `handle.wait()` raises the run's error, if any.
        """
        host_feeds, device_feeds, types = self._check_feeds(inputs, device_buffers=True)
        out_names = self._select_outputs(list(outputs))
        plan = self._engine.plan(types, host_feeds)
        self._last_plan = plan
        direct = plan.stop is None and not any(isinstance(s, HostStep) for s in plan.steps) \
            and not plan.host_inputs
        queue = self._engine.queue
        if direct:
            for n in out_names:
                self._check_destination(n, outputs[n], plan)
            with self._engine._lock:
                from .runtime.executor import RunRecord, execute

                hold: list = []
                record = RunRecord() if self._engine.profiling else None
                _, pending = execute(plan, self.device, queue, host_feeds, wait_for, record, device_feeds,
                                     dest={n: outputs[n] for n in out_names}, hold=hold)
                marker = cl.enqueue_marker(queue, wait_for=pending or None)
                if record is not None:
                    self._engine.records.append(record)
            queue.flush()
            handle = RunHandle(marker, outputs)
            handle.hold = hold
            handle.kernel_events = record.kernel_events if record is not None else []
            return handle

        user_ev = cl.UserEvent(self.device.context)
        handle = RunHandle(user_ev, outputs)

        def job() -> None:
            try:
                if wait_for:
                    cl.wait_for_events(list(wait_for))
                feeds = {k: v for k, v in host_feeds.items() if v is not None}
                for k, buf in device_feeds.items():
                    dt, shp = types[k]
                    arr = np.empty(shp, dtype=dt)
                    if arr.nbytes:
                        cl.enqueue_copy(queue, arr, buf, is_blocking=True)
                    feeds[k] = arr
                res = self._engine.run(feeds, types=types)
                evs = self._copy_out(res, outputs, out_names, [])
                if evs:
                    cl.wait_for_events(evs)
                user_ev.set_status(cl.command_execution_status.COMPLETE)
            except BaseException as e:  # reported through the handle and the event
                handle.error = e
                user_ev.set_status(-1)

        t = threading.Thread(target=job, name="clglow-enqueue", daemon=True)
        handle._thread = t
        t.start()
        return handle

    def _check_destination(self, name: str, dst: Any, plan: Any) -> None:
        v = plan.graph.values[name]
        shape, dtype = tuple(int(d) for d in v.shape), np.dtype(v.dtype)
        if isinstance(dst, np.ndarray):
            if dst.shape != shape or dst.dtype != dtype or not dst.flags.c_contiguous:
                raise InvalidArgument(f"output array is {dst.shape} {dst.dtype}, the result is {shape} {dtype}",
                                      tensor=name, status=_ONNXIFI_MISMATCHING_SHAPE)
        elif isinstance(dst, cl.Buffer):
            need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if dst.size < need:
                raise InvalidArgument(f"output cl.Buffer has {dst.size} bytes, the result needs {need}",
                                      tensor=name, status=_ONNXIFI_MISMATCHING_SHAPE)
        else:
            raise InvalidArgument("outputs must be numpy arrays or cl.Buffers", tensor=name)

    def _copy_out(self, res: dict, outputs: Mapping[str, Any], names: list, pending: list) -> list:
        queue = self._engine.queue
        evs = list(pending)
        for n in names:
            dst, src = outputs[n], res[n]
            if isinstance(dst, np.ndarray):
                if dst.shape != src.shape or dst.dtype != src.dtype:
                    raise InvalidArgument(f"output buffer has shape {dst.shape} {dst.dtype}, the result is "
                                          f"{src.shape} {src.dtype}", tensor=n, status=_ONNXIFI_MISMATCHING_SHAPE)
                np.copyto(dst, src)
            elif isinstance(dst, cl.Buffer):
                arr = np.ascontiguousarray(src)
                if dst.size < arr.nbytes:
                    raise InvalidArgument(f"output cl.Buffer has {dst.size} bytes, the result needs {arr.nbytes}",
                                          tensor=n, status=_ONNXIFI_MISMATCHING_SHAPE)
                if arr.nbytes:
                    evs.append(cl.enqueue_copy(queue, dst, arr, is_blocking=True))
            else:
                raise InvalidArgument("outputs must be numpy arrays or cl.Buffers", tensor=n)
        return evs

    # -- profiling & lifetime ----------------------------------------------------------------------
    def end_profiling(self) -> str:
        """Write the Chrome trace of the profiled runs; returns its path (onnxruntime-compatible)."""
        from .runtime.profiler import write_chrome_trace

        path = f"{self.options.profile_file_prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        write_chrome_trace(self._engine.records, path)
        self._engine.records.clear()
        return path

    def release(self) -> None:
        """Free device buffers now (also done when the session is garbage collected)."""
        if getattr(self, "_tune_gate", None) is not None:
            self._tune_gate.stop.set()  # the background search ends before its next launch
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if getattr(self, "_engine", None) is not None:
            self._engine.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown: OpenCL may be gone already
            pass

    def __enter__(self) -> "InferenceSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
