/* Register-blocked GEMM with a fused epilogue, and the panel packing kernel.
 *
 *   C[z][m][n] = ACT(alpha * sum_k A[z][m][k] * B[z][k][n] + beta * BIAS[z][m,n] + Z[z][m][n])
 *
 * The epilogue's parts are run-time choices (flags: 1 = bias, 2 = residual Z; the activation's
 * parameters, see activation.h), so one program serves every layer of a network: each variant
 * is a few seconds of code generation on pocl at a cold start. The defines are what changes the
 * inner loop: tile sizes, operand layouts, a transposed store, a non-piecewise activation.
 *
 * Each work-item computes an MR x NR tile (NR = VW * NV: NV float vectors per row)
 * over the whole K range, keeping MR*NV vector accumulators in registers.
 *
 * Panels for B come from im2col.cl (im2col, pack_b). Operand layouts (chosen by defines; shapes and strides are run-time arguments):
 *   A_PACKED=1  A is packed in panels of MR rows: A[(panel*K + k)*MR + r]   (weights, at plan time)
 *   A_PACKED=0  A is strided: A[m*lda_m + k*lda_k]                         (rows clamped at the edge)
 *   B_PACKED=1  B is packed in panels of NR columns: B[(panel*K + k)*NR + c], zero-padded
 *               (weights at plan time, im2col output, or pack_b at run time); vector loads are aligned
 *   B_PACKED=0  B is row-major with leading dimension ldb (1x1 convs, MatMul activations)
 *   implicit    (flag 4, in the B_PACKED=0, C_TRANS=0 programs) an implicit-GEMM convolution:
 *               row k of B starts at koff[k]
 *               (B[k][n] = B[koff[k] + n]) in the input's zero-padded phase images
 *               (im2col.cl conv_phases), and column n is the padded-linear output pixel
 *               n = y*wph + x; columns with x >= ow are padding and not stored, the others
 *               go to y*opitch + x + ooff of C (and Z): the plain [M, OH*OW] layout with
 *               opitch = ow, ooff = 0, or the next conv's zero-padded input image (a 1x1 conv
 *               read as an implicit GEMM over X itself, koff[k] = k*H*W, wph = ow = W).
 *   implicit A  (flag 8, in the C_TRANS programs) the same for a transposed conv: row k of A^T
 *               starts at koff[k] (X itself for a 1x1 conv), row m is output pixel (y, x) =
 *               (m / ow, m % ow), read at y*wph + x (no padding rows computed), and goes to
 *               y*opitch + x + ooff of each channel.
 * C, Z (residual) are row-major with leading dimension ldc. C may be Z itself (a residual
 * updated in place, no restrict on either): every output is read from Z and written to C by one
 * work-item, and a tile overlapping its neighbour (ragged in-place B, implicit A) stores only its
 * own outputs. BIAS is read at bias[m*bias_sm + n*bias_sn] with bias_sn in {0, 1}.
 *
 * The batch index z (global dim 2; dim 1 in the C_TRANS programs) is split as z1 = z / D2, z2 = z % D2 and every
 * operand offset is off + z1*s1 + z2*s2 (batch x group for convs; broadcast operands use stride 0).
 *
 * Written for pocl's CPU device first: no local memory, no builtin calls in the
 * inner loop (pocl does not inline fma/mad/vloadN), vector-pointer casts for loads.
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef MR
#define MR 6
#endif
#ifndef VW
#define VW 8
#endif
#ifndef NV
#define NV 2
#endif
#define NR (VW * NV)
#ifndef A_PACKED
#define A_PACKED 1
#endif
#ifndef B_PACKED
#define B_PACKED 1
#endif
#ifndef C_TRANS
#define C_TRANS 0
#endif
#ifndef PF_NEXT
#define PF_NEXT 1
#endif
#ifndef TC_VEC
#define TC_VEC 1
#endif
/* PFB: an in-place B's row PFB k steps ahead is prefetched, every cache line of its NR floats
 * (0: none). Rows read in place are a pitch apart, each on a new page for pitches above 4 KiB:
 * the hardware prefetchers, which follow a stream within a page, miss the first row tile's
 * walk of every panel (a GEMM with few row tiles, e.g. 64 x 3136 columns, pays it on each). */
