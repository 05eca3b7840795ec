/* clglow.FusedAttention as one work-group per block of query rows (the GPU family with dedicated
 * local memory, lower/gpu_attention.py): Y = softmax(scale * Q K^T + mask) V, ONNX Softmax's
 * semantics (a row of -inf scores gives NaN, as Softmax does).
 *
 * The group of WG work-items owns RQ query rows i0 .. i0+RQ-1 of one (batch, head) and keeps
 * in __local memory the block's Q rows (scaled), its RQ x SKV scores and the softmax's partial
 * maxima and sums:
 *   1. Q rows into local memory (zeros past SQ);
 *   2. scores: work-item e takes (row e / SKV, key e % SKV), neighbouring items neighbouring keys,
 *      a dot product of the local Q row with K's key row, plus the mask;
 *   3. softmax: each row gets WG / RP work-items (RP = RQ rounded up to a power of two), which
 *      reduce its maximum, then the sum of exp(s - max) (the exps kept in the scores), in local
 *      memory trees;
 *   4. context: work-item e takes (row e / HDV, column e % HDV), neighbouring items neighbouring
 *      columns of V's rows (coalesced), and stores (P V)[row] / sum through Y's strides.
 * Shapes: H heads, SQ query rows, SKV keys, head sizes HD (Q, K) and HDV (V, Y); strides st0 ..
 * st15 as attention.cl's st (Q, K, V, Y (b, h, s) in elements, the last dimension contiguous, then
 * the mask's (b, h, q, k)), run-time arguments (scalars: what the tuner's benchmark can pass).
 * -D parameters: WG (work-group size, a power of two), RQ (rows per group), SKV_MAX and HD_MAX
 * (the local arrays' extents); MASK_FLOAT; QH, KH, VH, YH = 1: Q, K, V, Y stored as half
 * (kernels_cl/storage.h; the local arrays, the mask and every sum stay float).
 * gsize = (WG * ceil(SQ / RQ), B * H), lsize (WG, 1). OpenCL 1.2, no extension.
 */
#ifndef WG
#define WG 128
#endif
#ifndef RQ
#define RQ 4
#endif
#ifndef SKV_MAX
#define SKV_MAX 128
#endif
#ifndef HD_MAX
#define HD_MAX 64
#endif
#ifndef QH
#define QH 0
#endif
#ifndef KH
#define KH 0
#endif
#ifndef VH
#define VH 0
#endif
#include "storage.h"

/* RQ rounded up to a power of two, and the work-items of each row's reductions */
#define RP (RQ <= 1 ? 1 : RQ <= 2 ? 2 : RQ <= 4 ? 4 : RQ <= 8 ? 8 : 16)
#define LANES (WG / RP)
#if RQ > 16 || WG % RP
#error "RQ must be at most 16 and divide WG's power of two"
#endif

#define ST_ARGS int st0, int st1, int st2, int st3, int st4, int st5, int st6, int st7, int st8, int st9, \
                int st10, int st11, int st12, int st13, int st14, int st15

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void attn_block(__global const ST_T(QH)* restrict q, __global const ST_T(KH)* restrict k,
                __global const ST_T(VH)* restrict v,
#ifdef MASK_FLOAT
                __global const float* restrict mask,
#endif
                __global ST_T(YH)* y, int H, int SQ, int SKV, int HD, int HDV, ST_ARGS, const float scale)
{
    __local float ql[RQ * HD_MAX];
    __local float s[RQ * SKV_MAX];
    __local float red[WG];
    __local float rmax[RQ], rinv[RQ];

    const int lid = get_local_id(0);
    const int i0 = get_group_id(0) * RQ;
    const int bh = get_group_id(1), b = bh / H, h = bh - b * H;
    const int nr = min(RQ, SQ - i0); /* rows of this block (>= 1: the grid has no empty block) */
    const __global ST_T(QH)* qb = q + b * st0 + h * st1 + i0 * st2;
    const __global ST_T(KH)* kb = k + b * st3 + h * st4;
    const __global ST_T(VH)* vb = v + b * st6 + h * st7;

    for (int e = lid; e < RQ * HD; e += WG) {
        const int r = e / HD, d = e - r * HD;
        ql[r * HD_MAX + d] = r < nr ? ST_LD(QH, qb, r * st2 + d) * scale : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < nr * SKV; e += WG) {
        const int r = e / SKV, j = e - r * SKV;
        const __global ST_T(KH)* kr = kb + j * st5;
        float acc = 0.0f;
        for (int d = 0; d < HD; ++d)
            acc = fma(ql[r * HD_MAX + d], ST_LD(KH, kr, d), acc);
#ifdef MASK_FLOAT
        acc += mask[b * st12 + h * st13 + (i0 + r) * st14 + j * st15];
#endif
        s[r * SKV_MAX + j] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* Softmax: row r's LANES work-items are lid = r * LANES + l. */
    const int r = lid / LANES, l = lid - r * LANES;
    const bool live = r < nr;
    float part = -INFINITY;
    for (int j = l; live && j < SKV; j += LANES)
        part = fmax(part, s[r * SKV_MAX + j]);
    red[lid] = part;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = LANES / 2; w > 0; w >>= 1) {
        if (l < w)
            red[lid] = fmax(red[lid], red[lid + w]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (live && l == 0)
        rmax[r] = red[lid];
    barrier(CLK_LOCAL_MEM_FENCE);
    part = 0.0f;
    if (live) {
        const float m = rmax[r];
        for (int j = l; j < SKV; j += LANES) {
            const float ex = exp(s[r * SKV_MAX + j] - m);
            s[r * SKV_MAX + j] = ex;
            part += ex;
        }
    }
    red[lid] = part;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = LANES / 2; w > 0; w >>= 1) {
        if (l < w)
            red[lid] += red[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (live && l == 0)
        rinv[r] = 1.0f / red[lid];
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int e = lid; e < nr * HDV; e += WG) {
        const int rr = e / HDV, d = e - rr * HDV;
        const __global ST_T(VH)* vc = vb + d;
        float acc = 0.0f;
        for (int j = 0; j < SKV; ++j)
            acc = fma(s[rr * SKV_MAX + j], ST_LD(VH, vc, j * st8), acc);
        ST_ST(YH, y, b * st9 + h * st10 + (i0 + rr) * st11 + d, acc * rinv[rr]);
    }
}
