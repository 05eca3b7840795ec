/* ConvTranspose, gather form: one work-item per output element (n, oc, spatial) sums
 * x[n, ic, i] * w[ic, m, k] over the group's input channels and the taps k with
 * o = i * stride - pad + k * dilation, 1-3 spatial dims.
 *   SD spatial dims; HAS_BIAS
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
        for (int c = 0; c < cg; ++c) {
            const int ic = g * cg + c;
            acc += x[((long)b * C + ic) * isz + ioff] * w[((long)ic * mg + m) * ksz + t];
        }
    }
    y[i] = acc;
}