#ifndef PFB
#define PFB 0
#endif
/* AKB (A read strided, A_PACKED=0): when A's k stride is 1, the tile's MR rows are read AKB k at
 * a time as one vector each into a private MR x AKB block, and the k steps broadcast from there
 * (0: every k step broadcasts from MR row pointers). The MR pointers, each advanced every k step,
 * outnumbered the general registers: the inner loop spilled and reloaded them (about 30 moves
 * and 14 stack accesses per 24 FMAs, pocl's code for 12 x 32 tiles). */
#ifndef AKB
#define AKB 0
#endif
#if AKB && AKB != 4 && AKB != 8 && AKB != 16
#error "AKB must be 0, 4, 8 or 16"
#endif
/* The implicit GEMM is a run-time flag of the in-place-B programs, not a define: it shares their
 * code generation at a cold start (two programs fewer for ResNet-50). */
#define HAS_IMPLICIT (!B_PACKED && !C_TRANS)
/* C_TRANS=1: the kernel computes C' = B'^T-shaped tiles of a transposed problem and stores
 * element (row i, column j) at C[j*ldc + i] (the residual Z likewise): a GEMM with a small
 * N (layer4 convs, N = 49 pixels) runs as C^T = B^T A^T with the pixels as the MR rows and the
 * output channels as the NR columns (no padding of 49 to 64). The bias is then per column. */

#define FLAG_BIAS 1
#define FLAG_RES 2
#define FLAG_IMPLICIT 4
#define FLAG_IMPLICIT_A 8

/* Storage of the operands in global memory (storage.h): 0 float, 1 half (read and written as
 * floats, the accumulators stay fp32). C_HALF covers C and the residual Z. */
#include "storage.h"
#define A_T ST_T(A_HALF)
#define B_T ST_T(B_HALF)
#define C_T ST_T(C_HALF)
#define BIAS_T ST_T(BIAS_HALF)

#include "floatv.h"

#include "activation.h"
DEFINE_ACT(act_v, floatv)
DEFINE_ACT(act_s, float)

#if C_TRANS && MR >= 6 && MR <= 12 && TC_VEC
/* A column of a transposed tile (MR pixels of one channel, consecutive in C) as one vector,
 * moved to and from memory as the parts of MR: X(lanes, width, offset). */
#define HAS_COLV 1
#if MR <= 8
typedef float8 colv;
#else
typedef float16 colv;
#endif
DEFINE_ACT(act_col, colv)
#if MR == 6
#define COL_PARTS(X) X(s0123, 4, 0) X(s45, 2, 4)
#elif MR == 7
#define COL_PARTS(X) X(s0123, 4, 0) X(s45, 2, 4) X(s6, 1, 6)
#elif MR == 8
#define COL_PARTS(X) X(s01234567, 8, 0)
#elif MR == 9
#define COL_PARTS(X) X(s01234567, 8, 0) X(s8, 1, 8)
#elif MR == 10
#define COL_PARTS(X) X(s01234567, 8, 0) X(s89, 2, 8)
#elif MR == 11
#define COL_PARTS(X) X(s01234567, 8, 0) X(s89, 2, 8) X(sa, 1, 10)
#else
#define COL_PARTS(X) X(s01234567, 8, 0) X(s89ab, 4, 8)
#endif
#define COL_ADD(S, W, O) col.S += ST_LDV(C_HALF, W, pzc + (O));
#define COL_STORE(S, W, O) ST_STV(C_HALF, W, pcc + (O), col.S);
#else
#define HAS_COLV 0
#endif

#if !B_PACKED && !C_TRANS
/* The lanes of a tile row as runs of an implicit GEMM's output pixels: padded-linear column j
 * is pixel (j / wph, j % wph), stored at y*opitch + x + ooff when x < ow. For each run of
 * consecutive stored pixels from lane C0 on: c_ its first lane, n_ its length, d_ its first
 * pixel's offset. */
