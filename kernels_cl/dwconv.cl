/* Direct depthwise 2-D convolution (groups == input channels; 1-D convs pass H = KH = 1)
 * with the same fused epilogue as gemm.cl: Y = ACT(conv + bias + Z).
 *
 * Output channel oc reads input channel oc / MULT (MULT = Cout / Cin, the depth multiplier).
 * One work-item per output pixel; consecutive work-items walk a row, so pocl can
 * vectorise across them. gsize = (OW, OH, images*Cout).
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_RES
#define HAS_RES 0
#endif
#ifndef ACT
#define ACT 0
#endif

/* 0 none, 1 Relu, 2 Clip(a, b), 3 LeakyRelu(a), 4 Sigmoid, 5 HardSigmoid(a, b), 6 Tanh */
inline float act_s(float v, float a, float b) {
#if ACT == 1
    return v > 0.0f ? v : 0.0f;
#elif ACT == 2
    v = v < a ? a : v;
    return v > b ? b : v;
#elif ACT == 3
    return v >= 0.0f ? v : v * a;
#elif ACT == 4
    return 1.0f / (1.0f + exp(-v));
#elif ACT == 5
    v = v * a + b;
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
#elif ACT == 6
    return tanh(v);
#else
    return v;
#endif
}

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
                     float act_a, float act_b)
{
    const int ow = get_global_id(0);
    const int oh = get_global_id(1);
    const int z = get_global_id(2);
    if (ow >= OW || oh >= OH)
        return;
    const int img = z / Cout;
    const int oc = z - img * Cout;
    const int ci = oc / mult;
    const __global float* x = X + (img * Cin + ci) * H * W;
    const __global float* w = Wt + oc * KH * KW;
    float acc = 0.0f;
    const int ih0 = oh * sh - ph;
    const int iw0 = ow * sw - pw;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = ih0 + kh * dh;
        if (ih < 0 || ih >= H)
            continue;
        const __global float* xr = x + ih * W;
        const __global float* wr = w + kh * KW;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = iw0 + kw * dw;
            const float xv = (iw >= 0 && iw < W) ? xr[iw] : 0.0f;
            acc += xv * wr[kw];
        }
    }
#if HAS_BIAS
    acc += bias[oc];
#endif
    const int o = (z * OH + oh) * OW + ow;
#if HAS_RES
    acc += Z[o];
#endif
    Y[o] = act_s(acc, act_a, act_b);
}
