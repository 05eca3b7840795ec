"""Lowering of Attention (opset 23+) to OpenCL (see lower/base.py for the contract).

3-D inputs (batch, seq, heads * head_size) and 4-D inputs (batch, heads, seq, head_size) are
read through strides, so no transposes are materialised. past_key/past_value are concatenated
with K/V into present_key/present_value (or scratch) by strided copies; then one work-item per
(batch, q head, query) computes scores, masks (attn_mask bool/float, shorter than the kv length
pads with -inf; is_causal offset by the past length or nonpad_kv_seqlen; sliding windows),
softcap, softmax with fully-masked rows zeroed, and P @ V. Grouped-query heads share K/V.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidModel
from ..ir import Graph, Node
from ..target import Target
from .base import HalfIO, Launch, LowerCtx, device_op, i32, unaligned
from .common import BOOL, check_dtypes, check_int32_sizes, dtype_of, floats, grid, type_defines, work_size
from .gpu_attention import BlockShape, block_applicable, lower_block
from .half import has_half, lower_as_float
from .index_space import contiguous_strides
from .movement import copy_launches


def _supports(node: Node, graph: Graph, target: Target) -> Optional[str]:
    """Float tensors the device computes, or float16 ones (run on float32 copies: lower/half.py)."""
    fl = floats(target) | {np.dtype(np.float16)}
    r = check_dtypes(node, graph, fl, inputs=[0, 1, 2, 4, 5])
    if r:
        return r
    if node.input(3):
        dt = dtype_of(graph, node.input(3))
        if dt is not None and dt != BOOL and dt not in fl:
            return f"attn_mask of dtype {dt.name}"
    if node.input(6):
        r = check_dtypes(node, graph, {np.dtype(np.int64)}, inputs=[6])
        if r:
            return r
    return None


def _out(ctx: LowerCtx, j: int) -> bool:
    return j < len(ctx.node.outputs) and bool(ctx.node.outputs[j])


@device_op("Attention", supports=_supports)
def lower_attention(ctx: LowerCtx) -> list:
    """A float16 model's Attention on float32 copies of its half tensors (attention.cl computes
    in the storage type; pocl and other devices without cl_khr_fp16 have no half arithmetic)."""
    if has_half(ctx):
        return lower_as_float(ctx, _lower_attention)
    return _lower_attention(ctx)


def _lower_attention(ctx: LowerCtx) -> list:
    Q, K, V = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    for t in list(ctx.inputs) + list(ctx.outputs):
        check_int32_sizes(ctx)
    dt = np.dtype(Q.dtype)
    isz = dt.itemsize
    B = int(Q.shape[0])
    if len(Q.shape) == 3:
        QH, KVH = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
        SQ, SNEW = int(Q.shape[1]), int(K.shape[1])
        HD, HDK, HDV = int(Q.shape[2]) // QH, int(K.shape[2]) // KVH, int(V.shape[2]) // KVH

        def st3(t, hd):  # (b, h, s) strides of a (B, S, H*hd) tensor
            return [int(t.shape[1]) * int(t.shape[2]), hd, int(t.shape[2])]

        qst, kst, vst = st3(Q, HD), st3(K, HDK), st3(V, HDV)
        yst = [SQ * QH * HDV, HDV, QH * HDV]
    else:
        QH, KVH = int(Q.shape[1]), int(K.shape[1])
        SQ, SNEW = int(Q.shape[2]), int(K.shape[2])
        HD, HDK, HDV = int(Q.shape[3]), int(K.shape[3]), int(V.shape[3])
        qst, kst, vst = (contiguous_strides(t.shape)[:3] for t in (Q, K, V))
        yst = contiguous_strides((B, QH, SQ, HDV))[:3]
    if HD != HDK or QH % KVH:
        raise ValueError(f"{ctx.node.name}: Q/K head sizes {HD}/{HDK} or heads {QH}/{KVH} do not match")
    past = ctx.has_input(4) and ctx.inputs[4].size > 0
    PAST = int(ctx.inputs[4].shape[2]) if ctx.has_input(4) else 0
    SKV = PAST + SNEW
    launches: list = []
    kbuf, vbuf = ctx.buf(1), ctx.buf(2)
    if ctx.has_input(4) or _out(ctx, 1) or _out(ctx, 2):
        for src_i, out_j, hd, sst in ((1, 1, HD, kst), (2, 2, HDV, vst)):
            dst = ctx.out(out_j) if _out(ctx, out_j) else ctx.scratch(B * KVH * SKV * hd * isz)
            pst = contiguous_strides((B, KVH, SKV, hd))
            if past:
                launches += copy_launches(ctx, ctx.buf(src_i + 3), dst, dt, (B, KVH, PAST, hd),
                                          contiguous_strides((B, KVH, PAST, hd)), pst)
            launches += copy_launches(ctx, ctx.buf(src_i), dst, dt, (B, KVH, SNEW, hd), sst + [1], pst, 0,
                                      PAST * hd)
            if src_i == 1:
                kbuf, kst = dst, pst[:3]
            else:
                vbuf, vst = dst, pst[:3]
    rows = B * QH * SQ
    if rows == 0:
        return launches
    defines = type_defines(T=dt)
    args = [ctx.buf(0), kbuf, vbuf]
    mst, mlen = [0, 0, 0, 0], SKV
    if ctx.has_input(3):
        m = ctx.inputs[3]
        defines["MASK_BOOL" if np.dtype(m.dtype) == BOOL else "MASK_FLOAT"] = None
        shape = (1,) * (4 - len(m.shape)) + tuple(int(d) for d in m.shape)
        cst = contiguous_strides(shape)
        mst = [0 if shape[a] == 1 else cst[a] for a in range(4)]
        mlen = shape[3]
        if shape[3] == 1:
            mst[3], mlen = 0, SKV
        args.append(ctx.buf(3))
    if ctx.has_input(6):
        defines["HAS_NONPAD"] = None
        args.append(ctx.buf(6))
    if int(ctx.attr("is_causal", 0)):
        defines["CAUSAL"] = None
    args += [ctx.out(0), ctx.scratch(rows * SKV * isz)]
    if _out(ctx, 3):
        defines["QK_OUT"] = None
        defines["QK_MODE"] = int(ctx.attr("qk_matmul_output_mode", 0))
        args.append(ctx.out(3))
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(HD) if scale is None else float(scale)
    sc = dt.type(np.sqrt(scale))
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    dims = [B, QH, KVH, SQ, SKV, HD, HDV, PAST, mlen, int(ctx.attr("left_window_size", -1)),
            int(ctx.attr("right_window_size", -1))]
    st = qst + kst + vst + yst + mst
    g, l = work_size(ctx, rows, cap=64)
    args += [ctx.const_buffer(np.array(dims, np.int32)), ctx.const_buffer(np.array(st, np.int32)), sc,
             dt.type(softcap), i32(rows)]
    launches.append(Launch("attention", "attention", g, args, l, defines, ctx.label()))
    return launches


# --- RotaryEmbedding -----------------------------------------------------------------------------
def _supports_rotary(node: Node, graph: Graph, target: Target) -> Optional[str]:
    r = check_dtypes(node, graph, floats(target), inputs=[0, 1, 2])
    if r:
        return r
    return check_dtypes(node, graph, {np.dtype(np.int64)}, inputs=[3])


@device_op("RotaryEmbedding", supports=_supports_rotary)
def lower_rotary(ctx: LowerCtx) -> list:
    x, out = ctx.inputs[0], ctx.outputs[0]
    if out.size == 0:
        return []
    check_int32_sizes(ctx)
    if len(x.shape) == 4:
        B, H, S, HD = (int(d) for d in x.shape)
        st = [H * S * HD, HD, S * HD]
    else:
        B, S = int(x.shape[0]), int(x.shape[1])
        H = int(ctx.attr("num_heads", 0))
        HD = int(x.shape[2]) // H
        st = [S * H * HD, H * HD, HD]
    rot = int(ctx.attr("rotary_embedding_dim", 0) or 0) or HD
    defines = type_defines(T=x.dtype)
    args = [ctx.buf(0), ctx.buf(1), ctx.buf(2)]
    if ctx.has_input(3):
        defines["HAS_POS"] = None
        args.append(ctx.buf(3))
    g, l = work_size(ctx, out.size)
    dims = [B, S, H, HD, rot] + st
    return [Launch("attention", "rotary", g, args + [ctx.out(0), i32(out.size),
                                                     ctx.const_buffer(np.array(dims, np.int32)),
                                                     i32(int(ctx.attr("interleaved", 0)))], l, defines,
                   ctx.label())]


# --- clglow.FusedAttention (passes/fuse_attention.py) -------------------------------------------------
def _supports_fused_attention(node: Node, graph: Graph, target: Target) -> Optional[str]:
    r = (check_dtypes(node, graph, {np.dtype(np.float32), np.dtype(np.float16)}, inputs=[0, 1, 2])
         or check_dtypes(node, graph, {np.dtype(np.float32)}, inputs=[3, 4, 5]))  # Q, K, V: float32 or half storage
    if r:
        return r
    if bool(node.input(4)) != bool(node.input(5)):
        return "FusedAttention takes both past tensors or neither"
    if float(node.attrs.get("scale", 1.0)) <= 0:
        return "FusedAttention takes a positive scale"
    return None


def _view_strides(shape: tuple, perm: list) -> tuple:
    """(logical shape, element strides) of transpose(X, perm) for a contiguous X."""
    st = contiguous_strides(shape)
    if not perm:
        return tuple(shape), list(st)
    return tuple(shape[p] for p in perm), [st[p] for p in perm]


def _past_length(ctx: LowerCtx, K: tuple, V: tuple) -> int:
    """Rows of the past tensors (inputs 4, 5: [B, H, PAST, D], before K's and V's rows, written
    with them into outputs 1, 2); 0 without them. InvalidModel when they do not fit K and V."""
    if not (ctx.has_input(4) and ctx.node.input(4)):
        return 0
    pk, pv = (tuple(int(d) for d in ctx.inputs[i].shape) for i in (4, 5))
    if (len(pk) != 4 or pk[:2] != K[:2] or pk[3] != K[3] or pv != pk[:3] + (V[3],) or len(ctx.outputs) < 3
            or np.dtype(ctx.inputs[1].dtype) != np.float32 or np.dtype(ctx.inputs[2].dtype) != np.float32):
        raise InvalidModel(f"FusedAttention past K {pk} / V {pv} do not fit K {K}, V {V}", node=ctx.label())
    return pk[2]


def _append_copies(ctx: LowerCtx, past: int, K: tuple, V: tuple) -> list:
    """The present tensors (outputs 1, 2) as copies, the past rows then the new ones: for the
    kernels that do not read the past tensors themselves (they then read K and V there)."""
    launches: list = []
    f32 = np.dtype(np.float32)
    for new_i, past_i, out_j, (b, h, t, d) in ((1, 4, 1, K), (2, 5, 2, V)):
        dst = contiguous_strides((b, h, past + t, d))
        launches += copy_launches(ctx, ctx.buf(past_i), ctx.out(out_j), f32, (b, h, past, d),
                                  contiguous_strides((b, h, past, d)), dst)
        launches += copy_launches(ctx, ctx.buf(new_i), ctx.out(out_j), f32, (b, h, t, d),
                                  contiguous_strides((b, h, t, d)), dst, 0, past * d)
    return launches


def _mask(ctx: LowerCtx, full: tuple) -> Optional[list]:
    """The mask's four element strides, broadcast to `full` [B, H, SQ, SKV]; None without one."""
    if not (ctx.has_input(3) and ctx.node.input(3)):
        return None
    label = ctx.label()
    m = tuple(int(d) for d in ctx.inputs[3].shape)
    if len(m) > 4:
        raise InvalidModel(f"FusedAttention mask of rank {len(m)}", node=label, tensor=ctx.node.input(3))
    shape = (1,) * (4 - len(m)) + m
    if any(d not in (1, f) for d, f in zip(shape, full)):
        raise InvalidModel(f"FusedAttention mask {m} does not broadcast to {full}", node=label)
    cst = contiguous_strides(shape)
    return [0 if shape[a] == 1 else cst[a] for a in range(4)]