#define FOR_RUNS(J0, C0, LIM, BODY) do {                                \
        int c_ = (C0), y_ = ((J0) + c_) / wph, x_ = (J0) + c_ - y_ * wph;  \
        while (c_ < (LIM)) {                                             \
            const int n_ = min((LIM) - c_, ow - x_);                     \
            if (n_ > 0) {                                                \
                const int d_ = y_ * opitch + x_ + ooff;                  \
                BODY;                                                    \
            }                                                            \
            c_ += min((LIM) - c_, wph - x_);                             \
            ++y_;                                                        \
            x_ = 0;                                                      \
        }                                                                \
    } while (0)

/* Unaligned vector types for the runs (4-byte alignment: moves without vloadN/vstoreN). */
typedef float16 f16_u __attribute__((aligned(4)));
typedef float8 f8_u __attribute__((aligned(4)));
typedef float4 f4_u __attribute__((aligned(4)));
typedef float2 f2_u __attribute__((aligned(4)));

/* t[0, n) += z[0, n), n <= 16, as at most five vector moves. */
inline void run_add(float* t, const __global C_T* z, int n)
{
    if (n & 16) { *(f16_u*)t += ST_LDV(C_HALF, 16, z); return; }
    if (n & 8) { *(f8_u*)t += ST_LDV(C_HALF, 8, z); t += 8; z += 8; }
    if (n & 4) { *(f4_u*)t += ST_LDV(C_HALF, 4, z); t += 4; z += 4; }
    if (n & 2) { *(f2_u*)t += ST_LDV(C_HALF, 2, z); t += 2; z += 2; }
    if (n & 1) *t += ST_LD(C_HALF, z, 0);
}

/* c[0, n) = t[0, n), n <= 16. */
inline void run_store(__global C_T* c, const float* t, int n)
{
    if (n & 16) { ST_STV(C_HALF, 16, c, *(const f16_u*)t); return; }
    if (n & 8) { ST_STV(C_HALF, 8, c, *(const f8_u*)t); t += 8; c += 8; }
    if (n & 4) { ST_STV(C_HALF, 4, c, *(const f4_u*)t); t += 4; c += 4; }
    if (n & 2) { ST_STV(C_HALF, 2, c, *(const f2_u*)t); t += 2; c += 2; }
    if (n & 1) ST_ST(C_HALF, c, 0, *t);
}
#endif

__kernel void gemm(
    __global const A_T* restrict A, int offA, int sA1, int sA2, int lda_m, int lda_k,
    __global const B_T* restrict B, int offB, int sB1, int sB2, int ldb,
    __global C_T* C, int offC, int sC1, int sC2, int ldc,
    __global const BIAS_T* restrict bias, int offBias, int sBias1, int sBias2,
    int bias_sm, int bias_sn, float beta,
    __global const C_T* Z, int offZ, int sZ1, int sZ2,
    int M, int N, int K, int D2, float alpha, int flags, float act_a, float act_b, float act_c,
    __global const int* restrict koff, int wph, int ow, int opitch, int ooff)
{
    /* Row tiles vary fastest: consecutive work-items (run back to back by a CPU thread) share
     * one B panel, which then streams from memory once while the A panels stay in cache. */
    const int tm = get_global_id(0);
#if C_TRANS
    /* Transposed (B = weight panels, pixels as rows): images before column tiles, so a weight
     * panel serves every image's pixel tiles while it is in cache (gsize = (tiles, batch,
     * column tiles); ResNet-50 at batch 8: 1% in alternating runs). */
    const int tn = get_global_id(2);
    const int z = get_global_id(1);
#else
    const int tn = get_global_id(1);
    const int z = get_global_id(2);
#endif
#if C_TRANS
    /* An implicit A (pixels as rows, flag 8): a ragged last row tile computes the last MR rows
     * instead, overlapping its neighbour as an in-place B's last column tile does below. */
    const int m0 = (flags & FLAG_IMPLICIT_A) && M >= MR && (tm + 1) * MR > M ? M - MR : tm * MR;
    const int rs = tm * MR - m0;  /* rows of the shifted tile its neighbour stores */
#else
    const int m0 = tm * MR;
#endif
#if B_PACKED
    const int n0 = tn * NR;
#else
    /* A ragged last column tile of an in-place B computes the last NR columns instead: whole
     * vector loads on every tile (the element-wise path below is left for N < NR). It overlaps
     * its neighbour and stores only its own columns, from cs on: every output is read (Z) and
     * written (C) by one work-item, so C may be Z itself (a residual updated in place). When at
     * most one vector of columns is left (tail1: ResNet's 196-pixel layers, 6 x 32 + 4), it
     * computes just the last VW columns: half or a third of a tile's FMAs. */
    const int rem = N - tn * NR;
#if HAS_IMPLICIT
    const bool tail1 = NV > 1 && !(flags & FLAG_IMPLICIT) && rem > 0 && rem <= VW && N >= NR;
#else
    const bool tail1 = false;  /* C_TRANS with an in-place B: not launched (its B is packed weights) */
#endif
    const int n0 = tail1 ? N - VW : (tn + 1) * NR > N && N >= NR ? N - NR : tn * NR;
#endif
    const int cs = tn * NR - n0;  /* columns of a shifted tile its neighbour stores */
    if (tm * MR >= M || tn * NR >= N)
        return;
    const int z1 = z / D2;
    const int z2 = z - z1 * D2;

    floatv acc[MR][NV];
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int v = 0; v < NV; ++v)
            acc[r][v] = (floatv)0.0f;

