/* ReverseSequence, MaxUnpool's scatter and AffineGrid (lower/spatial.py).
 *   T      element storage type (reverse_sequence, max_unpool: they move bits)
 *   TI     index type (int or long) of sequence_lens / MaxUnpool's indices
 *   RANK   rank of MaxUnpool's tensors
 *   SD     AffineGrid's spatial dims (2 or 3);  ALIGN  align_corners;  F  AffineGrid's float type
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T uint
#endif
#ifndef TI
#define TI long
#endif
#ifndef F
#define F float
#endif
#ifndef RANK
#define RANK 4
#endif
#ifndef SD
#define SD 2
#endif

/* gsize = (inner, batch, time): work-item (k, b, t) writes y[t * tstride + b * bstride + k], read
 * from step len - 1 - t of its batch entry when t < len = seq_lens[b], else from step t (inner:
 * the contiguous elements after both axes; no division per element). */
__kernel void reverse_sequence(__global const T* x, __global const TI* seq_lens, __global T* y, const int inner,
                               const int blen, const int tlen, const int tstride, const int bstride) {
    const int k = get_global_id(0), b = get_global_id(1), t = get_global_id(2);
    if (k >= inner || b >= blen || t >= tlen) return;
    const int len = (int)clamp(seq_lens[b], (TI)0, (TI)tlen);
    const int ts = t < len ? len - 1 - t : t;
    y[t * tstride + b * bstride + k] = x[ts * tstride + b * bstride + k];
}

/* MaxUnpool: x[i] goes to flat position idx[i] of the inferred output shape, placed in the
 * output (which may be larger: output_shape) by its coordinates. meta (int32): inferred
 * dims[RANK], output strides[RANK]. The output was zero-filled before; indices outside the
 * inferred shape are ignored. */
__kernel void max_unpool(__global const T* x, __global const TI* idx, __global T* y, const int n, const int total,
                         __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const TI v = idx[i];
    if (v < 0 || v >= (TI)total) return;
#ifdef SAME_SHAPE
    y[(int)v] = x[i];  /* the output is the inferred shape: the index is the offset */
#else
    int rem = (int)v;  /* int arithmetic: the tensors are below 2^31 elements (lowering checks) */
    int off = 0;
    for (int d = RANK - 1; d >= 0; --d) {
        const int od = meta[d];
        off += (rem % od) * meta[RANK + d];
        rem /= od;
    }
    y[off] = x[i];
#endif
}

/* AffineGrid: gsize = (W, H, N * D): work-item (w, h, n * D + d) writes grid point (n, [d,] h, w):
 * theta[n] @ (x, y, [z,] 1) with x along W, y along H, z along D, each start + index * step
 * (normalised to [-1, 1]: pixel centres, or the corners with align_corners; computed on the host).
 * steps = [x start, x step, y start, y step, z start, z step]. */
__kernel void affine_grid(__global const F* theta, __global F* grid, const int N, const int D, const int H,
                          const int W, __global const F* restrict steps) {
    const int w = get_global_id(0), h = get_global_id(1), nd = get_global_id(2);
    if (w >= W || h >= H || nd >= N * D) return;
    F base[4];
    base[0] = steps[0] + w * steps[1];
    base[1] = steps[2] + h * steps[3];
#if SD == 3
    const int n = nd / D;
    base[2] = steps[4] + (nd - n * D) * steps[5];
#else
    const int n = nd;
#endif
    base[SD] = (F)1;
    __global const F* th = theta + (long)n * SD * (SD + 1);
    __global F* g = grid + (((long)nd * H + h) * W + w) * SD;
    for (int r = 0; r < SD; ++r) {
        F acc = (F)0;
        for (int c = 0; c <= SD; ++c) acc += th[r * (SD + 1) + c] * base[c];
        g[r] = acc;
    }
}
