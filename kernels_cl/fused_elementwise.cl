/* A fused chain of float32 elementwise ops (clglow.FusedElementwise): y = EXPR(X0, ..., X3)
 * evaluated per output element, each input broadcast to the output shape.
 *
 * Defines:
 *   EXPR   the expression, nested macro calls over X0..X{NIN-1}, e.g. MUL(X0,SIGMOID(X0))
 *   NIN    number of inputs (1..4)
 *   RANK   rank of the collapsed broadcast index space (fused_rows)
 * fused_flat: every input has the output's shape (no index arithmetic).
 * fused_rows: gsize = (the last dim rounded up to the work-group, the other dims flattened);
 *   meta = dims[RANK], then one stride row per input (0 where broadcast), all int32; the
 *   row's offsets are decomposed once per row (uniform across a work-group).
 * Plain arithmetic only where pocl would call out of line (see erf.h).
 */
#include "erf.h"

#ifndef NIN
#define NIN 1
#endif
#ifndef RANK
#define RANK 1
#endif

#define RELU(x) ((x) < 0.0f ? 0.0f : (x))  /* NaN passes through */
#define SIGMOID(x) (1.0f / (1.0f + exp(-(x))))
#define TANH(x) tanh(x)
#define EXP(x) exp(x)
#define LOG(x) log(x)
#define ABS(x) fabs(x)
#define NEG(x) (-(x))
#define SQRT(x) sqrt(x)
#define RECIP(x) (1.0f / (x))
#define ERF(x) clg_erf(x)
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))

__kernel void fused_flat(__global const float* x0, __global const float* x1, __global const float* x2,
                         __global const float* x3, __global float* y, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const float X0 = x0[i];
#if NIN > 1
    const float X1 = x1[i];
#endif
#if NIN > 2
    const float X2 = x2[i];
#endif
#if NIN > 3
    const float X3 = x3[i];
#endif
    y[i] = EXPR;
}

__kernel void fused_rows(__global const float* x0, __global const float* x1, __global const float* x2,
                         __global const float* x3, __global float* y, const int inner,
                         __global const int* restrict meta) {
    const int j = get_global_id(0);
    const int row = get_global_id(1);
    if (j >= inner) return;
    int o[4] = {0, 0, 0, 0};
    int rem = row;
    for (int d = RANK - 2; d >= 0; --d) {
        int r = rem;
        if (d > 0) {
            const int q = rem / meta[d];
            r = rem - q * meta[d];
            rem = q;
        }
#pragma unroll
        for (int k = 0; k < NIN; ++k)
            o[k] += r * meta[RANK * (k + 1) + d];
    }
#pragma unroll
    for (int k = 0; k < NIN; ++k)
        o[k] += j * meta[RANK * (k + 1) + RANK - 1];
    const float X0 = x0[o[0]];
#if NIN > 1
    const float X1 = x1[o[1]];
#endif
#if NIN > 2
    const float X2 = x2[o[2]];
#endif
#if NIN > 3
    const float X3 = x3[o[3]];
#endif
    y[(long)row * inner + j] = EXPR;
}
