/* Skinny GEMM (M = 1 .. 4 rows, a GEMV when M = 1) for the GPU family (lower/gpu_gemv.py), with
 * xgemm.cl's arguments and epilogue:
 *
 *   C[z][m][n] = ACT(alpha * sum_k A[z][m][k] * B[z][k][n] + beta * BIAS[z][m,n] + Z[z][m][n])
 *
 * xgemm.cl's 64x64 tiles waste all but M of their rows here and give a column block one
 * work-item per K step; a skinny GEMM is bound by streaming B once. So a work-group takes a block
 * of output columns and splits the K loop over its items; each item keeps MR partial sums per
 * column (one per row of A), and the items of one column combine theirs in local memory (a tree,
 * a barrier per step). B is read along its contiguous dimension by neighbouring items:
 *   B_KFAST = 0  B[k*ldb_k + n] (row-major [K, N]): local dim 0 = NL columns, dim 1 = KL splits
 *                of K. gsize (ceil(N / NL) * NL, KL, batch), lsize (NL, KL, 1).
 *   B_KFAST = 1  B[k + n*ldb_n] (a transposed [N, K] weight, Gemm transB): local dim 0 = KL
 *                splits of K, dim 1 = NL columns. gsize (KL, ceil(N / NL) * NL, batch).
 * A (M x K, any strides) is read by every column's items alike (one address per step: a broadcast).
 *   MR  rows of A and C (1 .. 4);   LS  NL * KL, the local array's size per row
 * Batch z = z1 * D2 + z2 offsets every operand by off + z1*s1 + z2*s2 (xgemm.cl's convention).
 * flags: 1 = bias, 2 = residual Z. OpenCL 1.2.
 * Storage: A_HALF, B_HALF, C_HALF, Z_HALF, BIAS_HALF as xgemm.cl's (kernels_cl/storage.h; fp32 sums).
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef MR
#define MR 1
#endif
#ifndef LS
#define LS 256
#endif
#ifndef B_KFAST
#define B_KFAST 0
#endif

#include "storage.h"

#define FLAG_BIAS 1
#define FLAG_RES 2

#include "activation.h"
DEFINE_ACT(act_s, float)

__kernel void gemv(
    __global const ST_T(A_HALF)* restrict A, int offA, int sA1, int sA2, int lda_m, int lda_k,
    __global const ST_T(B_HALF)* restrict B, int offB, int sB1, int sB2, int ldb_k, int ldb_n,
    __global ST_T(C_HALF)* C, int offC, int sC1, int sC2, int ldc,
    __global const ST_T(BIAS_HALF)* restrict bias, int offBias, int sBias1, int sBias2, int bias_sm, int bias_sn,
    float beta,
    __global const ST_T(Z_HALF)* Z, int offZ, int sZ1, int sZ2, int ldz,
    int M, int N, int K, int D2, float alpha, int flags, float act_a, float act_b, float act_c)
{
    __local float part[MR * LS];
#if B_KFAST
    const int kl = get_local_id(0), cl = get_local_id(1);
    const int nk = get_local_size(0), nc = get_local_size(1);
    const int n = get_global_id(1);
    const int idx = cl * nk + kl;  /* a column's K lanes side by side: the tree's step is 1 */
    const int step = 1;
#else
    const int cl = get_local_id(0), kl = get_local_id(1);
    const int nc = get_local_size(0), nk = get_local_size(1);
    const int n = get_global_id(0);
    const int idx = kl * nc + cl;
    const int step = nc;
#endif
    const int z = get_global_id(2);
    const int z1 = z / D2;
    const int z2 = z - z1 * D2;
    const int live = n < N && M > 0;
    const __global ST_T(A_HALF)* pa = A + offA + z1 * sA1 + z2 * sA2;
    const __global ST_T(B_HALF)* pb = B + offB + z1 * sB1 + z2 * sB2;

    float acc[MR];
#pragma unroll
    for (int i = 0; i < MR; ++i)
        acc[i] = 0.0f;
    if (live) {
        for (int k = kl; k < K; k += nk) {
#if B_KFAST
            const float b = ST_LD(B_HALF, pb, k + n * ldb_n);
#else
            const float b = ST_LD(B_HALF, pb, k * ldb_k + n);
#endif
#pragma unroll
            for (int i = 0; i < MR; ++i)
                if (i < M)
                    acc[i] += ST_LD(A_HALF, pa, i * lda_m + k * lda_k) * b;
        }
    }
#pragma unroll
    for (int i = 0; i < MR; ++i)
        part[i * LS + idx] = acc[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = nk >> 1; s > 0; s >>= 1) {
        if (kl < s) {
#pragma unroll
            for (int i = 0; i < MR; ++i)
                part[i * LS + idx] += part[i * LS + idx + s * step];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (!live || kl != 0)
        return;

    /* Epilogue (xgemm.cl's): alpha, bias, residual, activation. */
    const bool has_bias = (flags & FLAG_BIAS) != 0;
    const bool has_res = (flags & FLAG_RES) != 0;
    __global ST_T(C_HALF)* pc = C + offC + z1 * sC1 + z2 * sC2;
    const __global ST_T(Z_HALF)* pz = Z + offZ + z1 * sZ1 + z2 * sZ2;
    const __global ST_T(BIAS_HALF)* pbias = bias + offBias + z1 * sBias1 + z2 * sBias2;
#pragma unroll
    for (int i = 0; i < MR; ++i) {
        if (i >= M)
            break;
        float v = part[i * LS + idx] * alpha;
        if (has_bias)
            v += beta * ST_LD(BIAS_HALF, pbias, i * bias_sm + n * bias_sn);
        if (has_res)
            v += ST_LD(Z_HALF, pz, i * ldz + n);
        ST_ST(C_HALF, pc, i * ldc + n, act_s(v, act_a, act_b, act_c));
    }
}
