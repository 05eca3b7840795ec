"""RNN, GRU and LSTM on OpenCL: one GEMM for the input projections of every time step, then one
launch of kernels_cl/recurrent.cl for the recurrence of the whole sequence.

Why this split: X_t @ W^T does not depend on the state, so all steps' projections are one
[steps * batch, input] x [input, directions * gates * hidden] GEMM (gemm.cl, W^T packed once per
plan through ctx.derived when W is a weight); what is left per step is a GEMV with R plus the
gates, small enough that a launch per step would cost more than the step. recurrent.cl runs a
work-group per (a few batch rows, direction) that loops over the steps with its state in local
memory: the launches stay at two (three when a live X is packed first) however long the sequence.

The recurrence has a ranked table of implementations (RECURRENT_PATHS, the first applicable row
lowers the node; a new device family is a new row):
  vectors   a work-item takes the Target's float vector width of consecutive units (gates and
            activations in vector math, R^T rows read as whole vectors). CPU family: its driver
            runs a group's work-items one after another on one thread. Measured on pocl (2-layer
            LSTM LM, hidden 128, seq 20, batch 1): 0.49 ms against 1.37 ms for a unit per
            work-item with the k loop in vectors. A constant R is packed so that each
            work-item's units are one contiguous run (R_T 2: one stream per work-item, where
            [hidden][gates][units] strode by a row per k), the k loop in KS chains of
            multiply-adds. With the accumulators in registers (recurrent.cl: every small loop
            unrolls, no mad/vloadN calls, which pocl 3.0 did not inline) the zoo's 2-layer LSTM
            (hidden 256, 64 steps) takes 0.68 ms of recurrent kernel time per layer on both pocl
            devices (1.06 / 2.84 ms before on 0:0 / 1:0): ~100 GB/s of R from the cache, about
            one core's bandwidth. (VU, KS, BB) per shape is the tunable family "recurrent"
            (searched by `clglow tune MODEL` and the background search; the default: the widest
            vector, BB from batch_rows, the most chains within ACC_VECTORS accumulators).
            Not taken: a step split over work-groups (a launch per step, or groups synchronised
            through global memory): a 1 MB GEMV as 2 groups was no faster than as 1 on this
            2-core shared machine (10.0-10.8 us either way, pocl 0:0), and a spin barrier
            between groups has no forward-progress guarantee in OpenCL.
  units     a unit per work-item, consecutive work-items on consecutive units of R^T (coalesced
            loads). Any family (the GPU family's).
A constant R is packed once per plan as R^T [direction][hidden][gates][hidden rounded up to the
vector] (the units path), or [direction][unit blocks][hidden][gates][vector] (the vectors path)
(ctx.derived); a live R (the ONNX node suite feeds weights as inputs) is read as it lies.

Covered: direction forward / reverse / bidirectional; every ONNX activation with its alpha/beta
(consumed in the order of the activations, onnxruntime's reading); clip; LSTM input_forget and
peepholes; GRU linear_before_reset; layout 0 / 1; sequence_lens (steps past a row's length
write zeros, Y_h / Y_c are its last valid step, zeros for a length of 0, as onnxruntime);
initial_h / initial_c; any subset of the outputs. supports() names what is not (float32 only,
int32 sequence_lens, an activation without a defined alpha, a state too large for local memory).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import Buf, Launch, LowerCtx, device_op, f32, i32, round_up
from .common import F32, attr_str, check_dtypes, shape_of
from .gemm import a_path, pack_live_a
from .gemm_kernel import (GemmConfig, Operand, fit_rows, gemm_config, gemm_key, gemm_launch, pack_a, pack_b,
                          pack_b_launch, packed_b_bytes, tuned_tiles)
from .tunable import Family, Params, ShapeKey, choose, product, register

log = logging.getLogger(__name__)

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# The activations of one direction, and their defaults (ONNX)
DEFAULT_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# name (lower case) -> (recurrent.cl code, takes alpha, takes beta, default alpha, default beta);
# a None default: no value ONNX and onnxruntime agree on, so one must be given
ACTIVATIONS = {
    "relu": (0, False, False, 0.0, 0.0), "tanh": (1, False, False, 0.0, 0.0),
    "sigmoid": (2, False, False, 0.0, 0.0), "affine": (3, True, True, None, None),
    "leakyrelu": (4, True, False, 0.01, 0.0), "thresholdedrelu": (5, True, False, None, 0.0),
    "scaledtanh": (6, True, True, None, None), "hardsigmoid": (7, True, True, 0.2, 0.5),
    "elu": (8, True, False, 1.0, 0.0), "softsign": (9, False, False, 0.0, 0.0),
    "softplus": (10, False, False, 0.0, 0.0),
}
KNOWN_ATTRS = {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
               "input_forget", "layout", "linear_before_reset"}
DIRECTIONS = ("forward", "reverse", "bidirectional")
LOCAL_ROWS = {"RNN": 2, "GRU": 4, "LSTM": 3}  # local state rows of HP floats per batch row (recurrent.cl)
MAX_BATCH_ROWS = 8
# Multiply-add chains per gate in the streamed k loop (recurrent.cl KS, searched: the tunable family
# below): the default takes the most chains (4, 2 or 1) whose accumulators, G * BB * KS vectors,
# stay within ACC_VECTORS, so that they are registers. Measured on pocl 0:0 (recurrent kernel per
# layer, after the loops unrolled into registers): the builtin 2-layer LSTM at batch 8 (BB 4, 16
# accumulators at KS 1) KS 4 / 2 / 1 390 / 280 / 210 us; at batch 1 (4 accumulators per chain) KS
# 4 / 2 / 1 within 10% of each other (R's stream from the cache bounds the step there).
KS_SPACE = (4, 2, 1)
ACC_VECTORS = 16


def parse_activations(node: Node, ndir: int) -> list:
    """[(code, alpha, beta)] per activation slot, direction 0's then direction 1's. Alphas and
    betas are consumed in the order of the activations that take them (the ONNX text; what
    onnxruntime does), the operator's default where the list runs out. ValueError: why not."""
    names = node.attrs.get("activations")
    per_dir = len(DEFAULT_ACTS[node.op_type])
    if names is None:
        names = list(DEFAULT_ACTS[node.op_type]) * ndir
    names = [attr_str(n) for n in names]
    if len(names) != per_dir * ndir:
        raise ValueError(f"{len(names)} activations given, {node.op_type} with {ndir} direction(s) takes "
                         f"{per_dir * ndir}")
    alphas = [float(a) for a in node.attrs.get("activation_alpha", None) or []]
    betas = [float(b) for b in node.attrs.get("activation_beta", None) or []]
    out = []
    for name in names:
        spec = ACTIVATIONS.get(name.lower())
        if spec is None:
            raise ValueError(f"activation {name!r} is not one of the ONNX recurrent activations")
        code, takes_a, takes_b, da, db = spec
        a = alphas.pop(0) if takes_a and alphas else da
        b = betas.pop(0) if takes_b and betas else db
        if a is None or b is None:
            raise ValueError(f"activation {name!r} needs activation_alpha/activation_beta values")
        out.append((code, a, b))
    return out


