/* GEMM on work-group tiles staged through local memory (the GPU family), with gemm.cl's epilogue.
 *
 *   C[z][m][n] = ACT(alpha * sum_k A[z][m][k] * B[z][k][n] + beta * BIAS[z][m,n] + Z[z][m][n])
 *
 * The parameter space is the one CLBlast's xgemm made the reference (the code is clglow's own):
 *   MWG x NWG   the work-group's tile of C; KWG the k-slice staged per step
 *   MDIMC x NDIMC  work-items per group (local size (NDIMC, MDIMC, 1)); each computes
 *               MWI x NWI = (MWG / MDIMC) x (NWG / NDIMC) outputs in registers
 *   VWM, VWN    vector widths of the local-memory reads (a work-item's rows / columns come in
 *               runs of VWM / VWN consecutive ones)
 *   STRM, STRN  thread mapping: 0 contiguous (work-item i owns runs i*MWI ..), 1 strided (its
 *               VWM-runs are MDIMC*VWM apart: neighbouring work-items read neighbouring words)
 *   PADA, PADB  floats of padding per local row (bank conflicts)
 * Each step, the whole group copies an MWG x KWG slice of A and a KWG x NWG slice of B into
 * __local memory (coalesced: consecutive work-items take consecutive addresses along the
 * operand's contiguous dimension, A_KFAST / B_NFAST), waits at a barrier, multiplies out of local
 * memory, and waits again before the next slice overwrites it. Elements past M, N or K are
 * staged as zeros, so any M, N, K work (no padded operands); only outputs inside M x N are
 * stored. OpenCL 1.2, no extension.
 *
 * Operand layouts (shapes, strides and batch offsets are run-time arguments):
 *   A           A[m*lda_m + k*lda_k]: row-major (lda_k = 1), transposed (lda_m = 1) or any view
 *   B           B[k*ldb_k + n*ldb_n], or with B_PANEL=1 panels of NWG columns (im2col.cl's
 *               layout for a conv's pixels, zero padded to whole panels): B[(tn*K + k)*NWG + c]
 *               or with B_CONV=1 gathered from a convolution's input X (implicit GEMM, no im2col
 *               buffer): row k = (ci, kh, kw) of the group's Cin/G x KH x KW taps, column n =
 *               (oh, ow) of the output pixels, B[k][n] = X[ci][oh*SH - PH + kh*DH][ow*SW - PW + kw*DW]
 *               and zero where that falls in the padding (bounds, no padded copy); B's batch
 *               offsets select the image (sB1) and the group's channels (sB2); any stride,
 *               dilation and groups. The conv's shapes are run-time arguments too (CONV_ARGS).
 *   C, Z        row-major with leading dimensions ldc, ldz; C may be Z itself (every output is
 *               read from Z and written to C by one work-item); BIAS at bias[m*bias_sm + n*bias_sn]
 * The batch index z (global dim 2) is split as z1 = z / D2, z2 = z % D2 and every operand offset is
 * off + z1*s1 + z2*s2 (batch x group for convs; a broadcast operand has stride 0).
 * flags: 1 = bias, 2 = residual Z. The activation is activation.h's (ACT and three parameters).
 * Storage (kernels_cl/storage.h): A_HALF, B_HALF, C_HALF, Z_HALF, BIAS_HALF = 1 store that
 * operand as half (read into local memory or written as floats: the accumulators stay fp32);
 * default 0, float (the same code as before).
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef MWG
#define MWG 64
#endif
#ifndef NWG
#define NWG 64
#endif
#ifndef KWG
#define KWG 16
#endif
#ifndef MDIMC
#define MDIMC 16
#endif
#ifndef NDIMC
#define NDIMC 16
#endif
#ifndef VWM
#define VWM 4
#endif
#ifndef VWN
#define VWN 4
#endif
#ifndef STRM
#define STRM 0
#endif
#ifndef STRN
#define STRN 0
#endif
#ifndef PADA
#define PADA 0
#endif
#ifndef PADB
#define PADB 0
#endif
#ifndef A_KFAST
#define A_KFAST 1
#endif
#ifndef B_NFAST
#define B_NFAST 1
#endif
#ifndef B_PANEL
#define B_PANEL 0
#endif
#ifndef B_CONV
#define B_CONV 0
#endif

#include "storage.h"

#define MWI (MWG / MDIMC)
#define NWI (NWG / NDIMC)
#define THREADS (MDIMC * NDIMC)
#define LDAL (MWG + PADA) /* floats per k row of the local A slice */
#define LDBL (NWG + PADB)
#if MWG % MDIMC || NWG % NDIMC || MWI % VWM || NWI % VWN
#error "MWG/MDIMC and NWG/NDIMC must be whole and multiples of VWM and VWN"
#endif
#if B_CONV
/* The conv's shapes: input H x W, KH x KW taps (KHW = KH*KW) with strides, begin pads and
 * dilations; OW output columns; the float reciprocals of KW, KHW and OW (DIV_BY's). */
