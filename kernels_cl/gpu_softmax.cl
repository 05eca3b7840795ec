/* Softmax / LogSoftmax for the GPU family (lower/gpu_softmax.py): the work of one row split over
 * work-items, its three phases (the row's max, the sum of exp(x - max), the write) in one kernel
 * with local-memory trees between them, where softmax.cl gives a row to one work-item (the CPU
 * family's layout). OpenCL 1.2.
 *
 *   softmax_rows  rows of `len` contiguous elements (the last axis, or opset < 13's flattened
 *                 tail): a segment of `lr` neighbouring work-items per row (coalesced), LS / lr
 *                 rows per group. gsize (groups * LS), lsize (LS).
 *   softmax_cols  rows of `len` elements `inner` apart (an inner axis, e.g. the channels of
 *                 [N, C, H, W]): local dimension 0 takes neighbouring rows (coalesced), dimension 1
 *                 splits each row. gsize (outer * ceil(inner / lx) * lx, ly), lsize (lx, ly).
 *   LS            work-items per group (a power of two): the local array's size
 *   LOG_SOFTMAX   write x - max - log(sum) instead of exp(x - max) / sum
 * The max skips NaN (fmax) as softmax.cl's does; a NaN element still makes its row NaN through
 * the sum. Every work-item reaches every barrier.
 *   XH, YH        1: x / y stored as half (kernels_cl/storage.h; max, sum and exp in float)
 */
#ifndef LS
#define LS 256
#endif
#include "storage.h"
#define XT ST_T(XH)
#define YT ST_T(YH)
#define X_AT(k) ST_LD(XH, p, (k) * st)

/* buf[idx] combined with its `width` (a power of two) partners `step` apart, lane = its position
 * among them; afterwards buf[idx - lane * step] holds the max (is_max) or the sum. */
inline void sm_tree(__local float* buf, const int idx, const int lane, const int width, const int step,
                    const int is_max) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = width >> 1; s > 0; s >>= 1) {
        if (lane < s)
            buf[idx] = is_max ? fmax(buf[idx], buf[idx + s * step]) : buf[idx] + buf[idx + s * step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The three phases over p[k * st] for k = first, first + stride, ... < len: this work-item's
 * share, reduced across its `width` partners through buf (head: where the result lands). */
inline void sm_row(__global const XT* p, __global YT* q, const int live, const int len, const long st,
                   const int first, const int stride, __local float* buf, const int idx, const int lane,
                   const int width, const int step, const int head) {
    float m = -INFINITY;
    if (live)
        for (int k = first; k < len; k += stride) m = fmax(m, X_AT(k));
    buf[idx] = m;
    sm_tree(buf, idx, lane, width, step, 1);
    m = buf[head];
    barrier(CLK_LOCAL_MEM_FENCE);  /* every item has read the max before buf is reused */
    float s = 0.0f;
    if (live)
        for (int k = first; k < len; k += stride) s += exp(X_AT(k) - m);
    buf[idx] = s;
    sm_tree(buf, idx, lane, width, step, 0);
    s = buf[head];
    if (!live)
        return;
#ifdef LOG_SOFTMAX
    const float ls = m + log(s);
    for (int k = first; k < len; k += stride) ST_ST(YH, q, k * st, X_AT(k) - ls);
#else
    const float inv = 1.0f / s;
    for (int k = first; k < len; k += stride) ST_ST(YH, q, k * st, exp(X_AT(k) - m) * inv);
#endif
}

__kernel void softmax_rows(__global const XT* restrict x, __global YT* restrict y, const int rows,
                           const int len, const int lr) {
    __local float buf[LS];
    const int lid = get_local_id(0);
    const int seg = lid / lr;
    const int lane = lid - seg * lr;
    const int row = get_group_id(0) * (LS / lr) + seg;
    const int live = row < rows;
    const long base = live ? (long)row * len : 0;
    sm_row(x + base, y + base, live, len, 1, lane, lr, buf, lid, lane, lr, 1, seg * lr);
}

__kernel void softmax_cols(__global const XT* restrict x, __global YT* restrict y, const int len,
                           const int inner) {
    __local float buf[LS];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int wx = get_local_size(0), wy = get_local_size(1);
    const int blocks = (inner + wx - 1) / wx;  /* column blocks per outer index: all in dimension 0 */
    const int o = get_group_id(0) / blocks;
    const int j = (get_group_id(0) - o * blocks) * wx + lx;
    const int live = j < inner;
    const long base = live ? (long)o * len * inner + j : 0;
    sm_row(x + base, y + base, live, len, inner, ly, wy, buf, ly * wx + lx, ly, wy, wx, lx);
}