@device_op("FusedAttention", domain="clglow", supports=_supports_fused_attention, half=HalfIO((0, 1, 2), (0,)))
def lower_fused_attention(ctx: LowerCtx) -> list:
    """softmax(scale * Q K^T + mask) V with Q (through perm_q) [B, H, S, D], K [B, H, T, D] and V
    [B, H, T, Dv] contiguous, Y stored through perm_y: attention.cl's kernel, ONNX Softmax.
    With past tensors (inputs 4, 5: passes/fuse_attention.py's KV append) K and V are past + new
    along T, also written to outputs 1 and 2 (the present tensors): by the row kernel as it reads
    them (no launch of their own), else by copies before the attention."""
    check_int32_sizes(ctx)
    label = ctx.label()
    pq, py = [int(p) for p in ctx.attr("perm_q") or []], [int(p) for p in ctx.attr("perm_y") or []]
    (B, H, SQ, HD), qst = _view_strides(tuple(int(d) for d in ctx.inputs[0].shape), pq)
    K, V = (tuple(int(d) for d in ctx.inputs[i].shape) for i in (1, 2))
    if len(K) != 4 or len(V) != 4 or K[:2] != (B, H) or K[3] != HD or V[:3] != K[:3] or qst[3] != 1:
        raise InvalidModel(f"FusedAttention Q {(B, H, SQ, HD)}, K {K}, V {V} do not match", node=label)
    past = _past_length(ctx, K, V)
    SKV, HDV = past + K[2], V[3]
    y_shape = tuple(int(d) for d in ctx.outputs[0].shape)
    y_st = contiguous_strides(y_shape)
    yst = [0] * 4
    for j, p in enumerate(py or range(4)):
        yst[p] = y_st[j]
    rows = B * H * SQ
    mst = _mask(ctx, (B, H, SQ, SKV))
    blk = BlockShape(B, H, SQ, SKV, HD, HDV, mask=mst is not None)
    block = block_applicable(ctx.device, blk) is None  # GPU family, dedicated local memory (lower/gpu_attention.py)
    if not block and has_half(ctx):  # attention.cl reads float32: copies (lower/half.py)
        return lower_as_float(ctx, lower_fused_attention)
    vw = _row_width(ctx.device, HD, HDV)
    appends = bool(ctx.has_input(4) and ctx.node.input(4))  # the present tensors are written, even of an empty past
    in_kernel = appends and bool(vw) and not block
    if rows == 0 or HDV == 0:  # no attention row to run: the present tensors alone
        return _append_copies(ctx, past, K, V) if appends else []
    copies = _append_copies(ctx, past, K, V) if appends and not in_kernel else []
    k_arg, v_arg = (ctx.out(1), ctx.out(2)) if appends and not in_kernel else (ctx.buf(1), ctx.buf(2))
    kst = contiguous_strides((B, H, SKV, HD) if appends and not in_kernel else K)[:3]
    vst = contiguous_strides((B, H, SKV, HDV) if appends and not in_kernel else V)[:3]
    args = [ctx.buf(0), k_arg, v_arg] + ([ctx.buf(3)] if mst is not None else [])
    mst = mst if mst is not None else [0, 0, 0, 0]
    if block:
        return copies + lower_block(ctx, blk, args, qst, yst, mst, float(ctx.attr("scale", 1.0)))
    defines = type_defines(T=np.dtype(np.float32))
    if len(args) > 3:
        defines["MASK_FLOAT"] = None
    if in_kernel:  # the row kernel reads the past tensors and writes the present ones
        defines["KV_APPEND"] = None
        args += [unaligned(ctx.buf(4)), unaligned(ctx.buf(5))]  # read as rowv_u: a caller's arrays in place
    args += [ctx.out(0), ctx.scratch(rows * SKV * 4)] + ([ctx.out(1), ctx.out(2)] if in_kernel else [])
    dims = [B, H, H, SQ, SKV, HD, HDV, past if in_kernel else 0, SKV, -1, -1]
    st = qst[:3] + list(kst) + list(vst) + yst[:3] + mst
    meta = [ctx.const_buffer(np.array(dims, np.int32)), ctx.const_buffer(np.array(st, np.int32))]
    if vw:  # head sizes in whole vectors: the row kernel (vector dot products, V walked by rows)
        defines.update({"ROW_VW": vw, "NV_MAX": max(HD, HDV) // vw})
        gsize, ls = grid(ctx.device, (rows,), (1,))
        return copies + [Launch("attention", "attention_rows", gsize,
                                args + meta + [np.float32(ctx.attr("scale", 1.0)), i32(rows)], ls, defines, label)]
    defines["SOFTMAX_PLAIN"] = None
    g, l = work_size(ctx, rows, cap=64)
    sc = np.float32(np.sqrt(float(ctx.attr("scale", 1.0))))
    return copies + [Launch("attention", "attention", g, args + meta + [sc, np.float32(0.0), i32(rows)], l,
                            defines, label)]


def _row_width(target: Target, hd: int, hdv: int) -> int:
    """The row kernel's vector width (the device's preferred float width, 4 to 16) when both head
    sizes are whole vectors of it and the accumulators stay few (16 vectors), else 0."""
    w = int(target.preferred_vector_width_float or 4)
    for vw in (16, 8, 4):
        if vw <= max(w, 4) and hd % vw == 0 and hdv % vw == 0 and max(hd, hdv) // vw <= 16:
            return vw
    return 0