def _hidden(node: Node, graph: Graph) -> Optional[int]:
    h = node.attrs.get("hidden_size")
    if h is not None:
        return int(h)
    s = shape_of(graph, node.input(2))
    return s[-1] if s is not None and isinstance(s[-1], int) else None


def supports_recurrent(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float32 RNN/GRU/LSTM with int32 sequence_lens, the attributes the module docstring lists,
    and a state that fits the Target's local memory."""
    why = check_dtypes(node, graph, {F32}, inputs=[i for i in range(len(node.inputs)) if i != 4], outputs=True)
    if why:
        return why
    why = check_dtypes(node, graph, {np.dtype(np.int32)}, inputs=[4] if len(node.inputs) > 4 else [])
    if why:
        return why
    extra = sorted(set(node.attrs) - KNOWN_ATTRS)
    if extra:
        return f"{node.op_type} attribute(s) {', '.join(extra)} not handled by the OpenCL kernel"
    direction = attr_str(node.attrs.get("direction"), "forward")
    if direction not in DIRECTIONS:
        return f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}"
    try:
        parse_activations(node, 2 if direction == "bidirectional" else 1)
    except ValueError as e:
        return str(e)
    hidden = _hidden(node, graph)
    if hidden is None:
        return "hidden size unknown (no hidden_size attribute and R's shape unknown)"
    need = 4 * LOCAL_ROWS[node.op_type] * state_capacity(hidden)
    if need > target.local_mem_size:
        return f"hidden size {hidden} needs {need} bytes of local memory, the device has {target.local_mem_size}"
    return None