#if A_PACKED
    const __global A_T* pa = A + offA + z1 * sA1 + z2 * sA2 + tm * (K * MR);
#else
    const __global A_T* pa[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r)
        pa[r] = A + offA + z1 * sA1 + z2 * sA2 + min(m0 + r, M - 1) * lda_m;
#endif

#if A_PACKED
#define A_AT(r) ST_LD(A_HALF, pa, r)
#define A_NEXT() pa += MR
#else
#define A_AT(r) ST_LD(A_HALF, pa[r], 0)
#define A_NEXT() do { _Pragma("unroll") for (int r_ = 0; r_ < MR; ++r_) pa[r_] += lda_k; } while (0)
#endif

/* One k step of the tile: row r's A value AT(r) times the NV vectors of B. */
#define FMA_TILE_N(bv, AT, NVEC) do {                       \
        _Pragma("unroll") for (int r = 0; r < MR; ++r) {    \
            const float a_ = AT(r);                         \
            _Pragma("unroll") for (int v = 0; v < NVEC; ++v) \
                acc[r][v] += a_ * bv[v];                    \
        }                                                   \
    } while (0)
#define FMA_TILE(bv, AT) FMA_TILE_N(bv, AT, NV)
/* The k loop around STEP(k, AT) (one k step of B with A's values AT(r)): by AKB blocks of A when
 * it is strided with k stride 1 (see AKB), else one k step at a time. */
#if !A_PACKED && AKB
#define AKB_CAT_(a, b) a##b
#define AKB_CAT(a, b) AKB_CAT_(a, b)
typedef AKB_CAT(float, AKB) akv;
#define AT_BLOCK(r) ap_[(r) * AKB]
#define K_LOOP(STEP) do {                                                   \
        int k = 0;                                                          \
        if (lda_k == 1) {                                                   \
            float at_[MR * AKB] __attribute__((aligned(64)));               \
            for (; k + AKB <= K; k += AKB) {                                \
                _Pragma("unroll") for (int r = 0; r < MR; ++r) {           \
                    *(akv*)(at_ + r * AKB) = ST_LDV(A_HALF, AKB, pa[r]);   \
                    pa[r] += AKB;                                           \
                }                                                           \
                const float* ap_ = at_;                                     \
                _Pragma("unroll 1") for (int kk = 0; kk < AKB; ++kk, ++ap_) \
                    STEP(k + kk, AT_BLOCK);                                 \
            }                                                               \
        }                                                                   \
        for (; k < K; ++k) {                                                \
            STEP(k, A_AT);                                                  \
            A_NEXT();                                                       \
        }                                                                   \
    } while (0)
#else
#define K_LOOP(STEP) do {                                                   \
        for (int k = 0; k < K; ++k) {                                       \
            STEP(k, A_AT);                                                  \
            A_NEXT();                                                       \
        }                                                                   \
    } while (0)
