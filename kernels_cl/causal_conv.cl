/* CausalConvWithState (opset 27; Mamba / Gated DeltaNet's short convolution; lower/causal_conv.py):
 * a depthwise causal 1-D conv over [B, C, L] whose left padding is the carried state,
 *   xp = concat(past_state [B, C, K-1] (zeros when absent), x, axis 2)
 *   y[b, c, t] = ACT(bias[c] + sum_j w[c, 0, j] * xp[b, c, t + j])     t < L
 *   present[b, c, p] = xp[b, c, L + p]                                  p < K-1
 * One work-item per (position, channel, image): gsize = (max(L, K-1), C, B); the items t < K-1
 * also write present_state (HAS_PRESENT), so one launch gives both outputs.
 *   K            the kernel's taps (compile time: the loop unrolls)
 *   HAS_BIAS, HAS_PAST, HAS_PRESENT   optional inputs / output given
 *   SILU         y = v * sigmoid(v) (activation "silu" or "swish")
 * Storage (storage.h): XH, WH, BH, PH, YH, SH = 1 keep x, the weight, the bias, the past state, y
 * or the present state in half (float16 models, precision="fp16"); the arithmetic is float.
 * OpenCL 1.2, no extension. */
#include "storage.h"
#ifndef WH
#define WH 0
#endif
#ifndef BH
#define BH 0
#endif
#ifndef PH
#define PH 0
#endif
#ifndef SH
#define SH 0
#endif
#ifndef K
#error "K (taps) must be defined"
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_PAST
#define HAS_PAST 0
#endif
#ifndef HAS_PRESENT
#define HAS_PRESENT 0
#endif
#ifndef SILU
#define SILU 0
#endif

inline float xp_at(__global const ST_T(XH)* x, __global const ST_T(PH)* past, long xrow, long prow, int p)
{
    if (p >= K - 1)
        return ST_LD(XH, x, xrow + (p - (K - 1)));
#if HAS_PAST
    return ST_LD(PH, past, prow + p);
#else
    return 0.0f;
#endif
}

__kernel void causal_conv(__global const ST_T(XH)* restrict x, __global const ST_T(WH)* restrict w,
                          __global const ST_T(BH)* restrict bias, __global const ST_T(PH)* restrict past,
                          __global ST_T(YH)* restrict y, __global ST_T(SH)* restrict present, const int C,
                          const int L)
{
    const int t = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
    if (c >= C)
        return;
    const long row = (long)b * C + c;
    const long xrow = row * L, prow = row * (K - 1);
    if (t < L) {
        float v = HAS_BIAS ? ST_LD(BH, bias, c) : 0.0f;
#pragma unroll
        for (int j = 0; j < K; ++j)
            v = mad(ST_LD(WH, w, c * K + j), xp_at(x, past, xrow, prow, t + j), v);
#if SILU
        v = v / (1.0f + exp(-v));
#endif
        ST_ST(YH, y, xrow + t, v);
    }
#if HAS_PRESENT
    if (t < K - 1)
        ST_ST(SH, present, prow + t, xp_at(x, past, xrow, prow, L + t));
#endif
}