def state_capacity(hidden: int) -> int:
    """HP: floats per local state row (recurrent.cl), hidden rounded up to 64 (few programs, any
    vector width of k)."""
    return round_up(max(hidden, 1), 64)


# --- the recurrence's implementations ------------------------------------------------------------------
@dataclass(frozen=True)
class RecurrentCase:
    """What the paths choose on: the Target, whether R is a constant, the hidden size."""

    target: Target
    r_const: bool
    hidden: int


@dataclass(frozen=True)
class RecurrentPath:
    """One mapping of recurrent.cl's units onto work-items: `applicable(case)` says whether it
    runs the case, `vu(case)` the units per work-item (the VU define), `group(case, blocks)` the
    work-group size for `blocks` work-items' worth of units."""

    name: str
    applicable: Callable[[RecurrentCase], bool]
    vu: Callable[[RecurrentCase], int]
    group: Callable[[RecurrentCase, int], int]
    stream: bool = False  # a constant R packed per work-item's units (R_T 2), its (VU, KS, BB) tuned


def _vector_units(case: RecurrentCase) -> int:
    """The Target's float vector width (4, 8 or 16; 1 below 4)."""
    pref = max(1, int(case.target.preferred_vector_width_float))
    return next((v for v in (16, 8, 4) if v <= pref), 1)


RECURRENT_PATHS = (
    # CPU family: a driver runs a group's work-items one after another on one thread, so each
    # work-item takes a vector of units (gates and activations in vector math, no horizontal sums)
    RecurrentPath("vectors", lambda c: c.target.is_cpu_family, _vector_units, lambda c, n: min(n, 256), stream=True),
    # any other family: a unit per work-item, consecutive work-items on consecutive units of R^T
    RecurrentPath("units", lambda c: True, lambda c: 1, lambda c, n: min(round_up(n, 32), 256)),
)


def recurrent_path(case: RecurrentCase) -> RecurrentPath:
    """The first applicable row of RECURRENT_PATHS (the last one always is)."""
    return next(p for p in RECURRENT_PATHS if p.applicable(case))


def batch_rows(target: Target, batch: int, op_type: str, hidden: int) -> int:
    """BB, batch rows per work-group: enough to spread the batch over the compute units once
    (the rows of a group share each load of R), a power of two up to 8, within local memory."""
    bb = 1
    while bb < MAX_BATCH_ROWS and bb * max(1, target.compute_units) < batch:
        bb *= 2
    while bb > 1 and 4 * LOCAL_ROWS[op_type] * state_capacity(hidden) * bb > target.local_mem_size:
        bb //= 2
    return bb


# --- lowering --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dims:
    """One node's sizes: steps, batch, input width, hidden, directions, gates, layout."""

    seq: int
    batch: int
    inp: int
    hidden: int
    ndir: int
    gates: int
    layout: int

    @property
    def n(self) -> int:
        """Columns of the input projection: every direction's gates."""
        return self.ndir * self.gates * self.hidden