#endif
/* The accumulators into a private MR x NR tile (vector stores; the scalar epilogues then read
 * it from L1: cheaper than extracting each lane from the registers). */
#define SPILL_TILE(t) do {                                  \
        _Pragma("unroll") for (int r = 0; r < MR; ++r)      \
            _Pragma("unroll") for (int v = 0; v < NV; ++v)  \
                *(floatv*)((t) + r * NR + v * VW) = acc[r][v]; \
    } while (0)
/* alpha times accumulator vector (r, v) plus its bias, per row (bias_sn = 0) or per column (a
 * vector of pbias); pbias is the tile's bias pointer in the scope of use. */
#define ALPHA_BIAS_V(r, v)                                                                     \
    (acc[r][v] * alpha + (!has_bias ? (floatv)0.0f                                             \
                          : bias_sn == 0 ? (floatv)(beta * ST_LD(BIAS_HALF, pbias, (r) * bias_sm)) \
                                         : beta * ST_LDV(BIAS_HALF, VW, pbias + (r) * bias_sm + (v) * VW)))
/* One output of an edge tile from the spilled `tile`: alpha, bias, the residual read by ZVAL
 * (evaluated only with a residual), the activation. */
#define EDGE_OUT(r, c, ZVAL)                                                                   \
    act_s(tile[(r) * NR + (c)] * alpha + (has_bias ? beta * ST_LD(BIAS_HALF, pbias, (r) * bias_sm + (c) * bias_sn) : 0.0f) \
          + (has_res ? (ZVAL) : 0.0f), act_a, act_b, act_c)
/* The NV vectors of B at p (LDM: ST_LDVA for an aligned panel, ST_LDV for a row in place). */
#define LOAD_B_N(bv, p, LDM, NVEC) do {                     \
        _Pragma("unroll") for (int v = 0; v < NVEC; ++v)    \
            bv[v] = LDM(B_HALF, VW, (p) + v * VW);          \
    } while (0)
#define LOAD_B(bv, p, LDM) LOAD_B_N(bv, p, LDM, NV)

#if B_PACKED
    const __global B_T* pb = B + offB + z1 * sB1 + z2 * sB2 + tn * (K * NR);
#if C_TRANS && PF_NEXT
    /* The weight panels stream from DRAM (ResNet-50's layer4: 60 MB of weights a run): the
     * first row tile of a panel would fetch all of it at once while the panel's other row
     * tiles find it in cache. Each group prefetches its share of the next panel instead, one
     * line every 2 k steps, so the fetch spreads over the current panel's groups. */
    const int n_rt = (M + MR - 1) / MR, n_z = get_global_size(1);
    const int share = (K * NR + n_rt * n_z * 16 - 1) / (n_rt * n_z * 16) * 16;
    const __global B_T* pf = pb + K * NR + (z + n_z * tm) * share;
    const __global B_T* pf_end = (tn + 1) * NR >= N ? pf
                                   : pf + share < pb + 2 * K * NR ? pf + share : pb + 2 * K * NR;
#define PREFETCH_NEXT(k) do { if (((k) & 1) == 0 && pf < pf_end) { CLG_PREFETCH(pf); pf += 16; } } while (0)
#else
#define PREFETCH_NEXT(k) do { } while (0)
#endif
#if C_TRANS
    if (flags & FLAG_IMPLICIT_A) {
        /* Implicit A: row k of A^T starts at koff[k] (X in place for a 1x1 conv, the phase
         * images otherwise) and the tile's rows are output pixels p = (y, x), at y * wph +
         * x * lda_k there (lda_k: 1, or a strided conv's column stride where it reads a
         * stride-1 padded image or X itself: no phase images to copy first; wph is then the
         * row stride times the image's pitch): one pointer per row, so no padding column is
         * computed (ResNet-50's 14x14 3x3s: 196 rows, not 14 x 15 = 210). */
        const __global A_T* pr[MR];
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const int p = min(m0 + r, M - 1);
            const int y = p / ow;
            pr[r] = A + offA + z1 * sA1 + z2 * sA2 + y * wph + (p - y * ow) * lda_k;
        }
        for (int k = 0; k < K; ++k) {
            floatv b[NV];
            LOAD_B(b, pb, ST_LDVA);
            pb += NR;
            const int o = koff[k];
#define AR_AT(r) ST_LD(A_HALF, pr[r], o)
            FMA_TILE(b, AR_AT);
            PREFETCH_NEXT(k);
        }
    } else
