/* Softmax / LogSoftmax along one axis: one work-item per row of `len` elements that sit
 * `inner` apart (inner = 1 for the last axis and for the opset < 13 flattened form).
 * Three passes over the row (max, sum of exp, write) keep it numerically safe; one
 * work-item per row is the fast layout on CPU devices and correct on any device.
 *   LOG_SOFTMAX   write x - max - log(sum) instead of exp(x - max) / sum
 */
#include "vmath.h"

/* One row of `len` elements `inner` apart, element by element (also the partial last run of
 * softmax_cols). */
inline void softmax_row(__global const float* xr, __global float* yr, const int len, const long inner) {
    float m = -INFINITY;
    for (int k = 0; k < len; ++k) m = fmax(m, xr[k * inner]);
    float s = 0.0f;
    for (int k = 0; k < len; ++k) s += clg_exp(xr[k * inner] - m);
#ifdef LOG_SOFTMAX
    const float ls = m + clg_log(s);
    for (int k = 0; k < len; ++k) yr[k * inner] = xr[k * inner] - ls;
#else
    const float inv = 1.0f / s;
    for (int k = 0; k < len; ++k) yr[k * inner] = clg_exp(xr[k * inner] - m) * inv;
#endif
}

__kernel void softmax(__global const float* x, __global float* y, const int rows, const int len,
                      const int inner) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    const int o = i / inner;
    const int r = i - o * inner;
    const long base = (long)o * len * inner + r;
    softmax_row(x + base, y + base, len, inner);
}

/* The same along the last axis (inner = 1) with 16-float vectors: contiguous loads, and exp
 * on float16 (one vectorised builtin call per 16 elements where the scalar loop above made
 * pocl call exp per element: 0.42 ms for BERT's 512 rows of 128). Lanes are reduced at the
 * end; the tail of a row beyond a multiple of 16 is scalar. */
typedef float16 float16_u __attribute__((aligned(4)));

__kernel void softmax_last(__global const float* x, __global float* y, const int rows, const int len) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    __global const float* xr = x + (long)i * len;
    __global float* yr = y + (long)i * len;
    const int nv = len / 16;
    float16 mv = (float16)(-INFINITY);
    for (int k = 0; k < nv; ++k) {
        const float16 v = *(const __global float16_u*)(xr + 16 * k);
        mv = v > mv ? v : mv;  /* like fmax: a NaN element is skipped */
    }
    float m = -INFINITY;
    const float* ml = (const float*)&mv;
    for (int c = 0; c < 16; ++c) m = ml[c] > m ? ml[c] : m;
    for (int k = 16 * nv; k < len; ++k) m = xr[k] > m ? xr[k] : m;
    float16 sv = (float16)0.0f;
    float s = 0.0f;
#ifdef LOG_SOFTMAX
    for (int k = 0; k < nv; ++k)
        sv += clg_exp(*(const __global float16_u*)(xr + 16 * k) - m);
    for (int k = 16 * nv; k < len; ++k) s += clg_exp(xr[k] - m);
#else
    /* the exponentials go to y on the way (one exp per element; the row is still in L1 for
     * the scaling pass: [12, 128, 128] 0.096 -> 0.065 ms on pocl) */
    for (int k = 0; k < nv; ++k) {
        const float16 e = clg_exp(*(const __global float16_u*)(xr + 16 * k) - m);
        *(__global float16_u*)(yr + 16 * k) = e;
        sv += e;
    }
    for (int k = 16 * nv; k < len; ++k) {
        const float e = clg_exp(xr[k] - m);
        yr[k] = e;
        s += e;
    }
#endif
    const float* sl = (const float*)&sv;
    for (int c = 0; c < 16; ++c) s += sl[c];
#ifdef LOG_SOFTMAX
    const float ls = m + clg_log(s);
    for (int k = 0; k < nv; ++k)
        *(__global float16_u*)(yr + 16 * k) = *(const __global float16_u*)(xr + 16 * k) - ls;
    for (int k = 16 * nv; k < len; ++k) yr[k] = xr[k] - ls;
#else
    const float inv = 1.0f / s;
    for (int k = 0; k < nv; ++k)
        *(__global float16_u*)(yr + 16 * k) = *(__global float16_u*)(yr + 16 * k) * inv;
    for (int k = 16 * nv; k < len; ++k) yr[k] *= inv;
#endif
}

/* The same along an inner axis (inner >= 16: rows `inner` apart, e.g. over the channels of
 * [N, C, H, W]): 16 adjacent rows per work-item as float16 vectors, one per k (contiguous),
 * so exp runs on vectors (pocl, AVX-512, [1, 1000, 49] over axis 1: 0.49 ms with the scalar
 * kernel above, 0.03 ms this way). A partial last run of rows goes element by element.
 * gsize = (ceil(inner / 16), outer). */
__kernel void softmax_cols(__global const float* restrict x, __global float* restrict y, const int len,
                           const int inner) {
    const int r0 = get_global_id(0) * 16;
    const int o = get_global_id(1);
    if (r0 >= inner) return;
    const long base = (long)o * len * inner + r0;
    __global const float* xr = x + base;
    __global float* yr = y + base;
    if (r0 + 16 <= inner) {
        float16 m = (float16)(-INFINITY);
        for (int k = 0; k < len; ++k) {
            const float16 v = *(const __global float16_u*)(xr + (long)k * inner);
            m = v > m ? v : m;  /* like fmax: a NaN element is skipped */
        }
        float16 s = (float16)0.0f;
#ifdef LOG_SOFTMAX
        for (int k = 0; k < len; ++k)
            s += clg_exp(*(const __global float16_u*)(xr + (long)k * inner) - m);
        const float16 ls = m + clg_log(s);
        for (int k = 0; k < len; ++k)
            *(__global float16_u*)(yr + (long)k * inner) = *(const __global float16_u*)(xr + (long)k * inner) - ls;
#else
        for (int k = 0; k < len; ++k) {  /* the exponentials stored on the way, as softmax_last */
            const float16 e = clg_exp(*(const __global float16_u*)(xr + (long)k * inner) - m);
            *(__global float16_u*)(yr + (long)k * inner) = e;
            s += e;
        }
        const float16 inv = 1.0f / s;
        for (int k = 0; k < len; ++k)
            *(__global float16_u*)(yr + (long)k * inner) = *(__global float16_u*)(yr + (long)k * inner) * inv;
#endif
        return;
    }
    for (int j = 0; j < inner - r0; ++j)
        softmax_row(xr + j, yr + j, len, inner);
}