def _dims(ctx: LowerCtx) -> Dims:
    """The node's sizes, checked against W and R."""
    x, w, r = ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.inputs[2].shape
    layout = int(ctx.attr("layout", 0))
    if len(x) != 3 or len(w) != 3 or len(r) != 3 or layout not in (0, 1):
        raise InvalidModel(f"{ctx.node.op_type} takes X, W and R of rank 3 and layout 0 or 1; got X {x}, "
                           f"W {w}, R {r}, layout {layout}", node=ctx.label())
    seq, batch = (x[0], x[1]) if layout == 0 else (x[1], x[0])
    ndir = 2 if attr_str(ctx.attr("direction"), "forward") == "bidirectional" else 1
    gates = GATES[ctx.node.op_type]
    hidden = int(ctx.attr("hidden_size", r[-1]))
    if tuple(w) != (ndir, gates * hidden, x[2]) or tuple(r) != (ndir, gates * hidden, hidden):
        raise InvalidModel(f"{ctx.node.op_type} with hidden_size {hidden} and {ndir} direction(s) takes W "
                           f"{(ndir, gates * hidden, x[2])} and R {(ndir, gates * hidden, hidden)}, got {w} and {r}",
                           node=ctx.label())
    return Dims(seq, batch, x[2], hidden, ndir, gates, layout)


def _projection(ctx: LowerCtx, dm: Dims, launches: list) -> Operand:
    """xw = X @ W^T for every step and direction, one GEMM into scratch [rows, n] (no bias:
    recurrent.cl adds it). W^T packed once per plan when W is constant, at run time otherwise."""
    m, k, n = dm.seq * dm.batch, dm.inp, dm.n
    cfg = _projection_tiles(ctx, m, n, k)
    path = a_path(ctx.device, cfg, const=ctx.const(0) is not None, m=m, k=k, row_pitch=k)
    if path == "constant":
        a = Operand(ctx.derived(0, f"packA{cfg.mr}", lambda x: pack_a(x.reshape(m, k), cfg.mr)), packed=True)
    elif path == "packed":
        a = pack_live_a(ctx, cfg, 0, m, k, False, 1, launches)
    else:
        a = Operand(ctx.buf(0), ld=k, ld2=1)
    if ctx.const(1) is not None:
        b = Operand(ctx.derived(1, f"packWT{cfg.nr}", lambda w: pack_b(w.reshape(n, k).T, cfg.nr)), packed=True)
    else:
        dst = ctx.scratch(packed_b_bytes(cfg.nr, k, n, 1))
        launches.append(pack_b_launch(ctx.device, cfg.nr, src=ctx.buf(1), off=0, s1=0, s2=0, s_k=1, s_n=k,
                                      k=k, n=n, batch=1, d2=1, dst=dst, label=ctx.label()))
        b = Operand(dst, packed=True)
    xw = Operand(ctx.scratch(4 * m * n), ld=n)
    launches.append(gemm_launch(cfg, m=m, n=n, k=k, batch=1, d2=1, a=a, b=b, c=xw, label=ctx.label()))
    return xw


def _projection_tiles(ctx: LowerCtx, m: int, n: int, k: int) -> GemmConfig:
    """gemm.cl's tiles for the projection: the gemm family's per-shape entry (B packed, A read
    strided or packed as the fallback tiles would read it; a stored point that would change A's
    path is not taken), else the Target's tiles fitted to the shape."""
    fallback = fit_rows(ctx.device, gemm_config(ctx.device), m, n)
    const_a = ctx.const(0) is not None
    path = a_path(ctx.device, fallback, const=const_a, m=m, k=k, row_pitch=k)

    def keeps(c: GemmConfig) -> bool:
        return a_path(ctx.device, c, const=const_a, m=m, k=k, row_pitch=k) == path

    key = gemm_key(m, n, k, "packed", "strided" if path == "strided" else "packed")
    cfg, _ = tuned_tiles(ctx.device, key, fallback, ctx.label(), valid=keeps)
    return cfg


