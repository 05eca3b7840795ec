/* A 1x1 convolution of a 1x1 map (an SE block's two FCs, a head conv after global pooling) as
 * a matrix-vector product with the conv's fused epilogue:
 *     Y[i][c] = ACT(sum_k W[c][k] * X[i][k] + bias[c] + Z[i][c])
 * Why not the GEMM: with one pixel per image the GEMM's tiles compute MR or NR columns for one
 * (and the transposed path packs X first: two launches); here one launch reads the weights once.
 *
 * The weights are packed once per plan as panels of GV output channels, [ceil(M/GV)][K][GV]
 * (zero padded), so a work-item streams one contiguous panel and keeps its GV outputs in one
 * vector (no horizontal sums), k in two multiply-add chains.
 * gsize = (ceil(M / GV), images). Defines: GV (4, 8 or 16), HAS_BIAS, HAS_RES, ACT; XH / YH: X / Y
 * and Z stored as half (storage.h; the products and sums in float). */
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_RES
#define HAS_RES 0
#endif
#ifndef GV
#define GV 16
#endif
#include "activation.h"
#include "storage.h"
#define XT ST_T(XH)
#define YT ST_T(YH)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
typedef CAT(float, GV) floatg;
DEFINE_ACT(act_g, floatg)
#define GLOAD(p) CAT(vload, GV)(0, p)
#define GSTORE(v, p) CAT(vstore, GV)(v, 0, p)

#if HAS_BIAS
#define GV_BIAS_ARG __global const float* restrict bias,
#else
#define GV_BIAS_ARG
#endif
#if HAS_RES
#define GV_RES_ARG __global const YT* restrict Z,
#else
#define GV_RES_ARG
#endif

__kernel void conv_gemv(__global const XT* restrict X, __global const float* restrict Wp, GV_BIAS_ARG
                        GV_RES_ARG __global YT* restrict Y, const int K, const int M,
                        const float act_a, const float act_b, const float act_c)
{
    const int q = get_global_id(0), img = get_global_id(1);
    const int c0 = q * GV;
    if (c0 >= M)
        return;
    const __global float* w = Wp + (size_t)q * K * GV;
    const __global XT* x = X + (size_t)img * K;
    floatg acc0 = (floatg)0.0f, acc1 = (floatg)0.0f;
    int k = 0;
    for (; k + 1 < K; k += 2) {
        acc0 = mad(GLOAD(w + (size_t)k * GV), (floatg)ST_LD(XH, x, k), acc0);
        acc1 = mad(GLOAD(w + (size_t)(k + 1) * GV), (floatg)ST_LD(XH, x, k + 1), acc1);
    }
    if (k < K)
        acc0 = mad(GLOAD(w + (size_t)k * GV), (floatg)ST_LD(XH, x, k), acc0);
    const int n = min(GV, M - c0);
    float t[GV];
    GSTORE(acc0 + acc1, t);
    for (int j = 0; j < n; ++j) {
#if HAS_BIAS
        t[j] += bias[c0 + j];
#endif
#if HAS_RES
        t[j] += ST_LD(YH, Z, (size_t)img * M + c0 + j);
#endif
    }
    GSTORE(act_g(GLOAD(t), act_a, act_b, act_c), t);
    __global YT* y = Y + (size_t)img * M + c0;
    if (n == GV) {
#if YH
        ST_STV(1, GV, y, GLOAD(t));
#else
        GSTORE(GLOAD(t), y);
#endif
    } else {
        for (int j = 0; j < n; ++j)
            ST_ST(YH, y, j, t[j]);
    }
}
