/* Tensors generated on the device: Range, EyeLike, Trilu, OneHot.
 *   T    element type   TI  index type (OneHot)   USE_FP64  enables double
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef TI
#define TI long
#endif

/* y[i] = start + i * delta (start, delta read from one-element buffers). */
__kernel void range(__global const T* start, __global const T* delta, __global T* y, const int n) {
    const int i = get_global_id(0);
    if (i < n) y[i] = (T)(start[0] + (T)i * delta[0]);
}

/* 2-D identity with diagonal offset k, as a batch of (rows, cols) matrices for Trilu masks. */
__kernel void eye(__global T* y, const int n, const int rows, const int cols, const int k) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % cols;
    const int r = (i / cols) % rows;
    y[i] = (T)(c - r == k ? 1 : 0);
}

/* Trilu over a batch of (rows, cols) matrices: keep upper (j - i >= k) or lower (j - i <= k). */
__kernel void trilu(__global const T* x, __global T* y, const int n, const int rows, const int cols, const int k,
                    const int upper) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = i % cols;
    const int r = (i / cols) % rows;
    const int keep = upper ? (c - r >= k) : (c - r <= k);
    y[i] = keep ? x[i] : (T)0;
}

/* OneHot: out (outer, depth, inner); indices (outer, inner); values = [off, on]. */
__kernel void onehot(__global const TI* idx, __global const T* values, __global T* y, const int n,
                     const int depth, const int inner) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int in = i % inner;
    const int d = (i / inner) % depth;
    const int o = i / (inner * depth);
    long k = (long)idx[(long)o * inner + in];
    if (k < 0) k += depth;
    y[i] = (k == d) ? values[1] : values[0];
}
