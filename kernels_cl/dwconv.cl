/* Direct depthwise 2-D convolution (groups == input channels; 1-D convs pass H = KH = 1)
 * with the same fused epilogue as gemm.cl: Y = ACT(conv + bias + Z).
 *
 * Output channel oc reads input channel oc / MULT (MULT = Cout / Cin, the depth multiplier).
 * Each work-item computes DW_T consecutive outputs of one row (taps in registers, a
 * branch-free path for interior segments). gsize = (ceil(OW / DW_T), OH, images*Cout).
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_RES
#define HAS_RES 0
#endif
#include "activation.h"
DEFINE_ACT(act_s, float)

#ifndef DW_T
#define DW_T 16
#endif

__kernel void dwconv(__global const float* restrict X, __global const float* restrict Wt,
#if HAS_BIAS
                     __global const float* restrict bias,
#endif
#if HAS_RES
                     __global const float* restrict Z,
#endif
                     __global float* restrict Y,
                     int Cin, int H, int W, int Cout, int OH, int OW, int KH, int KW,
                     int sh, int sw, int ph, int pw, int dh, int dw, int mult,
                     float act_a, float act_b, float act_c)
{
    const int ow0 = get_global_id(0) * DW_T;
    const int oh = get_global_id(1);
    const int z = get_global_id(2);
    if (ow0 >= OW || oh >= OH)
        return;
    const int img = z / Cout;
    const int oc = z - img * Cout;
    const int ci = oc / mult;
    const __global float* x = X + (img * Cin + ci) * H * W;
    const __global float* w = Wt + oc * KH * KW;
    float acc[DW_T];
#pragma unroll
    for (int j = 0; j < DW_T; ++j)
        acc[j] = 0.0f;
    const int ih0 = oh * sh - ph;
    const int iw0 = ow0 * sw - pw;
    /* Interior segments (every tap in bounds) take the branch-free path. */
    const bool inner = iw0 >= 0 && iw0 + (DW_T - 1) * sw + (KW - 1) * dw < W && ow0 + DW_T <= OW;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = ih0 + kh * dh;
        if (ih < 0 || ih >= H)
            continue;
        const __global float* xr = x + ih * W;
        for (int kw = 0; kw < KW; ++kw) {
            const float wv = w[kh * KW + kw];
            const int base = iw0 + kw * dw;
            if (inner) {
#pragma unroll
                for (int j = 0; j < DW_T; ++j)
                    acc[j] += xr[base + j * sw] * wv;
            } else {
#pragma unroll
                for (int j = 0; j < DW_T; ++j) {
                    const int iw = base + j * sw;
                    if (iw >= 0 && iw < W)
                        acc[j] += xr[iw] * wv;
                }
            }
        }
    }
    const int nj = min(DW_T, OW - ow0);
    const int o = (z * OH + oh) * OW + ow0;
    for (int j = 0; j < nj; ++j) {
        float v = acc[j];
#if HAS_BIAS
        v += bias[oc];
#endif
#if HAS_RES
        v += Z[o + j];
#endif
        Y[o + j] = act_s(v, act_a, act_b, act_c);
    }
}
