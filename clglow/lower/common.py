"""What every lowering module shares, in one place: work sizes, the dtype check, the int32 size
check, auto_pad resolution, the convolution geometry and the storage-type maps.

Why one module: before it, these lived in lower/elementwise.py and lower/_types.py (and were
written out again in a dozen modules), so most lowering modules imported elementwise and
elementwise imported them back. This module imports nothing from the other lowering modules
but lower/base.py, so every lowering module can import it without a cycle.

- `work_size` / `grid`: global and local sizes. Local sizes are performance choices (no kernel
  depends on them); `grid` fits a kernel's preferred work-group shape to the Target's limits
  (Target.fit_group) and rounds the global size to it.
- `check_dtypes` (and `float32_only`): the one `supports()` dtype check; `floats(target)` /
  `numeric(target)`: the dtypes the Target computes natively (float64 only with cl_khr_fp64).
- `check_int32_sizes`: the kernels index with int32; larger tensors are refused in one place.
- `resolve_pads` / `split_pad`: ONNX auto_pad (SAME_UPPER, SAME_LOWER, VALID, NOTSET).
- `ConvGeometry`: one convolution's shapes (Conv, FusedConv, Winograd), not a positional tuple.
- `STORAGE_CL` / `STORAGE_NP` / `storage_type`: the unsigned type that moves an element's bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..dtypes import cl_type
from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import LowerCtx, round_up

# --- dtypes -------------------------------------------------------------------------------------
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)
BOOL = np.dtype(np.bool_)
SIGNED = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)}
UNSIGNED = {np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)}
INTS = SIGNED | UNSIGNED
INDEX = {np.dtype(np.int32), np.dtype(np.int64)}


def floats(target: Target) -> set:
    """Float dtypes computed natively on `target` (float64 only with cl_khr_fp64)."""
    return {F32, F64} if target.has_fp64 else {F32}


def numeric(target: Target) -> set:
    """Float and integer dtypes computed natively on `target`."""
    return floats(target) | INTS


def dtype_of(graph: Graph, name: str) -> Optional[np.dtype]:
    """The declared dtype of value `name`, None when unknown (or no name)."""
    v = graph.values.get(name) if name else None
    return None if v is None or v.dtype is None else np.dtype(v.dtype)


def shape_of(graph: Graph, name: str) -> Optional[tuple]:
    """The (maybe partly symbolic) shape of a named value, None when unknown or absent."""
    v = graph.values.get(name) if name else None
    return None if v is None else v.shape


def check_dtypes(node: Node, graph: Graph, allowed: set, inputs: Optional[Sequence[int]] = None,
                 outputs: bool = False) -> Optional[str]:
    """supports() helper: the listed inputs (default: all present), and the outputs too when
    `outputs`, have dtypes in `allowed` (unknown dtypes pass: judged again at lowering). None when
    they do, else the reason naming the first tensor that does not."""
    names = [node.input(i) for i in (range(len(node.inputs)) if inputs is None else inputs)]
    if outputs:
        names += [o for o in node.outputs if o]
    for name in names:
        dt = dtype_of(graph, name)
        if name and dt is not None and dt not in allowed:
            return f"tensor {name!r} has dtype {dt.name}, not handled by the OpenCL kernel"
    return None


def plan_constants(node: Node, graph: Graph, positions: Sequence[int]) -> bool:
    """Whether each of the node's inputs at `positions` is absent, a constant, a graph input, or
    a small value computed by other nodes: runtime.engine.SHAPE_INPUTS makes a graph input a
    constant of each plan (its value part of the plan's key), and staging puts a node reading a
    computed one in the next stage, where the value is read back as such a constant
    (shapes.specialize); the node is judged and lowered again with it."""
    from ..shapes import small_parameter  # shapes imports the passes, which import lower

    for i in positions:
        name = node.input(i)
        if name and graph.const(name) is None and name not in graph.inputs and not small_parameter(graph, name):
            return False
    return True


def float32_only(node: Node, graph: Graph) -> Optional[str]:
    """supports() helper: every present input and output is float32."""
    return check_dtypes(node, graph, {F32}, outputs=True)


def acc_type(dt: np.dtype) -> str:
    """Accumulator C type for reductions over `dt`."""
    dt = np.dtype(dt)
    if dt == F64:
        return "double"
    if dt.kind == "f":
        return "float"
    if dt.kind == "u":
        return "ulong"
    return "long"


def type_defines(**types: np.dtype) -> dict:
    """{'T': 'float', ...} plus USE_FP64 when any is double."""
    d = {k: cl_type(v) for k, v in types.items()}
    if any(np.dtype(v) == F64 for v in types.values()):
        d["USE_FP64"] = None
    return d


def norm_axis(axis: int, rank: int) -> int:
    """`axis` in [0, rank) (negative counts from the end); ValueError when out of range."""
    axis = int(axis)
    if axis < -max(rank, 1) or axis >= max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# --- storage types: kernels that move bits (movement.cl, castlut.cl) -------------------------------
STORAGE_CL = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}  # element size -> OpenCL C type
# float types numpy knows through ml_dtypes (kind "V"): kernels move their bits, none computes on them
BIT_TYPES = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"}
STORAGE_NP = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # element size -> numpy type


def storage_type(dtype: np.dtype) -> str:
    """The unsigned OpenCL C type that holds one element of `dtype` bit for bit."""
    return STORAGE_CL[np.dtype(dtype).itemsize]


def fill_bits(value: np.ndarray, dtype: np.dtype) -> np.uint64:
    """The bits of `value` cast to `dtype` (bool as one byte), as movement.cl fill takes them."""
    dt = np.dtype(dtype)
    v = np.asarray(value).astype(dt).reshape(-1)[:1]
    if dt == np.bool_:
        v = v.astype(np.uint8)
    return np.uint64(int(v.view(STORAGE_NP[dt.itemsize])[0]))


# --- sizes ----------------------------------------------------------------------------------------
INT32_MAX = 2 ** 31 - 1  # the kernels index with int32


def check_int32_sizes(ctx: LowerCtx) -> None:
    """Refuse a node with any tensor over INT32_MAX elements: the kernels index with int32."""
    for t in list(ctx.inputs) + list(ctx.outputs):
        if t is not None and t.size > INT32_MAX:
            raise InvalidModel(f"tensor {t.name!r} has {t.size} elements; the OpenCL kernels index with int32 "
                               f"(at most {INT32_MAX})", node=ctx.label())


def work_size(ctx: LowerCtx, n: int, cap: int = 256) -> tuple:
    """(gsize, lsize) for n independent work-items: a fixed work-group of up to `cap` items
    within the device's limit (a driver left to choose may pick 1 for a prime n)."""
    ls = max(1, min(cap, int(ctx.device.max_work_group_size)))
    return (round_up(max(int(n), 1), ls),), (ls,)


def grid(target: Target, extents: Sequence[int], group: Sequence[int]) -> tuple:
    """(gsize, lsize) for a kernel over `extents` work-items per dimension whose items past the
    extents return: `group` is the kernel's preferred work-group shape (measured under the CPU
    family, where a driver runs each group on one thread and pays per group, so a few rows or
    columns per group), fitted to the Target's limits (Target.fit_group); every extent rounded up
    to a whole number of groups."""
    ls = target.fit_group(tuple(int(g) for g in group))
    return tuple(round_up(int(e), g) for e, g in zip(extents, ls)), ls


# --- auto_pad -------------------------------------------------------------------------------------
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def attr_str(v: object, default: str = "") -> str:
    """A string attribute as str (ONNX gives bytes), `default` when absent."""
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def split_pad(total: int, auto_pad: str) -> tuple:
    """(begin, end) of `total` padding along one axis: SAME_UPPER puts the odd one at the end,
    SAME_LOWER at the beginning."""
    total = max(0, int(total))
    begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    return begin, total - begin


def resolve_pads(auto_pad: str, pads: Optional[Sequence[int]], in_sp: Sequence[int], out_sp: Sequence[int],
                 k_sp: Sequence[int], strides: Sequence[int], dil: Sequence[int]) -> tuple:
    """(begin pads, end pads) of a window op (Conv, pooling) after auto_pad, as ONNX defines them:
    SAME_* pads so that the output has `out_sp` (the caller's, e.g. ceil(in / stride)), VALID
    none, NOTSET the `pads` attribute (zeros when absent)."""
    nd = len(k_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        both = [split_pad((out_sp[i] - 1) * strides[i] + (k_sp[i] - 1) * dil[i] + 1 - in_sp[i], auto_pad)
                for i in range(nd)]
        return tuple(b for b, _ in both), tuple(e for _, e in both)
    if auto_pad == "VALID":
        return (0,) * nd, (0,) * nd
    p = [int(v) for v in (pads or [0] * (2 * nd))]
    if len(p) != 2 * nd:
        raise ValueError(f"pads {p} do not match {nd} spatial dims")
    return tuple(p[:nd]), tuple(p[nd:])


# --- convolution geometry -------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvShape:
    """A convolution's shapes and attributes at concrete shapes, any spatial rank, after auto_pad:
    what the 2-D (ConvGeometry) and N-D (conv_nd.NdGeometry) geometries are built from."""

    n_img: int
    cin: int
    cout: int
    groups: int
    in_sp: tuple
    out_sp: tuple
    k_sp: tuple
    strides: tuple
    dil: tuple
    begins: tuple
    ends: tuple


def resolve_conv(ctx: LowerCtx, ranks: Sequence[int], what: str) -> ConvShape:
    """The node's ConvShape (X input 0, W input 1, Conv's attributes) for spatial ranks `ranks`;
    InvalidModel naming the node when X, W, the attributes and the output shape disagree (`what`
    says which ranks the caller's path takes)."""
    xs, ws = tuple(ctx.inputs[0].shape), tuple(ctx.inputs[1].shape)
    label = ctx.label()
    nd = len(xs) - 2
    if nd not in tuple(ranks) or len(ws) != len(xs):
        raise InvalidModel(f"Conv of X {xs} with W {ws}: {what}", node=label)
    n_img, cin = xs[:2]
    cout, cin_g = ws[:2]
    k_sp = tuple(ctx.attr("kernel_shape", None) or ws[2:])
    if k_sp != tuple(ws[2:]):
        raise InvalidModel(f"kernel_shape {list(k_sp)} differs from W's shape {ws}", node=label)
    g = int(ctx.attr("group", 1))
    if g < 1 or cin != cin_g * g or cout % g != 0:
        raise InvalidModel(f"group={g} does not fit X {xs} and W {ws}", node=label)
    strides = tuple(ctx.attr("strides", None) or (1,) * nd)
    dil = tuple(ctx.attr("dilations", None) or (1,) * nd)
    if len(strides) != nd or len(dil) != nd or min(strides) < 1 or min(dil) < 1:
        raise InvalidModel(f"bad strides {strides} / dilations {dil}", node=label)
    in_sp = tuple(xs[2:])
    ap = attr_str(ctx.attr("auto_pad"), "NOTSET")
    same = tuple(-(-in_sp[i] // strides[i]) for i in range(nd))  # SAME_*: ceil(in / stride)
    try:
        begins, ends = resolve_pads(ap, ctx.attr("pads", None), in_sp, same, k_sp, strides, dil)
    except ValueError as e:
        raise InvalidModel(f"Conv {e}", node=label) from None
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        o_sp = same
    else:
        spans = [in_sp[i] + begins[i] + ends[i] - ((k_sp[i] - 1) * dil[i] + 1) for i in range(nd)]
        o_sp = tuple(s // strides[i] + 1 if s >= 0 else 0 for i, s in enumerate(spans))
    out_shape = tuple(ctx.outputs[0].shape)
    if out_shape != (n_img, cout) + o_sp:
        raise InvalidModel(f"Conv output shape {out_shape} differs from the computed {(n_img, cout) + o_sp}",
                           node=label)
    return ConvShape(n_img, cin, cout, g, in_sp, o_sp, k_sp, strides, dil, tuple(begins), tuple(ends))


@dataclass(frozen=True)
class ConvGeometry:
    """One 2-D convolution's shapes (a 1-D conv has h = kh = 1): input h x w, output oh x ow,
    kernel kh x kw, strides, begin pads, dilations; `n_img` images of `cin` channels into
    `cout`, in `groups` groups. The GEMM paths see M = cout / groups rows, K = cin / groups *
    kh * kw, N = oh * ow columns per image and group."""

    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    dh: int = 1
    dw: int = 1
    n_img: int = 1
    cin: int = 1
    cout: int = 1
    groups: int = 1

    @property
    def cin_g(self) -> int:
        """Input channels per group."""
        return self.cin // self.groups

    @property
    def m(self) -> int:
        """Output channels per group (the GEMM's M)."""
        return self.cout // self.groups

    @property
    def kk(self) -> int:
        """The GEMM's K: input channels per group times taps."""
        return self.cin_g * self.kh * self.kw

    @property
    def npix(self) -> int:
        """Output pixels per image (the GEMM's N)."""
        return self.oh * self.ow

    @property
    def hw(self) -> int:
        """Input pixels per channel."""
        return self.h * self.w

    @property
    def pointwise(self) -> bool:
        """A 1x1 stride-1 conv without padding: the GEMM's B is X itself."""
        return (self.kh == self.kw == 1 and self.sh == self.sw == 1 and self.ph == self.pw == 0
                and (self.oh, self.ow) == (self.h, self.w))

    @property
    def depthwise(self) -> bool:
        """One input channel per group, several groups (dwconv.cl)."""
        return self.cin_g == 1 and self.groups > 1


@dataclass(frozen=True)
class Epilogue:
    """What a conv's GEMM (or Winograd output transform) applies to each result: bias (input 2),
    residual (input 3, FusedConv) and an activation with its alpha/beta (gemm_kernel.act_params)."""

    act: str = ""
    alpha: float = 0.0
    beta: float = 0.0
    has_bias: bool = False
    has_res: bool = False


__all__ = ["F32", "F64", "F16", "BOOL", "SIGNED", "UNSIGNED", "INTS", "INDEX", "floats", "numeric", "dtype_of",
           "check_dtypes", "float32_only", "acc_type", "type_defines", "norm_axis", "BIT_TYPES", "STORAGE_CL", "STORAGE_NP",
           "storage_type", "fill_bits", "INT32_MAX", "check_int32_sizes", "work_size", "grid", "AUTO_PADS",
           "attr_str", "split_pad", "resolve_pads", "ConvGeometry", "Epilogue"]
