/* LpPool: one work-item per output element, 1-3 spatial dims; padded taps contribute 0.
 *   SD  spatial dims
 * geo (int32): in[SD], out[SD], kernel[SD], stride[SD], dilation[SD], pad_begin[SD]
 */
#ifndef SD
#define SD 2
#endif
#include "window_index.h"

__kernel void lppool(__global const float* x, __global float* y, const int n, __global const int* restrict geo,
                     const float p) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int o[SD], isz, ksz;
    const int rem = window_position(i, geo, o, &isz, &ksz);
    __global const float* xp = x + (long)rem * isz;
    float acc = 0.0f;
    for (int t = 0; t < ksz; ++t) {
        int tr = t;
        long off = 0;
        int inside = 1;
        int stride = 1;
        for (int k = SD - 1; k >= 0; --k) {
            const int kk = tr % geo[2 * SD + k];
            tr /= geo[2 * SD + k];
            const int pos = o[k] * geo[3 * SD + k] + kk * geo[4 * SD + k] - geo[5 * SD + k];
            if (pos < 0 || pos >= geo[k]) inside = 0;
            off += (long)pos * stride;
            stride *= geo[k];
        }
        if (inside) {
            const float v = fabs(xp[off]);
            acc += p == 2.0f ? v * v : (p == 1.0f ? v : pow(v, p));
        }
    }
    y[i] = p == 2.0f ? sqrt(acc) : (p == 1.0f ? acc : pow(acc, 1.0f / p));
}