#endif
#define STEP_PANEL(k, AT) do {   \
        floatv b[NV];             \
        LOAD_B(b, pb, ST_LDVA);    \
        pb += NR;                 \
        FMA_TILE(b, AT);          \
        PREFETCH_NEXT(k);         \
    } while (0)
    K_LOOP(STEP_PANEL);
#else
    const __global B_T* pb = B + offB + z1 * sB1 + z2 * sB2 + n0;
/* Every 64-byte line of W floats at p (p need not be aligned: its last float too). */
#define PREFETCH_B_ROW(p, W) do {                               \
        const __global B_T* p_ = (p);                           \
        _Pragma("unroll") for (int i_ = 0; i_ < (W); i_ += 16)  \
            CLG_PREFETCH(p_ + i_);                              \
        CLG_PREFETCH(p_ + (W) - 1);                             \
    } while (0)
#if HAS_IMPLICIT
    if (flags & FLAG_IMPLICIT) {
#define STEP_IMPLICIT(k, AT) do {                      \
            floatv b[NV];                                 \
            if (PFB && (k) + PFB < K)                     \
                PREFETCH_B_ROW(pb + koff[(k) + PFB], NR); \
            LOAD_B(b, pb + koff[k], ST_LDV);            \
            FMA_TILE(b, AT);                              \
        } while (0)
        K_LOOP(STEP_IMPLICIT);
    } else
#endif
    if (tail1) {
#define STEP_TAIL1(k, AT) do {  /* the first vector of accumulators only */ \
            floatv b[1];                                 \
            if (PFB && (k) + PFB < K)                    \
                PREFETCH_B_ROW(pb + PFB * ldb, VW);      \
            LOAD_B_N(b, pb, ST_LDV, 1);                \
            pb += ldb;                                   \
            FMA_TILE_N(b, AT, 1);                        \
        } while (0)
        K_LOOP(STEP_TAIL1);
    } else if (n0 + NR <= N) {
#define STEP_ROWS(k, AT) do {                        \
            floatv b[NV];                               \
            if (PFB && (k) + PFB < K)                   \
                PREFETCH_B_ROW(pb + PFB * ldb, NR);     \
            LOAD_B(b, pb, ST_LDV);                    \
            pb += ldb;                                  \
            FMA_TILE(b, AT);                            \
        } while (0)
        K_LOOP(STEP_ROWS);
    } else {
        const int nn = N - n0;
#define STEP_NARROW(k, AT) do {                        \
            floatv b[NV];                                 \
            float* bs = (float*)b;                        \
            _Pragma("unroll 1") for (int c = 0; c < NR; ++c) \
                bs[c] = c < nn ? ST_LD(B_HALF, pb, c) : 0.0f; \
            pb += ldb;                                    \
            FMA_TILE(b, AT);                              \
        } while (0)
        K_LOOP(STEP_NARROW);
    }
#endif

    /* Epilogue: alpha, bias, residual, activation, store. */
    const bool has_bias = (flags & FLAG_BIAS) != 0;
    const bool has_res = (flags & FLAG_RES) != 0;
