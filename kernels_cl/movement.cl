/* Data movement: one strided-copy kernel serves Transpose, Concat, Split, Slice, Expand, Tile
 * and Pad; Gather has its own. Kernels move bits, so T is an unsigned type of the element's
 * size (uchar/ushort/uint/ulong): one program per (element size, rank) whatever the dtype.
 *   T      element storage type
 *   RANK   rank of the (collapsed) iteration space
 *   TI     index type of Gather (int or long)
 * meta (int32): dims[RANK], source strides[RANK], destination strides[RANK], in elements;
 * strides may be negative (Slice with negative steps) or 0 (broadcast).
 */
#ifndef T
#define T uint
#endif
#ifndef RANK
#define RANK 1
#endif
#ifndef TI
#define TI long
#endif
#include "bcast_index.h"

__kernel void strided_copy(__global const T* src, __global T* dst, const int n, const int src_off,
                           const int dst_off, __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int o[2];
    bcast_offsets(i, meta, RANK, 2, o);
    dst[dst_off + o[1]] = src[src_off + o[0]];
}

/* The same by rows of the innermost dim (the row layout of bcast_index.h, ROW_VEC elements of
 * one row per work-item): rowoff holds each row's source and destination start offsets, last
 * the strides along the row. */
__kernel void strided_copy_rows(__global const T* restrict src, __global T* restrict dst, const int inner,
                                const int rows, __global const int* restrict rowoff,
                                __global const int* restrict last) {
    const int j0 = get_global_id(0) * ROW_VEC;
    const int row = get_global_id(1);
    if (j0 >= inner || row >= rows) return;
    const __global T* restrict ps = src + rowoff[2 * row];
    __global T* restrict pd = dst + rowoff[2 * row + 1];
    ROW_LOOP(j0, inner, pd[ROW_STEP(1, j)] = ps[ROW_STEP(0, j)]);
}

/* Contiguous to contiguous, no index math. */
__kernel void copy(__global const T* src, __global T* dst, const int n, const int src_off, const int dst_off) {
    const int i = get_global_id(0);
    if (i < n) dst[dst_off + i] = src[src_off + i];
}

/* dst[i] = value (the value's bits, given as ulong and truncated to T). */
__kernel void fill(__global T* dst, const int n, const ulong value) {
    const int i = get_global_id(0);
    if (i < n) dst[i] = (T)value;
}

/* out[o, j, r] = data[o, idx[j], r] with negative indices wrapped and out-of-range ones clamped
 * (never read outside the buffer, whatever the indices are). */
__kernel void gather(__global const T* data, __global const TI* idx, __global T* out, const int n,
                     const int inner, const int nidx, const int axis_len) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int r = i % inner;
    const int t = i / inner;
    const int j = t % nidx;
    const int o = t / nidx;
    long k = (long)idx[j];
    if (k < 0) k += axis_len;
    k = k < 0 ? 0 : (k >= axis_len ? axis_len - 1 : k);
    out[i] = data[((long)o * axis_len + k) * inner + r];
}

/* The same for rows of inner >= 16 elements: a work-item copies ROW_VEC elements of one gathered
 * row (bcast_index.h ROW_LOOP: vector moves, no division per element; BERT-style's token
 * embedding lookup, 128 rows of 256 floats, 0.08 -> 0.008 ms on pocl). gsize = (ceil(inner / ROW_VEC),
 * nidx, outer), rounded up to the local size. */
__kernel void gather_rows(__global const T* restrict data, __global const TI* restrict idx,
                          __global T* restrict out, const int inner, const int nidx, const int axis_len,
                          const int outer) {
    const int j0 = get_global_id(0) * ROW_VEC;
    const int jj = get_global_id(1);
    const int o = get_global_id(2);
    if (j0 >= inner || jj >= nidx || o >= outer) return;
    long k = (long)idx[jj];
    if (k < 0) k += axis_len;
    k = k < 0 ? 0 : (k >= axis_len ? axis_len - 1 : k);
    const __global T* restrict ps = data + ((long)o * axis_len + k) * inner;
    __global T* restrict pd = out + ((long)o * nidx + jj) * inner;
    ROW_LOOP(j0, inner, pd[j] = ps[j]);
}

/* Pad modes edge (MODE 1), reflect (MODE 2) and wrap (MODE 3): one work-item per output element;
 * meta (int32): out dims[RANK], in dims[RANK], in strides[RANK], begin pads[RANK]. */
#ifdef MODE
__kernel void pad_index(__global const T* src, __global T* dst, const int n, __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i;
    long so = 0;
    for (int d = RANK - 1; d >= 0; --d) {
        const int od = meta[d];
        const int q = rem / od;
        int c = rem - q * od - meta[3 * RANK + d];
        rem = q;
        const int len = meta[RANK + d];
#if MODE == 1
        c = clamp(c, 0, len - 1);
#elif MODE == 2
        if (len == 1) {
            c = 0;
        } else {
            const int period = 2 * (len - 1);
            c = c % period;
            if (c < 0) c += period;
            if (c >= len) c = period - c;
        }
#else
        c = c % len;
        if (c < 0) c += len;
#endif
        so += (long)c * meta[2 * RANK + d];
    }
    dst[i] = src[so];
}
#endif

/* A batched 2-D transpose of 4-byte elements: dst[z][a][b] = src[z][b][a] (src contiguous along
 * a, dst along b; NCHW <-> NHWC, the last two axes swapped): 16 x 16 tiles through a private
 * tile, vector loads and stores on both sides (strided_copy_rows reads one side element by
 * element: NCHW -> NHWC of 64x112x112, pocl AVX-512, 0.26 ms, onnxruntime 0.09).
 * gsize = (ceil(A / 16), ceil(B / 16), Z). */
typedef uint16 tt_v16u __attribute__((aligned(4)));
__kernel void transpose_tiles(__global const uint* restrict src, __global uint* restrict dst, const int A,
                              const int B, const int s_b, const int t_a, const int s_z, const int t_z,
                              const int src_off, const int dst_off) {
    const int a0 = get_global_id(0) * 16;
    const int b0 = get_global_id(1) * 16;
    const int z = get_global_id(2);
    if (a0 >= A || b0 >= B) return;
    const __global uint* sp = src + src_off + (long)z * s_z;
    __global uint* dp = dst + dst_off + (long)z * t_z;
    const int na = min(16, A - a0), nb = min(16, B - b0);
    if (na < 16 || nb < 16) {
        for (int a = 0; a < na; ++a)
            for (int b = 0; b < nb; ++b)
                dp[(long)(a0 + a) * t_a + b0 + b] = sp[(long)(b0 + b) * s_b + a0 + a];
        return;
    }
    uint tile[16 * 16] __attribute__((aligned(64)));
#pragma unroll
    for (int b = 0; b < 16; ++b)
        *(uint16*)(tile + 16 * b) = *(const __global tt_v16u*)(sp + (long)(b0 + b) * s_b + a0);
    uint row[16] __attribute__((aligned(64)));
#pragma unroll
    for (int a = 0; a < 16; ++a) {
#pragma unroll
        for (int b = 0; b < 16; ++b)
            row[b] = tile[16 * b + a];
        *(__global tt_v16u*)(dp + (long)(a0 + a) * t_a + b0) = *(const uint16*)row;
    }
}
