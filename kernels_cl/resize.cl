/* Resize, one launch per resized axis (separable): x seen as (outer, L_in, inner) -> (outer, L_out, inner);
 * each output coordinate j reads K taps idx[j, k] (clamped on the host) with weights w[j, k], or the
 * extrapolation value where ext[j] (tf_crop_and_resize).
 *   T  float type (float or double) */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif

__kernel void resize_axis(__global const T* x, __global T* y, const int n, const int L_in, const int L_out,
                          const int inner, const int K, __global const int* restrict idx,
                          __global const T* restrict w, __global const uchar* restrict ext, const T ev) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int r = i % inner;
    const int t = i / inner;
    const int j = t % L_out;
    const int o = t / L_out;
    if (ext[j]) {
        y[i] = ev;
        return;
    }
    __global const T* xr = x + (long)o * L_in * inner + r;
    T acc = 0;
    for (int k = 0; k < K; ++k) acc += w[j * K + k] * xr[(long)idx[j * K + k] * inner];
    y[i] = acc;
}
