"""The contract between lowering and the executor.

A device op is lowered, once per concrete input shape, into a list of `Launch`es:
which `.cl` file and kernel, which `-D` defines (dtype, tile sizes, fused
activation: things that change the code), the global/local sizes, and the
arguments. Shapes and strides are passed as run-time scalar arguments, not as
defines, so one program serves every layer of a network (few builds, fast cold
start).

Arguments are symbolic here; the executor binds them to OpenCL memory:
  Buf(name)            the buffer holding tensor `name` (input, output, weight, activation)
  Scratch(nbytes)      a temporary buffer private to this op's launches (e.g. im2col columns)
  ConstBuf(key, array) a small constant array uploaded once per plan (index tables, packed weights)
  numpy scalars        np.int32 / np.int64 / np.float32 values passed by value
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from ..ir import Graph, Node
from ..config import PlanOptions
from ..runtime import derived_cache
from ..target import Target


@dataclass(frozen=True)
class TensorInfo:
    """A tensor with a concrete shape, as the lowering sees it."""

    name: str
    dtype: np.dtype
    shape: tuple

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Buf:
    """A tensor's device buffer. `unaligned`: the kernel reads it only with scalar loads or
    vector types of 4-byte alignment (`floatN_u`), so any float-aligned address will do; a graph
    input that only such reads consume may be the caller's own array, bound without a copy on a
    device that uses host memory in place (Target.host_memory, see runtime/binding.py)."""

    name: str
    unaligned: bool = False


def unaligned(a: "Arg") -> "Arg":
    """`a` marked as read with unaligned loads (Buf.unaligned); other arguments unchanged."""
    return replace(a, unaligned=True) if isinstance(a, Buf) else a


@dataclass(frozen=True)
class Scratch:
    """Scratch space for one op; `slot` distinguishes several scratch buffers of one op."""

    nbytes: int
    slot: int = 0


@dataclass(frozen=True, eq=False)
class ConstBuf:
    """A constant array uploaded once per plan. `key` deduplicates identical uploads."""

    key: str
    array: np.ndarray


Arg = Union[Buf, Scratch, ConstBuf, np.generic]


@dataclass(frozen=True)
class PaddedLayout:
    """An activation [N, C, H, W] stored as the zero-padded image a stride-1 convolution reads
    in place (the implicit GEMM's phase image, im2col.cl conv_phases): pixel (y, x) of each
    channel at (y + top) * pitch + x + left of a rows x pitch plane, zeros everywhere else, planes
    one after another, then `slack` floats the consumer's last tile may read past the end. Its
    producer writes it directly (a 1x1 conv's GEMM epilogue), its consumer needs no copy."""

    rows: int
    pitch: int
    top: int
    left: int
    slack: int

    @property
    def plane(self) -> int:
        return self.rows * self.pitch

    def nbytes(self, n: int, c: int) -> int:
        return 4 * (n * c * self.plane + self.slack)


@dataclass
class Launch:
    """One kernel enqueue."""

    program: str  # file in kernels_cl/ without the .cl suffix, e.g. "gemm"
    kernel: str  # __kernel function name
    gsize: tuple
    args: list
    lsize: Optional[tuple] = None
    defines: dict = field(default_factory=dict)
    label: str = ""  # node name, for profiles
    # Arguments with which the kernel returns at once (e.g. a GEMM with M = 0): the executor
    # launches it so early, with a dummy buffer for every buffer, to get the driver's code
    # generation for `lsize` done while the model is still loading (see Device.prepare).
    noop_args: Optional[list] = None

    def build_options(self) -> tuple:
        """`-D` options, sorted so equal defines give the same program."""
        opts = []
        for k in sorted(self.defines):
            v = self.defines[k]
            opts.append(f"-D{k}" if v is None or v is True else f"-D{k}={v}")
        return tuple(opts)


# What lowering may know about the device: its target profile (clglow.target). The old name
# stays for callers that build one by hand (tests).
DeviceInfo = Target

# The Target that judges a node where no device is known (ONNXIFI's probe without a device, the
# fusion passes' check of a fused node): core OpenCL only (no fp64).
GENERIC_TARGET = Target()


class LowerCtx:
    """Everything a lowering function needs for one node at one concrete shape."""

    def __init__(self, node: Node, graph: Graph, inputs: Sequence[Optional[TensorInfo]],
                 outputs: Sequence[TensorInfo], device: Target, options: Optional[PlanOptions] = None):
        self.node = node
        self.graph = graph
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.device = device  # the session's Target (clglow.target): what to lower for
        self.options = options if options is not None else PlanOptions.from_env()  # the session's plan switches
        self._scratch_slots = 0
        # output index -> input index whose buffer that output may take over (see may_update)
        self.inplace: dict[int, int] = {}
        # Padded activations (PaddedLayout): what this lowering could read or write directly
        # (offers, made on the first lowering), and what the planner then fixed (layouts).
        self.offer_padded_in: Optional[PaddedLayout] = None  # for input 0
        self.offer_padded_out = False  # output 0, in whatever layout its consumer reads
        self.in_layout: Optional[PaddedLayout] = None
        self.out_layout: Optional[PaddedLayout] = None
        # derived constants already computed while building this plan (key -> array): the
        # executor shares one dict across a plan's nodes, so a weight lowered again (padded
        # pairing, sub-batch pieces) is packed once
        self.derived_memo: Optional[dict] = None

    # -- convenience -------------------------------------------------------------------------
    @property
    def opset(self) -> int:
        return self.graph.opset(self.node.domain)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def const(self, i: int) -> Optional[np.ndarray]:
        """The constant value of input i (an initializer or folded constant), else None."""
        if not self.has_input(i):
            return None
        return self.graph.const(self.node.inputs[i])

    def buf(self, i: int) -> Buf:
        return Buf(self.node.inputs[i])

    def out(self, j: int = 0) -> Buf:
        return Buf(self.node.outputs[j])

    def may_update(self, j: int, i: int) -> None:
        """Say that output j may be written into input i's buffer (onnxruntime's MayInplace):
        every launch reads each element of input i before writing that element of output j, from
        the same work-item, and reads input i nowhere else. The planner takes the offer when
        input i is an activation of the same size that nothing reads afterwards."""
        self.inplace[j] = i

    def scratch(self, nbytes: int) -> Scratch:
        s = Scratch(max(int(nbytes), 4), self._scratch_slots)
        self._scratch_slots += 1
        return s

    def const_buffer(self, array: np.ndarray, key: Optional[str] = None) -> ConstBuf:
        arr = np.ascontiguousarray(array)
        if key is None:
            key = f"{arr.dtype.str}:{arr.shape}:{hash(arr.tobytes())}"
        return ConstBuf(key, arr)

    def derived(self, i: int, tag: str, fn: Callable[[np.ndarray], np.ndarray]) -> ConstBuf:
        """A constant derived from constant input i (e.g. packed weights), computed once per plan."""
        src = self.const(i)
        if src is None:
            raise ValueError(f"input {i} of {self.node.name} is not constant")
        # id(src): a constant folded per input shape keeps its name but not its value
        key = f"{self.node.inputs[i]}@{id(src):x}#{tag}"
        arr = None if self.derived_memo is None else self.derived_memo.get(key)
        if arr is None:
            arr = derived_cache.compute(src, tag, fn)  # from disk when a previous process packed it
            if self.derived_memo is not None:
                self.derived_memo[key] = arr
        return ConstBuf(key, arr)

    def label(self) -> str:
        return self.node.name


# A device op: `supports` judges (op, attributes, dtypes, static shape knowledge) on the
# session's Target (fp64 and other capabilities) without concrete shapes and returns None when a
# kernel covers the node or a reason string when not; `lower` turns the node into launches for
# concrete shapes. `view` ops alias their first input.
SupportsFn = Callable[[Node, Graph, Target], Optional[str]]
LowerFn = Callable[[LowerCtx], list]


@dataclass(frozen=True)
class HalfIO:
    """What a lowering can keep in half storage (passes/precision.py): each float input listed in
    `inputs` is read as float or half, as its TensorInfo dtype says (the kernel picks with a
    define, kernels_cl/storage.h), and each output in `outputs` is written so; `follows`: the
    outputs are stored as that input is (views, which reinterpret its buffer). Unlisted float
    inputs and outputs stay float32; the arithmetic is the lowering's (fp32 unless it says)."""

    inputs: Tuple[int, ...] = (0,)
    outputs: Tuple[int, ...] = (0,)
    follows: Optional[int] = None


@dataclass
class DeviceOp:
    op_type: str
    lower: Optional[LowerFn]
    supports: SupportsFn
    view: bool = False  # output is the input's buffer reinterpreted (Reshape & co.)
    domain: str = ""
    half: Optional[HalfIO] = None  # half storage it can read and write (None: float32 only)


REGISTRY: dict[tuple, DeviceOp] = {}


def _always(node: Node, graph: Graph, target: Target) -> Optional[str]:
    return None


def device_op(*op_types: str, supports: SupportsFn = _always, view: bool = False,
              domain: str = "", half: Optional[HalfIO] = None) -> Callable[[LowerFn], LowerFn]:
    """Register a lowering function for one or more op types.

    Example::

        @device_op("Relu", "Sigmoid", supports=float_only)
        def lower_unary(ctx: LowerCtx) -> list[Launch]: ...
    """

    def deco(fn: LowerFn) -> LowerFn:
        for op in op_types:
            REGISTRY[(domain, op)] = DeviceOp(op, fn, supports, view, domain, half)
        return fn

    return deco


def view_op(*op_types: str, supports: SupportsFn = _always) -> None:
    """Register ops whose output is a reinterpretation of input 0's buffer (no kernel): stored as
    input 0 is, half or float."""
    for op in op_types:
        REGISTRY[("", op)] = DeviceOp(op, None, supports, True, half=HalfIO((0,), (0,), follows=0))


def lookup(node: Node) -> Optional[DeviceOp]:
    return REGISTRY.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))


def has_kernel(domain: str, op_type: str) -> bool:
    """Whether some lowering is registered for the op (it may still decline a node's attributes
    or dtypes): the frontend expands the function bodies of standard ops without one."""
    return (domain if domain != "ai.onnx" else "", op_type) in REGISTRY


# --- helpers shared by lowering modules ---------------------------------------------------------
def i32(x: int) -> np.int32:
    """A kernel's int argument (sizes, strides, offsets in elements): beyond int32 the OpenCL
    kernels cannot index, said plainly instead of numpy's overflow message."""
    v = int(x)
    if not -2 ** 31 <= v < 2 ** 31:
        raise ValueError(f"a size or offset of {v} elements exceeds the int32 indexing of the OpenCL kernels")
    return np.int32(v)


def i64(x: int) -> np.int64:
    return np.int64(int(x))


def f32(x: float) -> np.float32:
    return np.float32(float(x))


def round_up(x: int, m: int) -> int:
    return (int(x) + m - 1) // m * m
