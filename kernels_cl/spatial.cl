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

/* One work-item per element: along the time axis, the first seq_lens[b] steps of batch entry b
 * are read in reverse order, the rest copied. tstride/bstride: element strides of the axes. */
__kernel void reverse_sequence(__global const T* x, __global const TI* seq_lens, __global T* y, const int n,
                               const int tlen, const int tstride, const int blen, const int bstride) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int t = (i / tstride) % tlen;
    const int b = (i / bstride) % blen;
    const int len = (int)clamp(seq_lens[b], (TI)0, (TI)tlen);
    const int src = t < len ? i + (len - 1 - 2 * t) * tstride : i;
    y[i] = x[src];
}

/* MaxUnpool: x[i] goes to flat position idx[i] of the inferred output shape, placed in the
 * output (which may be larger: output_shape) by its coordinates. meta (int32): inferred
 * dims[RANK], output strides[RANK]. The output was zero-filled before; indices outside the
 * inferred shape are ignored. */
__kernel void max_unpool(__global const T* x, __global const TI* idx, __global T* y, const int n,
                         __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    long rem = (long)idx[i];
    long total = 1;
    for (int d = 0; d < RANK; ++d) total *= meta[d];
    if (rem < 0 || rem >= total) return;
    long off = 0;
    for (int d = RANK - 1; d >= 0; --d) {
        const int od = meta[d];
        off += (rem % od) * meta[RANK + d];
        rem /= od;
    }
    y[off] = x[i];
}

/* AffineGrid: one work-item per output point (n, [d,] h, w); grid = theta[n] @ (x, y, [z,] 1)
 * with x along W, y along H, z along D, normalised to [-1, 1] (pixel centres unless ALIGN).
 * dims = [N, (D,) H, W]. */
inline F ag_coord(int i, int s) {
#ifdef ALIGN
    return s > 1 ? (F)(-1) + (F)(2 * i) / (F)(s - 1) : (F)(-1);
#else
    return (F)(-1) + (F)(2 * i + 1) / (F)s;
#endif
}

__kernel void affine_grid(__global const F* theta, __global F* grid, const int n_pts,
                          __global const int* restrict dims) {
    const int p = get_global_id(0);
    if (p >= n_pts) return;
    int rem = p;
    F base[SD + 1];
    for (int k = 0; k < SD; ++k) {  /* k = 0: W (x), 1: H (y), 2: D (z) */
        const int s = dims[SD - k];
        base[k] = ag_coord(rem % s, s);
        rem /= s;
    }
    base[SD] = (F)1;
    const int n = rem;
    __global const F* th = theta + (long)n * SD * (SD + 1);
    __global F* g = grid + (long)p * SD;
    for (int r = 0; r < SD; ++r) {
        F acc = (F)0;
        for (int c = 0; c <= SD; ++c) acc += th[r * (SD + 1) + c] * base[c];
        g[r] = acc;
    }
}