def _r_operand(ctx: LowerCtx, hpu: int, dm: Dims, vu: int, stream: bool):
    """R as recurrent.cl reads it: a constant R packed once per plan as R^T [dir][hidden][gates][hpu]
    (zero padded units: whole-vector loads; R_T = 1), or with `stream` as [dir][hpu / vu][hidden]
    [gates][vu] (each work-item's block of units one contiguous run; R_T = 2); a live one as it
    lies (R_T = 0)."""
    if ctx.const(2) is None:
        return ctx.buf(2)

    def pack(r: np.ndarray) -> np.ndarray:
        r4 = np.asarray(r, np.float32).reshape(dm.ndir, dm.gates, dm.hidden, dm.hidden)  # [d, g, j, k]
        rt = np.pad(r4.transpose(0, 3, 1, 2), ((0, 0), (0, 0), (0, 0), (0, hpu - dm.hidden)))  # [d, k, g, j]
        if not stream:
            return rt
        return rt.reshape(dm.ndir, dm.hidden, dm.gates, hpu // vu, vu).transpose(0, 3, 1, 2, 4)  # [d, blk, k, g, v]

    return ctx.derived(2, f"rnnRT{hpu}{'s%d' % vu if stream else ''}", pack)


def _strides(dm: Dims) -> tuple:
    """(xw step, xw batch, state direction, state batch, Y step, Y direction, Y batch) strides."""
    n, h, nd, s, b = dm.n, dm.hidden, dm.ndir, dm.seq, dm.batch
    if dm.layout == 0:  # X [seq, batch, in], Y [seq, dir, batch, h], states [dir, batch, h]
        return b * n, n, b * h, h, nd * b * h, b * h, h
    return n, s * n, h, nd * h, nd * h, h, s * nd * h  # X [batch, seq, in], Y [batch, seq, dir, h]


@dataclass(frozen=True)
class Variant:
    """What changes recurrent.cl's code besides the mapping: the op, its attributes, the
    activation codes per slot, and how R is read (R_T)."""

    op: str
    r_t: int
    lbr: bool = False
    input_forget: bool = False
    clip: bool = False
    act_codes: tuple = ()


def _defines(dm: Dims, v: Variant, vu: int, bb: int, ks: int) -> dict:
    """The -D defines of the node's recurrent.cl program."""
    defines = {"CELL": dm.gates, "HP": state_capacity(dm.hidden), "BB": bb, "VU": vu, "R_T": v.r_t}
    if v.r_t == 2:
        defines["KS"] = ks
    if v.lbr:
        defines["LBR"] = 1
    if v.input_forget:
        defines["INPUT_FORGET"] = 1
    if v.clip:
        defines["CLIP"] = 1
    per_dir = len(DEFAULT_ACTS[v.op])
    for d in range(dm.ndir):
        for slot, letter in zip(range(per_dir), "FGH"):
            defines[f"ACT_{letter}{d}"] = v.act_codes[d * per_dir + slot]
    return defines


def recurrent_launch(target: Target, dm: Dims, v: Variant, p: Params, head: list, tail: list, label: str,
                     group: Callable[[int], int]) -> Launch:
    """The recurrent.cl launch of point p (vu, ks, bb) with its arguments (head: up to seq; tail:
    after batch); `group(blocks)` the path's work-group size for that many work-items' units."""
    vu, bb, ks = int(p["vu"]), int(p["bb"]), int(p["ks"])
    ls = target.fit_group((group(-(-dm.hidden // vu)), 1, 1))
    gsize = (ls[0], -(-dm.batch // bb), dm.ndir)
    return Launch("recurrent", "recurrent", gsize, head + [i32(dm.batch)] + tail, ls, _defines(dm, v, vu, bb, ks),
                  label, noop_args=head + [i32(0)] + tail)


# --- the tunable family: the streamed path's (VU, KS, BB) per shape -------------------------------------
# Shape key: (op, hidden, batch, directions, steps, linear_before_reset). Parameters: vu (units per
# work-item, a float vector), ks (k chains), bb (batch rows per work-group: they share each R load;
# fewer rows per group, more groups over the compute units).
def _key_dims(key: ShapeKey) -> Tuple[Dims, Variant]:
    op, hidden, batch, ndir, seq, lbr = key
    dm = Dims(int(seq), int(batch), 1, int(hidden), int(ndir), GATES[str(op)], 0)
    acts = tuple(ACTIVATIONS[a.lower()][0] for a in DEFAULT_ACTS[str(op)]) * int(ndir)
    return dm, Variant(str(op), 2, bool(lbr), act_codes=acts)


def _bb_space(target: Target, op: str, batch: int, hidden: int) -> List[int]:
    """Powers of two up to MAX_BATCH_ROWS, no more than the batch needs, within local memory."""
    out, bb = [], 1
    while bb <= MAX_BATCH_ROWS and (bb == 1 or bb // 2 < batch):
        if bb == 1 or 4 * LOCAL_ROWS[op] * state_capacity(hidden) * bb <= target.local_mem_size:
            out.append(bb)
        bb *= 2
    return out


def _vu_space(target: Target) -> List[int]:
    """The Target's float vector width first, then the narrower ones down to 4."""
    w = _vector_units(RecurrentCase(target, True, 1))
    return [w] + [v for v in (8, 4) if v < w]


def default_ks(gates: int, bb: int) -> int:
    """The most chains whose accumulators (gates * bb * ks vectors) fit ACC_VECTORS."""
    return next((k for k in KS_SPACE if gates * bb * k <= ACC_VECTORS), 1)


def _default(target: Target, key: ShapeKey) -> Params:
    op, hidden, batch = str(key[0]), int(key[1]), int(key[2])
    bb = batch_rows(target, batch, op, hidden)
    return {"vu": _vu_space(target)[0], "ks": default_ks(GATES[op], bb), "bb": bb}


def _space(target: Target, key: ShapeKey) -> List[Params]:
    op, hidden, batch = str(key[0]), int(key[1]), int(key[2])
    d = _default(target, key)
    rest = [p for p in product({"vu": _vu_space(target), "ks": list(KS_SPACE),
                                "bb": _bb_space(target, op, batch, hidden)}) if p != d]
    return [d] + rest


def _valid(target: Target, key: ShapeKey, p: Params) -> bool:
    op, hidden, batch = str(key[0]), int(key[1]), int(key[2])
    return (p.get("vu") in _vu_space(target) and p.get("ks") in KS_SPACE
            and p.get("bb") in _bb_space(target, op, batch, hidden))


def _bench(target: Target, key: ShapeKey, p: Params) -> Tuple[Launch, dict]:
    """The recurrence alone (the projection GEMM is gemm's): biases, Y and Y_h, zero states."""
    if not _valid(target, key, p):
        raise ValueError(f"recurrent does not run {p} for {key}")
    dm, v = _key_dims(key)
    vu, n = int(p["vu"]), dm.n
    hpu = round_up(dm.hidden, vu)
    xs_t, xs_b, s_d, s_b, y_t, y_d, y_b = _strides(dm)
    flags = 1 | 32 | 64
    head = [Buf("XW"), i32(xs_t), i32(xs_b), Buf("R"), Buf("B"), Buf("Y"), Buf("Y"), Buf("Y"), i32(s_d),
            i32(s_b), Buf("Y"), Buf("Y"), i32(y_t), i32(y_d), i32(y_b), Buf("YH"), Buf("YH"), i32(flags), i32(dm.seq)]
    tail = [i32(dm.hidden), i32(hpu), f32(0.0)] + [f32(0.0)] * 12
    launch = recurrent_launch(target, dm, v, p, head, tail, "", lambda blocks: min(blocks, 256))
    sizes = {"XW": 4 * dm.seq * dm.batch * n, "R": 4 * dm.ndir * dm.gates * hpu * dm.hidden,
             "B": 4 * dm.ndir * 2 * dm.gates * dm.hidden, "Y": 4 * dm.seq * dm.ndir * dm.batch * dm.hidden,
             "YH": 4 * dm.ndir * dm.batch * dm.hidden}
    return launch, sizes


def _flops(key: ShapeKey) -> float:
    dm, _ = _key_dims(key)
    return 2.0 * dm.seq * dm.batch * dm.ndir * dm.gates * dm.hidden * dm.hidden


RECURRENT_FAMILY = register(Family("recurrent", "recurrent", _space, _default, _bench, flops=_flops,
                                   applies=lambda target: target.is_cpu_family, priority=4))


@device_op("RNN", "GRU", "LSTM", supports=supports_recurrent)
def lower_recurrent(ctx: LowerCtx) -> list:
    """The projection GEMM and one recurrent.cl launch (see the module docstring)."""
    dm = _dims(ctx)
    outs = [ctx.node.outputs[j] if j < len(ctx.node.outputs) else "" for j in range(3)]
    if not any(outs) or dm.batch == 0:
        return []
    acts = parse_activations(ctx.node, dm.ndir)
    launches: list = []
    if dm.seq > 0:
        xw = _projection(ctx, dm, launches).arg
    else:
        xw = ctx.buf(0)
    case = RecurrentCase(ctx.device, ctx.const(2) is not None, dm.hidden)
    path = recurrent_path(case)
    op = ctx.node.op_type
    lbr = op == "GRU" and bool(int(ctx.attr("linear_before_reset", 0)))
    p = _point(ctx, case, path, dm, lbr)
    vu = int(p["vu"])
    hpu = round_up(dm.hidden, vu)
    stream = path.stream and vu > 1
    xs_t, xs_b, s_d, s_b, y_t, y_d, y_b = _strides(dm)
    present = {i: bool(ctx.node.input(i)) for i in range(8)}
    flags = ((1 if present[3] else 0) | (2 if present[4] else 0) | (4 if present[5] else 0)
             | (8 if present[6] and op == "LSTM" else 0)
             | (16 if present[7] and op == "LSTM" else 0)
             | (32 if outs[0] else 0) | (64 if outs[1] else 0) | (128 if outs[2] and op == "LSTM" else 0)
             | (256 if attr_str(ctx.attr("direction"), "forward") == "reverse" else 0))
    any_out = next(ctx.out(j) for j in range(3) if outs[j])
    dummy = ctx.buf(0)  # absent inputs and outputs: a buffer the flags say is never touched

    def opt(i: int):
        return ctx.buf(i) if present[i] else dummy

    def out(j: int):
        return ctx.out(j) if outs[j] else any_out

    ab = [f32(v) for _, a, b in acts for v in (a, b)]
    per_dir = len(DEFAULT_ACTS[op])
    ab = _pad_slots(ab, per_dir, dm.ndir)
    head = [xw, i32(xs_t), i32(xs_b), _r_operand(ctx, hpu, dm, vu, stream), opt(3), opt(4), opt(5), opt(6), i32(s_d),
            i32(s_b), opt(7), out(0), i32(y_t), i32(y_d), i32(y_b), out(1), out(2), i32(flags), i32(dm.seq)]
    tail = [i32(dm.hidden), i32(hpu), f32(float(ctx.attr("clip", 0.0) or 0.0))] + ab
    r_t = (2 if stream else 1) if ctx.const(2) is not None else 0
    variant = Variant(op, r_t, lbr, op == "LSTM" and bool(int(ctx.attr("input_forget", 0))),
                      ctx.attr("clip") is not None, tuple(code for code, _, _ in acts))
    launches.append(recurrent_launch(ctx.device, dm, variant, p, head, tail, ctx.label(),
                                     lambda blocks: path.group(case, blocks)))
    log.debug("%s: %s path, %s, %d launches", ctx.label(), path.name, p, len(launches))
    return launches


def _point(ctx: LowerCtx, case: RecurrentCase, path: RecurrentPath, dm: Dims, lbr: bool) -> Params:
    """(vu, ks, bb) of this node: the tunable family's (database or default) on the streamed path
    (a constant R on the CPU family), else the path's width, one chain and batch_rows."""
    op = ctx.node.op_type
    if path.stream and case.r_const and path.vu(case) > 1:
        key = (op, dm.hidden, dm.batch, dm.ndir, dm.seq, int(lbr))
        p, _ = choose(ctx.device, "recurrent", key, ctx.label(), valid=lambda q: _valid(ctx.device, key, q))
        return p
    return {"vu": path.vu(case), "ks": 1, "bb": batch_rows(ctx.device, dm.batch, op, dm.hidden)}


def _pad_slots(ab: list, per_dir: int, ndir: int) -> list:
    """The kernel's 12 alpha/beta arguments (F, G, H of direction 0, then of direction 1) from the
    node's per_dir slots per direction."""
    out = []
    for d in range(2):
        for slot in range(3):
            i = (min(d, ndir - 1) * per_dir + slot) * 2
            out += ab[i:i + 2] if slot < per_dir else [f32(0.0), f32(0.0)]
    return out
