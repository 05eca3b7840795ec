/* ConvTranspose, gather form: one work-item per output element (n, oc, spatial) sums
 * x[n, ic, i] * w[ic, m, k] over the group's input channels and the taps k with
 * o = i * stride - pad + k * dilation, 1-3 spatial dims.
 *   SD spatial dims; HAS_BIAS
 *   COLS  x holds the products already summed over the input channels (a GEMM's output,
 *         cols[n * group + g][m][k][i] = sum_c w[c, m, k] * x[n, c, i]; w is unused): the
 *         kernel only gathers each output's taps (col2im), K reads instead of K * C/group
 * geo (int32): in[SD], out[SD], kernel[SD], stride[SD], dilation[SD], pad_begin[SD]
 */
#ifndef SD
#define SD 2
#endif
#include "window_index.h"

__kernel void conv_transpose(__global const float* x, __global const float* w,
#ifdef HAS_BIAS
                             __global const float* bias,
#endif
                             __global float* y, const int n, const int C, const int M, const int group,
                             __global const int* restrict geo) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int o[SD], isz, ksz;
    const int rem = window_position(i, geo, o, &isz, &ksz);
    const int oc = rem % M;
    const int b = rem / M;
    const int mg = M / group, cg = C / group;
    const int g = oc / mg, m = oc - g * mg;
#ifdef HAS_BIAS
    float acc = bias[oc];
#else
    float acc = 0.0f;
#endif
    for (int t = 0; t < ksz; ++t) {
        int tr = t;
        long ioff = 0;
        int ok = 1, stride = 1;
        for (int k = SD - 1; k >= 0; --k) {
            const int kk = tr % geo[2 * SD + k];
            tr /= geo[2 * SD + k];
            const int num = o[k] + geo[5 * SD + k] - kk * geo[4 * SD + k];
            const int s = geo[3 * SD + k];
            if (num < 0 || num % s != 0 || num / s >= geo[k]) ok = 0;
            ioff += (long)(num / s) * stride;
            stride *= geo[k];
        }
        if (!ok) continue;
#ifdef COLS
        acc += x[((((long)b * group + g) * mg + m) * ksz + t) * isz + ioff];
#else
        for (int c = 0; c < cg; ++c) {
            const int ic = g * cg + c;
            acc += x[((long)b * C + ic) * isz + ioff] * w[((long)ic * mg + m) * ksz + t];
        }
#endif
    }
    y[i] = acc;
}

/* col2im for 2-D ConvTranspose (after the products GEMM): output (ox, oy) of image/channel z sums
 * the cols entries of the taps that reach it. The host tabulates, per output row and per output
 * column, the (tap, input index) pairs that reach it (T <= ceil(K / stride) each, tap -1 for
 * none): no division per element (the generic COLS path above divides per tap and dim). Each
 * work-item writes 16 consecutive outputs of a row.
 * tab (int32): [OH][TY][2] then [OW][TX][2]. gsize = (ceil(OW / 16), OH, images * M), rounded up. */
typedef float8 float8_ct __attribute__((aligned(4)));
typedef float16 float16_ct __attribute__((aligned(4)));
__kernel void col2im_2d(__global const float* restrict cols,
#ifdef HAS_BIAS
                        __global const float* restrict bias,
#endif
                        __global float* restrict y, const int OH, const int OW, const int M, const int group,
                        const int KH, const int KW, const int IH, const int IW, const int TY, const int TX,
                        __global const int* restrict tab) {
    const int ox0 = get_global_id(0) * 16;
    const int oy = get_global_id(1);
    const int z = get_global_id(2);
    if (ox0 >= OW || oy >= OH) return;
    const int b = z / M;
    const int oc = z - b * M;
    const int mg = M / group;
    const int g = oc / mg;
    const int isz = IH * IW;
    const __global float* c = cols + (((long)b * group + g) * mg + (oc - g * mg)) * (long)(KH * KW) * isz;
#ifdef HAS_BIAS
    const float b0 = bias[oc];
#else
    const float b0 = 0.0f;
#endif
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)
        acc[j] = b0;
    const int nj = min(16, OW - ox0);
    const __global int* ty = tab + oy * TY * 2;
    const __global int* tx = tab + OH * TY * 2 + ox0 * TX * 2;
#ifdef CT_S2
    /* kernel = stride = 2 along the row, no padding or dilation (a decoder's 2x upsampling):
     * outputs 2i and 2i+1 take column i of taps 0 and 1, so 16 outputs are two 8-float rows
     * of cols interleaved. */
    if (TY == 1 && ty[0] >= 0 && ox0 + 16 <= 2 * IW) {
        const __global float* c0 = c + (long)ty[0] * KW * isz + ty[1] * IW + ox0 / 2;
        const float8 a = *(const __global float8_ct*)c0;
        const float8 e = *(const __global float8_ct*)(c0 + isz);
        const float16 v = (float16)(a.s0, e.s0, a.s1, e.s1, a.s2, e.s2, a.s3, e.s3,
                                    a.s4, e.s4, a.s5, e.s5, a.s6, e.s6, a.s7, e.s7) + b0;
        *(__global float16_ct*)(y + ((long)z * OH + oy) * OW + ox0) = v;
        return;
    }
#endif
    for (int jy = 0; jy < TY; ++jy) {
        const int ky = ty[2 * jy];
        if (ky < 0) continue;
        const __global float* cr = c + (long)ky * KW * isz + ty[2 * jy + 1] * IW;
        for (int jx = 0; jx < TX; ++jx) {
#pragma unroll 4
            for (int j = 0; j < nj; ++j) {
                const int kx = tx[(j * TX + jx) * 2];
                if (kx >= 0)
                    acc[j] += cr[(long)kx * isz + tx[(j * TX + jx) * 2 + 1]];
            }
        }
    }
    __global float* yr = y + ((long)z * OH + oy) * OW + ox0;
    for (int j = 0; j < nj; ++j)
        yr[j] = acc[j];
}