#if HAS_IMPLICIT
    /* Implicit GEMM: columns are padded-linear pixels. A vector of VW columns within one output
     * row goes out as one vector store at y*ow + x; the others (across a row end or over the
     * padding columns, and every column of a ragged row tile) go through a private tile, run
     * by run (FOR_RUNS). The bias is per row (a conv's per-channel bias). */
    if (flags & FLAG_IMPLICIT) {
        const int mr = min(MR, M - m0);
        __global C_T* pc = C + offC + z1 * sC1 + z2 * sC2 + m0 * ldc;
        const __global C_T* pz = Z + offZ + z1 * sZ1 + z2 * sZ2 + m0 * ldc;
        const __global BIAS_T* pbias = bias + offBias + z1 * sBias1 + z2 * sBias2 + m0 * bias_sm;
        int dst[NV];
        bool whole[NV];
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            const int j = n0 + v * VW;
            const int y = j / wph;
            const int x = j - y * wph;
            dst[v] = y * opitch + x + ooff;
            /* wph == opitch (no padding columns on either side, e.g. a strided 1x1): padded-linear
             * is the output order */
            whole[v] = mr == MR && v * VW >= cs && (x + VW <= ow || (wph == opitch && wph == ow && j + VW <= N));
        }
        float tile[MR * NR] __attribute__((aligned(64)));
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const float br = has_bias && r < mr ? beta * ST_LD(BIAS_HALF, pbias, r * bias_sm) : 0.0f;
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                floatv y = acc[r][v] * alpha + br;
                if (whole[v]) {
                    if (has_res)
                        y += ST_LDV(C_HALF, VW, pz + r * ldc + dst[v]);
                    ST_STV(C_HALF, VW, pc + r * ldc + dst[v], act_v(y, act_a, act_b, act_c));
                } else {
                    *(floatv*)(tile + r * NR + v * VW) = y;
                }
            }
        }
        /* A vector across a row end (or over padding columns, or of a ragged row tile): its
         * lanes go out as runs of consecutive pixels, each run a few vector moves (run_add,
         * run_store): ResNet's 28x28 3x3 convs have more than half their vectors across a row
         * end (pitch 29 = 16 + 13), which went out lane by lane before. */
#pragma unroll 1
        for (int v = 0; v < NV; ++v) {
            if (whole[v])
                continue;
            const int j0 = n0 + v * VW;
            const int lim = min(VW, N - j0);
            const int c0 = max(0, cs - v * VW);  /* lanes a shifted tile's neighbour stores */
#pragma unroll 1
            for (int r = 0; r < mr; ++r) {
                float* t = tile + r * NR + v * VW;
                if (has_res)
                    FOR_RUNS(j0, c0, lim, run_add(t + c_, pz + r * ldc + d_, n_));
                *(floatv*)t = act_v(*(const floatv*)t, act_a, act_b, act_c);
                FOR_RUNS(j0, c0, lim, run_store(pc + r * ldc + d_, t + c_, n_));
            }
        }
        return;
    }
#endif
#if C_TRANS
    {
        /* Transposed: column c of the tile is MR consecutive floats of C (pixels), written from a
         * private tile. With an implicit A row r is pixel (y, x) and goes to y*opitch + x + ooff
         * of its channel, or nowhere (rd = -1) when the tile's neighbour stores it. */
        const bool imp = (flags & FLAG_IMPLICIT_A) != 0;
        int rd[MR];
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const int j = m0 + r;
            const int y = imp ? j / ow : 0;
            const int x = j - y * ow;
            rd[r] = !imp ? j : (r >= rs && j < M ? y * opitch + x + ooff : -1);
        }
        __global C_T* pcb = C + offC + z1 * sC1 + z2 * sC2 + n0 * ldc;
        const __global C_T* pzb = Z + offZ + z1 * sZ1 + z2 * sZ2 + n0 * ldc;
        const __global BIAS_T* pbias = bias + offBias + z1 * sBias1 + z2 * sBias2 + m0 * bias_sm + n0 * bias_sn;
        float tile[MR * NR] __attribute__((aligned(64)));
        const int mr = min(MR, M - m0);
        const int nr = min(NR, N - n0);
#if HAS_COLV
        /* The tile's rows as consecutive outputs (every one stored here, no row end between them
         * in a padded output): each channel's MR pixels are one vector, built from the tile's
         * column in L1, and its residual, activation and store are a few vector moves (the
         * general path below moves every output as a scalar, with a test). */
        if (mr == MR && nr == NR && rd[0] >= 0 && rd[MR - 1] - rd[0] == MR - 1) {
#pragma unroll
            for (int r = 0; r < MR; ++r) {
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    *(floatv*)(tile + r * NR + v * VW) = ALPHA_BIAS_V(r, v);
                }
            }
            pcb += rd[0];
            pzb += rd[0];
