/* Index-driven data movement: GatherElements, ScatterElements, GatherND, ScatterND.
 * Kernels move bits (T is an unsigned type of the element's size) except scatter reductions,
 * which compute in TV (the real element type).
 *   T      element storage type;  TV  value type for reductions (REDUCE_ADD/MUL/MAX/MIN)
 *   TI     index type (int or long)
 *   RANK   rank of the index space
 * Out-of-range indices are clamped (never read or write outside the buffers).
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T uint
#endif
#ifndef TV
#define TV T
#endif
#ifndef TI
#define TI long
#endif
#ifndef RANK
#define RANK 1
#endif

inline long wrap(long k, long n) {
    if (k < 0) k += n;
    return k < 0 ? 0 : (k >= n ? n - 1 : k);
}

/* offset in data of element i of the index space (dims meta[0:RANK]), axis coordinate replaced by
 * idx[i]; meta = dims[RANK], data strides[RANK]. */
inline long elem_offset(int i, __global const int* meta, const int axis, const long k) {
    long off = 0;
    int rem = i;
    for (int d = RANK - 1; d >= 0; --d) {
        const int dim = meta[d];
        const int q = rem / dim;
        const int c = rem - q * dim;
        off += (long)(d == axis ? k : c) * meta[RANK + d];
        rem = q;
    }
    return off;
}

__kernel void gather_elements(__global const T* data, __global const TI* idx, __global T* out, const int n,
                              __global const int* restrict meta, const int axis, const int axis_len) {
    const int i = get_global_id(0);
    if (i >= n) return;
    out[i] = data[elem_offset(i, meta, axis, wrap((long)idx[i], axis_len))];
}

#if defined(REDUCE_ADD)
#define RED(a, b) ((a) + (b))
#elif defined(REDUCE_MUL)
#define RED(a, b) ((a) * (b))
#elif defined(REDUCE_MAX)
#define RED(a, b) ((a) > (b) ? (a) : (b))
#elif defined(REDUCE_MIN)
#define RED(a, b) ((a) < (b) ? (a) : (b))
#endif

#ifdef RED
#define STORE(dst, off, v) ((__global TV*)(dst))[off] = RED(((__global TV*)(dst))[off], ((__global const TV*)(v))[j])
#else
#define STORE(dst, off, v) (dst)[off] = (v)[j]
#endif

/* out already holds a copy of data. SERIAL: one work-item applies every update in order
 * (reductions and repeated indices); else one work-item per update. */
__kernel void scatter_elements(__global const TI* idx, __global const T* upd, __global T* out, const int n,
                               __global const int* restrict meta, const int axis, const int axis_len) {
#ifdef SERIAL
    if (get_global_id(0) != 0) return;
    for (int j = 0; j < n; ++j) {
#else
    const int j = get_global_id(0);
    if (j >= n) return;
    {
#endif
        const long off = elem_offset(j, meta, axis, wrap((long)idx[j], axis_len));
        STORE(out, off, upd);
    }
}

/* meta = data dims[K], data strides[K] (of the K indexed dims). Element j of the update space
 * (nupd updates of `inner` elements) goes to sum idx[u, m] * stride[m] + r. */
inline long nd_offset(__global const TI* idx, const int u, __global const int* meta) {
    long off = 0;
    for (int m = 0; m < RANK; ++m) off += wrap((long)idx[(long)u * RANK + m], meta[m]) * meta[RANK + m];
    return off;
}

__kernel void scatter_nd(__global const TI* idx, __global const T* upd, __global T* out, const int n,
                         const int inner, __global const int* restrict meta) {
#ifdef SERIAL
    if (get_global_id(0) != 0) return;
    for (int j = 0; j < n; ++j) {
#else
    const int j = get_global_id(0);
    if (j >= n) return;
    {
#endif
        const int u = j / inner;
        const long off = nd_offset(idx, u, meta) + (j - u * inner);
        STORE(out, off, upd);
    }
}

/* GatherND with batch dims: u indexes indices.shape[:-1], b = u / per_batch; data offset
 * b * batch_stride + nd_offset + r. */
__kernel void gather_nd(__global const T* data, __global const TI* idx, __global T* out, const int n,
                        const int inner, const int per_batch, const long batch_stride,
                        __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int u = i / inner;
    out[i] = data[(long)(u / per_batch) * batch_stride + nd_offset(idx, u, meta) + (i - u * inner)];
}
