/* Col2Im (N-D): one work-item per image element gathers the column entries that land on it, so
 * no two work-items write one element (no atomics) and the sum order is fixed.
 *   T   float type;  ND  spatial dims
 * meta (int32): image[ND], block[ND], dilations[ND], begin pads[ND], strides[ND], columns[ND]
 * (the number of blocks along each dim); col is [planes, prod(block), prod(columns)]. */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef ND
#define ND 2
#endif

__kernel void col2im(__global const T* col, __global T* im, const int n_out, const int K, const int L,
                     __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n_out) return;
    int pos[ND];
    int rem = i;
    for (int d = ND - 1; d >= 0; --d) {
        pos[d] = rem % meta[d];
        rem /= meta[d];
    }
    __global const T* base = col + (long)rem * K * L;
    T acc = (T)0;
    for (int kf = 0; kf < K; ++kf) {
        int kr = kf, cf = 0, stride_c = 1, ok = 1;
        for (int d = ND - 1; d >= 0; --d) {
            const int kk = kr % meta[ND + d];
            kr /= meta[ND + d];
            const int t = pos[d] + meta[3 * ND + d] - kk * meta[2 * ND + d];
            const int s = meta[4 * ND + d];
            const int c = t / s;
            if (t < 0 || c * s != t || c >= meta[5 * ND + d]) {
                ok = 0;
                break;
            }
            cf += c * stride_c;
            stride_c *= meta[5 * ND + d];
        }
        if (ok) acc += base[(long)kf * L + cf];
    }
    im[i] = acc;
}