#pragma unroll 2
            for (int c = 0; c < NR; ++c) {
                colv col = (colv)0.0f;
#pragma unroll
                for (int r = 0; r < MR; ++r)
                    col[r] = tile[r * NR + c];
                const __global C_T* pzc = pzb + c * ldc;
                if (has_res) {
                    COL_PARTS(COL_ADD)
                }
                col = act_col(col, act_a, act_b, act_c);
                __global C_T* pcc = pcb + c * ldc;
                COL_PARTS(COL_STORE)
            }
        } else
#endif
        if (mr == MR && nr == NR) {
            /* alpha and bias on the accumulator vectors, the (transposed) residual added in the
             * private tile, the activation on the tile's vectors (a Swish is one vector exp per
             * VW outputs, not VW scalar calls: MobileNet-style's head 1x1 conv 0.17 -> 0.08 ms),
             * then the transposed stores. */
#pragma unroll
            for (int r = 0; r < MR; ++r) {
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    *(floatv*)(tile + r * NR + v * VW) = ALPHA_BIAS_V(r, v);
                }
            }
            if (has_res) {
#pragma unroll 4
                for (int c = 0; c < NR; ++c) {
                    const __global C_T* pzc = pzb + c * ldc;
#pragma unroll
                    for (int r = 0; r < MR; ++r)
                        tile[r * NR + c] += rd[r] < 0 ? 0.0f : ST_LD(C_HALF, pzc, rd[r]);
                }
            }
#pragma unroll
            for (int i = 0; i < MR * NV; ++i)
                *(floatv*)(tile + i * VW) = act_v(*(const floatv*)(tile + i * VW), act_a, act_b, act_c);
#pragma unroll 4
            for (int c = 0; c < NR; ++c) {
                __global C_T* pcc = pcb + c * ldc;
#pragma unroll
                for (int r = 0; r < MR; ++r) {
                    if (rd[r] >= 0)
                        ST_ST(C_HALF, pcc, rd[r], tile[r * NR + c]);
                }
            }
        } else {
            SPILL_TILE(tile);
#pragma unroll 1
            for (int r = 0; r < mr; ++r) {
                if (rd[r] < 0)
                    continue;
#pragma unroll 1
                for (int c = 0; c < nr; ++c)
                    ST_ST(C_HALF, pcb, c * ldc + rd[r], EDGE_OUT(r, c, ST_LD(C_HALF, pzb, c * ldc + rd[r])));
            }
        }
    }
#else
    __global C_T* pc = C + offC + z1 * sC1 + z2 * sC2 + m0 * ldc + n0;
    const __global BIAS_T* pbias = bias + offBias + z1 * sBias1 + z2 * sBias2 + m0 * bias_sm + n0 * bias_sn;
    const __global C_T* pz = Z + offZ + z1 * sZ1 + z2 * sZ2 + m0 * ldc + n0;
    if (m0 + MR <= M && n0 + NR <= N && cs == 0) {
        /* A whole tile: unrolled, vector loads and stores. */
#pragma unroll
        for (int r = 0; r < MR; ++r) {
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                floatv y = ALPHA_BIAS_V(r, v);
                const int c0 = v * VW;
                if (has_res)
                    y += ST_LDV(C_HALF, VW, pz + r * ldc + c0);
                ST_STV(C_HALF, VW, pc + r * ldc + c0, act_v(y, act_a, act_b, act_c));
            }
        }
    } else {
        /* An edge tile: the accumulators go to a private tile, then one rolled scalar loop
         * (unrolling this path for every element only multiplied the code to generate). */
        float tile[MR * NR] __attribute__((aligned(64)));
        SPILL_TILE(tile);
        const int mr = min(MR, M - m0);
        const int nr = min(NR, N - n0);
#pragma unroll 1
        for (int r = 0; r < mr; ++r) {
#pragma unroll 1
            for (int c = cs; c < nr; ++c)
                ST_ST(C_HALF, pc, r * ldc + c, EDGE_OUT(r, c, ST_LD(C_HALF, pz, r * ldc + c)));
        }
    }
#endif
}