#define CONV_ARGS , int cH, int cW, int cKW, int cKHW, int cOW, int cSH, int cSW, int cPH, int cPW, int cDH, int cDW, \
    float cInvKW, float cInvKHW, float cInvOW
/* a / d for 0 <= a < 2^22 from inv = 1 / d rounded to float: (a + 0.5) / d lies at least 0.5 / d
 * from an integer, and the two roundings move it by less than (a + 0.5) / d * 2^-23 < 0.5 / d, so
 * the truncation is the quotient (lower/gpu_conv.py takes K and N below 2^22). No integer
 * division: a multiply on a GPU, and no LLVM `freeze` (which stops Oclgrind's uninitialised-value
 * checker) from a division paired with its remainder. */
#define DIV_BY(a, inv) ((int)(((float)(a) + 0.5f) * (inv)))
/* Each work-item stages one column of every KWG x NWG slice of B (rows THREADS / NWG apart), so
 * its output pixel's top-left input coordinates are computed once. */
#if THREADS % NWG
#error "B_CONV: the work-group's THREADS must be a multiple of NWG (whole columns per work-item)"
#endif
#define CONV_OUTSIDE (-(1 << 28)) /* a column past N: every tap row reads as padding */
#else
#define CONV_ARGS
#endif

#define FLAG_BIAS 1
#define FLAG_RES 2

#include "activation.h"
DEFINE_ACT(act_s, float)

/* The local row of a work-item's i-th row (0 <= i < MWI) of the tile, and likewise for columns. */
#if STRM
#define ROW_OF(tm, i) ((((i) / VWM) * MDIMC + (tm)) * VWM + (i) % VWM)
#else
#define ROW_OF(tm, i) ((tm) * MWI + (i))
#endif
#if STRN
#define COL_OF(tn, j) ((((j) / VWN) * NDIMC + (tn)) * VWN + (j) % VWN)
#else
#define COL_OF(tn, j) ((tn) * NWI + (j))
#endif

/* A run of W floats from local memory (any float alignment: vloadW of the run's first element). */
#define VLOAD(W, p) VLOAD_(W, p)
#define VLOAD_(W, p) VLOAD_##W(p)
#define VLOAD_1(p) (*(p))
#define VLOAD_2(p) vload2(0, p)
#define VLOAD_4(p) vload4(0, p)
#define VLOAD_8(p) vload8(0, p)
/* ... and into a private array (vstoreW: no alignment beyond a float's). */
#define VSTORE(W, v, p) VSTORE_(W, v, p)
#define VSTORE_(W, v, p) VSTORE_##W(v, p)
#define VSTORE_1(v, p) (*(p) = (v))
#define VSTORE_2(v, p) vstore2(v, 0, p)
#define VSTORE_4(v, p) vstore4(v, 0, p)
#define VSTORE_8(v, p) vstore8(v, 0, p)
#if VWM == 1
typedef float floatm;
#elif VWM == 2
typedef float2 floatm;
#elif VWM == 4
typedef float4 floatm;
#elif VWM == 8
typedef float8 floatm;
#else
#error "VWM must be 1, 2, 4 or 8"
#endif
#if VWN == 1
typedef float floatn;
#elif VWN == 2
typedef float2 floatn;
#elif VWN == 4
typedef float4 floatn;
#elif VWN == 8
typedef float8 floatn;
#else
#error "VWN must be 1, 2, 4 or 8"
#endif

