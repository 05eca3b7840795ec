/* Softmax / LogSoftmax along one axis: one work-item per row of `len` elements that sit
 * `inner` apart (inner = 1 for the last axis and for the opset < 13 flattened form).
 * Three passes over the row (max, sum of exp, write) keep it numerically safe; one
 * work-item per row is the fast layout on CPU devices and correct on any device.
 *   LOG_SOFTMAX   write x - max - log(sum) instead of exp(x - max) / sum
 *   XH, YH        1: x / y stored as half (storage.h); max, sum and exp are float either way,
 *                 and a half y is written once from recomputed exponentials (no rounding of
 *                 the unscaled ones)
 */
#include "vmath.h"
#include "storage.h"
#define XT ST_T(XH)
#define YT ST_T(YH)

/* One row of `len` elements `inner` apart, element by element (also the partial last run of
 * softmax_cols). */
inline void softmax_row(__global const XT* xr, __global YT* yr, const int len, const long inner) {
    float m = -INFINITY;
    for (int k = 0; k < len; ++k) m = fmax(m, ST_LD(XH, xr, k * inner));
    float s = 0.0f;
    for (int k = 0; k < len; ++k) s += clg_exp(ST_LD(XH, xr, k * inner) - m);
#ifdef LOG_SOFTMAX
    const float ls = m + clg_log(s);
    for (int k = 0; k < len; ++k) ST_ST(YH, yr, k * inner, ST_LD(XH, xr, k * inner) - ls);
#else
    const float inv = 1.0f / s;
    for (int k = 0; k < len; ++k) ST_ST(YH, yr, k * inner, clg_exp(ST_LD(XH, xr, k * inner) - m) * inv);
#endif
}

__kernel void softmax(__global const XT* x, __global YT* y, const int rows, const int len,
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

#define XV(p) ST_LDV(XH, 16, p)
#ifdef BIAS
/* BIAS (clglow.BiasSoftmax: Softmax(x + bias), passes/fuse_softmax.py): a float32 bias of
 * `len` elements per row broadcast over x's leading axes: bmeta = [nd, dims[nd], strides[nd]]
 * (x's leading dims, the bias's element strides for them, 0 where broadcast) */
#define XR(k) (XV(xr + 16 * (k)) + *(const __global float16_u*)(br + 16 * (k)))
#define XS(k) (ST_LD(XH, xr, k) + br[k])
#else
#define XR(k) XV(xr + 16 * (k))
#define XS(k) ST_LD(XH, xr, k)
#endif
__kernel void softmax_last(__global const XT* x, __global YT* y, const int rows, const int len
#ifdef BIAS
                           , __global const float* bias, __global const int* restrict bmeta
#endif
                           ) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    __global const XT* xr = x + (long)i * len;
    __global YT* yr = y + (long)i * len;
#ifdef BIAS
    long bo = 0;
    for (int a = bmeta[0] - 1, rem = i; a >= 0; --a) {
        const int d = bmeta[1 + a];
        bo += (long)(rem % d) * bmeta[1 + bmeta[0] + a];
        rem /= d;
    }
    __global const float* br = bias + bo;
#endif
    const int nv = len / 16;
    float16 mv = (float16)(-INFINITY);
    for (int k = 0; k < nv; ++k) {
        const float16 v = XR(k);
        mv = v > mv ? v : mv;  /* like fmax: a NaN element is skipped */
    }
    float m = -INFINITY;
    const float* ml = (const float*)&mv;
    for (int c = 0; c < 16; ++c) m = ml[c] > m ? ml[c] : m;
    for (int k = 16 * nv; k < len; ++k) m = fmax(m, XS(k));
    float16 sv = (float16)0.0f;
    float s = 0.0f;
#if defined(LOG_SOFTMAX) || YH
    for (int k = 0; k < nv; ++k)
        sv += clg_exp(XR(k) - m);
    for (int k = 16 * nv; k < len; ++k) s += clg_exp(XS(k) - m);
#else
    /* the exponentials go to y on the way (one exp per element; the row is still in L1 for
     * the scaling pass: [12, 128, 128] 0.096 -> 0.065 ms on pocl) */
    for (int k = 0; k < nv; ++k) {
        const float16 e = clg_exp(XR(k) - m);
        *(__global float16_u*)(yr + 16 * k) = e;
        sv += e;
    }
    for (int k = 16 * nv; k < len; ++k) {
        const float e = clg_exp(XS(k) - m);
        yr[k] = e;
        s += e;
    }
#endif
    const float* sl = (const float*)&sv;
    for (int c = 0; c < 16; ++c) s += sl[c];
#ifdef LOG_SOFTMAX
    const float ls = m + clg_log(s);
    for (int k = 0; k < nv; ++k)
        ST_STV(YH, 16, yr + 16 * k, XR(k) - ls);
    for (int k = 16 * nv; k < len; ++k) ST_ST(YH, yr, k, XS(k) - ls);
#elif YH
    const float inv = 1.0f / s;
    for (int k = 0; k < nv; ++k)
        ST_STV(YH, 16, yr + 16 * k, clg_exp(XR(k) - m) * inv);
    for (int k = 16 * nv; k < len; ++k) ST_ST(YH, yr, k, clg_exp(XS(k) - m) * inv);
#else
    const float inv = 1.0f / s;
    for (int k = 0; k < nv; ++k)
        *(__global float16_u*)(yr + 16 * k) = *(__global float16_u*)(yr + 16 * k) * inv;
    for (int k = 16 * nv; k < len; ++k) yr[k] *= inv;
#endif
}
#undef XR
#undef XS

/* The same along an inner axis (inner >= 16: rows `inner` apart, e.g. over the channels of
 * [N, C, H, W]): 16 adjacent rows per work-item as float16 vectors, one per k (contiguous),
 * so exp runs on vectors (pocl, AVX-512, [1, 1000, 49] over axis 1: 0.49 ms with the scalar
 * kernel above, 0.03 ms this way). A partial last run of rows goes element by element.
 * gsize = (ceil(inner / 16), outer). */
__kernel void softmax_cols(__global const XT* restrict x, __global YT* restrict y, const int len,
                           const int inner) {
    const int r0 = get_global_id(0) * 16;
    const int o = get_global_id(1);
    if (r0 >= inner) return;
    const long base = (long)o * len * inner + r0;
    __global const XT* xr = x + base;
    __global YT* yr = y + base;
    if (r0 + 16 <= inner) {
        float16 m = (float16)(-INFINITY);
        for (int k = 0; k < len; ++k) {
            const float16 v = XV(xr + (long)k * inner);
            m = v > m ? v : m;  /* like fmax: a NaN element is skipped */
        }
        float16 s = (float16)0.0f;
#ifdef LOG_SOFTMAX
        for (int k = 0; k < len; ++k)
            s += clg_exp(XV(xr + (long)k * inner) - m);
        const float16 ls = m + clg_log(s);
        for (int k = 0; k < len; ++k)
            ST_STV(YH, 16, yr + (long)k * inner, XV(xr + (long)k * inner) - ls);
#elif YH
        for (int k = 0; k < len; ++k)
            s += clg_exp(XV(xr + (long)k * inner) - m);
        const float16 inv = 1.0f / s;
        for (int k = 0; k < len; ++k)
            ST_STV(YH, 16, yr + (long)k * inner, clg_exp(XV(xr + (long)k * inner) - m) * inv);
#else
        for (int k = 0; k < len; ++k) {  /* the exponentials stored on the way, as softmax_last */
            const float16 e = clg_exp(XV(xr + (long)k * inner) - m);
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