__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1)))
void xgemm(
    __global const ST_T(A_HALF)* restrict A, int offA, int sA1, int sA2, int lda_m, int lda_k,
    __global const ST_T(B_HALF)* restrict B, int offB, int sB1, int sB2, int ldb_k, int ldb_n,
    __global ST_T(C_HALF)* C, int offC, int sC1, int sC2, int ldc,
    __global const ST_T(BIAS_HALF)* restrict bias, int offBias, int sBias1, int sBias2, int bias_sm, int bias_sn,
    float beta,
    __global const ST_T(Z_HALF)* Z, int offZ, int sZ1, int sZ2, int ldz,
    int M, int N, int K, int D2, float alpha, int flags, float act_a, float act_b, float act_c CONV_ARGS)
{
    __local float Al[KWG * LDAL];
    __local float Bl[KWG * LDBL];

    const int tn = get_local_id(0);  /* work-items along N vary fastest: C's rows are stored coalesced */
    const int tm = get_local_id(1);
    const int tid = tm * NDIMC + tn;
    const int n0 = get_group_id(0) * NWG;
    const int m0 = get_group_id(1) * MWG;
    const int z = get_global_id(2);
    if (m0 >= M || n0 >= N)  /* the whole group: no barrier is skipped by part of it */
        return;
    const int z1 = z / D2;
    const int z2 = z - z1 * D2;
    const __global ST_T(A_HALF)* pa = A + offA + z1 * sA1 + z2 * sA2;
#if B_PANEL
    const __global ST_T(B_HALF)* pb = B + offB + z1 * sB1 + z2 * sB2 + get_group_id(0) * (K * NWG);
#else
    const __global ST_T(B_HALF)* pb = B + offB + z1 * sB1 + z2 * sB2;
#endif

    float acc[MWI][NWI];
#pragma unroll
    for (int i = 0; i < MWI; ++i)
#pragma unroll
        for (int j = 0; j < NWI; ++j)
            acc[i][j] = 0.0f;
#if B_CONV
    const int bk = DIV_BY(tid, 1.0f / NWG), bn = tid - bk * NWG; /* this work-item's first row, column */
    const int gn = n0 + bn, oh = DIV_BY(gn, cInvOW);
    const int iy0 = gn < N ? oh * cSH - cPH : CONV_OUTSIDE, ix0 = (gn - oh * cOW) * cSW - cPW;
#endif

    for (int k0 = 0; k0 < K; k0 += KWG) {
        /* Stage A[m0 .. m0+MWG, k0 .. k0+KWG) and B[k0 .., n0 ..) (zeros outside M, N, K). */
        for (int e = tid; e < MWG * KWG; e += THREADS) {
#if A_KFAST
            const int mm = e / KWG, kk = e - mm * KWG;
#else
            const int kk = e / MWG, mm = e - kk * MWG;
#endif
            const int gm = m0 + mm, gk = k0 + kk;
            Al[kk * LDAL + mm] = gm < M && gk < K ? ST_LD(A_HALF, pa, gm * lda_m + gk * lda_k) : 0.0f;
        }
#if B_CONV
#pragma unroll
        for (int kk = bk; kk < KWG; kk += THREADS / NWG) {
            const int gk = k0 + kk;
            float v = 0.0f;
            if (gk < K) {
                const int ci = DIV_BY(gk, cInvKHW), r = gk - ci * cKHW;
                const int th = DIV_BY(r, cInvKW);
                const int iy = iy0 + th * cDH, ix = ix0 + (r - th * cKW) * cDW;
                if (iy >= 0 && iy < cH && ix >= 0 && ix < cW)
                    v = ST_LD(B_HALF, pb, (ci * cH + iy) * cW + ix);
            }
            Bl[kk * LDBL + bn] = v;
        }
#else
        for (int e = tid; e < NWG * KWG; e += THREADS) {
#if B_NFAST || B_PANEL
            const int kk = e / NWG, nn = e - kk * NWG;
#else
            const int nn = e / KWG, kk = e - nn * KWG;
#endif
            const int gk = k0 + kk;
#if B_PANEL
            Bl[kk * LDBL + nn] = gk < K ? ST_LD(B_HALF, pb, gk * NWG + nn) : 0.0f;  /* panels are zero padded along N */
#else
            const int gn = n0 + nn;
            Bl[kk * LDBL + nn] = gn < N && gk < K ? ST_LD(B_HALF, pb, gk * ldb_k + gn * ldb_n) : 0.0f;
#endif
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < KWG; ++kk) {
            float a[MWI], b[NWI];
#pragma unroll
            for (int i = 0; i < MWI; i += VWM) {
                const floatm v = VLOAD(VWM, Al + kk * LDAL + ROW_OF(tm, i));
                VSTORE(VWM, v, a + i);
            }
#pragma unroll
            for (int j = 0; j < NWI; j += VWN) {
                const floatn v = VLOAD(VWN, Bl + kk * LDBL + COL_OF(tn, j));
                VSTORE(VWN, v, b + j);
            }
#pragma unroll
            for (int i = 0; i < MWI; ++i)
#pragma unroll
                for (int j = 0; j < NWI; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);  /* everyone is done reading before the next slice lands */
    }

    /* Epilogue: alpha, bias, residual, activation; only outputs inside M x N. */
    const bool has_bias = (flags & FLAG_BIAS) != 0;
    const bool has_res = (flags & FLAG_RES) != 0;
    __global ST_T(C_HALF)* pc = C + offC + z1 * sC1 + z2 * sC2;
    const __global ST_T(Z_HALF)* pz = Z + offZ + z1 * sZ1 + z2 * sZ2;
    const __global ST_T(BIAS_HALF)* pbias = bias + offBias + z1 * sBias1 + z2 * sBias2;
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
        const int gm = m0 + ROW_OF(tm, i);
        if (gm >= M)
            continue;
#pragma unroll
        for (int j = 0; j < NWI; ++j) {
            const int gn = n0 + COL_OF(tn, j);
            if (gn >= N)
                continue;
            float v = acc[i][j] * alpha;
            if (has_bias)
                v += beta * ST_LD(BIAS_HALF, pbias, gm * bias_sm + gn * bias_sn);
            if (has_res)
                v += ST_LD(Z_HALF, pz, gm * ldz + gn);
            ST_ST(C_HALF, pc, gm * ldc + gn, act_s(v, act_a, act_b, act_c));
        }
    }
}
