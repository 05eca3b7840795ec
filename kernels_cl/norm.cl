/* Normalisations (float32). Shapes are run-time arguments; row/channel reductions use one
 * work-item per row (fast on CPU devices, correct everywhere), summing in 16 lanes (lanes.h).
 *   HAS_BIAS   LayerNormalization/InstanceNormalization add a bias
 */
#include "lanes.h"

/* BatchNormalization parameters -> per-channel (a, b) with y = x * a + b; ab = [a[C], b[C]]. */
__kernel void bn_prepare(__global const float* scale, __global const float* bias, __global const float* mean,
                         __global const float* var, __global float* ab, const int C, const float eps) {
    const int c = get_global_id(0);
    if (c >= C) return;
    const float a = scale[c] / sqrt(var[c] + eps);
    ab[c] = a;
    ab[C + c] = bias[c] - mean[c] * a;
}

/* y = x * a[c] + b[c] for x of shape (N, C, inner): 16 elements of one (n, c) plane per
 * work-item (no division per element; pocl, AVX-512, 64x56x56: 310 -> 19 us, onnxruntime 18).
 * gsize = (ceil(inner / 16), N * C). */
typedef float16 norm_f16u __attribute__((aligned(4)));
__kernel void channel_affine(__global const float* restrict x, __global const float* restrict ab,
                             __global float* restrict y, const int planes, const int C, const int inner) {
    const int j0 = get_global_id(0) * 16;
    const int p = get_global_id(1);
    if (j0 >= inner || p >= planes) return;
    const int c = p % C;
    const float a = ab[c], b = ab[C + c];
    const long o = (long)p * inner + j0;
    if (j0 + 16 <= inner) {
        *(__global norm_f16u*)(y + o) = *(const __global norm_f16u*)(x + o) * a + b;
    } else {
        for (int j = 0; j < inner - j0; ++j)
            y[o + j] = x[o + j] * a + b;
    }
}

/* LRN across channels: y = x / (bias + alpha / size * sum of squares in the window) ^ beta. */
__kernel void lrn(__global const float* x, __global float* y, const int n, const int C, const int inner,
                  const int size, const float alpha, const float beta, const float bias) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = (i / inner) % C;
    const int lo = max(0, c - (size - 1) / 2);
    const int hi = min(C - 1, c + size / 2);  /* ceil((size - 1) / 2) == size / 2 */
    const int base = i - c * inner;
    float s = 0.0f;
    for (int k = lo; k <= hi; ++k) {
        const float v = x[base + k * inner];
        s += v * v;
    }
    y[i] = x[i] / pow(bias + alpha / (float)size * s, beta);
}

/* LayerNormalization: rows of `len` contiguous elements; scale/bias have `len` elements.
 * RMS: RMSNormalization (no mean subtracted).  HAS_STATS: also write the row's mean and 1/stddev.
 * XH / YH: x / y stored as half (storage.h); the statistics are float32 either way. */
#include "storage.h"

/* The mean (0 with RMS) and 1/stddev of a half row, accumulated in float32 (16 lanes, then the
 * tail). */
inline float hsum16(const float16 v) {
    const float8 a = v.lo + v.hi;
    const float4 b = a.lo + a.hi;
    return b.x + b.y + b.z + b.w;
}

inline float2 half_row_stats(__global const half* xr, const int len, const float eps) {
    const int nv = len / 16;
    float m = 0.0f;
#ifndef RMS
    float16 sv = (float16)0.0f;
    for (int k = 0; k < nv; ++k) sv += ST_LDV(1, 16, xr + 16 * k);
    m = hsum16(sv);
    for (int k = 16 * nv; k < len; ++k) m += ST_LD(1, xr, k);
    m /= (float)len;
#endif
    float16 qv = (float16)0.0f;
    for (int k = 0; k < nv; ++k) {
        const float16 d = ST_LDV(1, 16, xr + 16 * k) - m;
        qv += d * d;
    }
    float q = hsum16(qv);
    for (int k = 16 * nv; k < len; ++k) {
        const float d = ST_LD(1, xr, k) - m;
        q += d * d;
    }
    return (float2)(m, 1.0f / sqrt(q / (float)len + eps));
}

__kernel void layernorm(__global const ST_T(XH)* restrict x, __global const float* restrict scale,
#ifdef HAS_BIAS
                        __global const float* restrict bias,
#endif
                        __global ST_T(YH)* restrict y,
#ifdef HAS_STATS
                        __global float* restrict mean_out, __global float* restrict inv_out,
#endif
                        const int rows, const int len, const float eps) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    __global const ST_T(XH)* restrict xr = x + (long)r * len;
    __global ST_T(YH)* restrict yr = y + (long)r * len;
#if XH
    const float2 st = half_row_stats(xr, len, eps);
    const float m = st.x, inv = st.y;
#else
#ifdef RMS
    const float m = 0.0f;
#else
    const float m = lanes_sum(xr, len) / (float)len;
#endif
    const float inv = 1.0f / sqrt(lanes_sqdev(xr, len, m) / (float)len + eps);
#endif
#ifdef HAS_STATS
    mean_out[r] = m;
    inv_out[r] = inv;
#endif
    int k0 = 0;
#if XH || YH
    /* half storage: 16 lanes converted at a time */
    typedef float16 ln_f16u __attribute__((aligned(4)));
    for (; k0 + 16 <= len; k0 += 16) {
        const float16 v = (ST_LDV(XH, 16, xr + k0) - m) * inv * *(const __global ln_f16u*)(scale + k0);
#ifdef HAS_BIAS
        ST_STV(YH, 16, yr + k0, v + *(const __global ln_f16u*)(bias + k0));
#else
        ST_STV(YH, 16, yr + k0, v);
#endif
    }
#endif
    for (int k = k0; k < len; ++k) {
#ifdef HAS_BIAS
        ST_ST(YH, yr, k, (ST_LD(XH, xr, k) - m) * inv * scale[k] + bias[k]);
#else
        ST_ST(YH, yr, k, (ST_LD(XH, xr, k) - m) * inv * scale[k]);
#endif
    }
}

/* InstanceNormalization: one work-item per (n, c) plane of `len` elements. */
__kernel void instancenorm(__global const float* restrict x, __global const float* restrict scale,
                           __global const float* restrict bias, __global float* restrict y, const int planes,
                           const int C, const int len, const float eps) {
    const int p = get_global_id(0);
    if (p >= planes) return;
    const int c = p % C;
    __global const float* restrict xr = x + (long)p * len;
    __global float* restrict yr = y + (long)p * len;
    const float m = lanes_sum(xr, len) / (float)len;
    const float a = scale[c] / sqrt(lanes_sqdev(xr, len, m) / (float)len + eps);
    const float b = bias[c] - m * a;
    for (int k = 0; k < len; ++k) yr[k] = xr[k] * a + b;
}

/* GroupNormalization: one work-item per (n, group) of `len` = channels_per_group * inner elements;
 * scale/bias per channel (opset 21; older per-group parameters are expanded on the host). */
__kernel void groupnorm(__global const float* restrict x, __global const float* restrict scale,
                        __global const float* restrict bias, __global float* restrict y, const int groups_total,
                        const int G, const int cpg, const int inner, const float eps) {
    const int p = get_global_id(0);
    if (p >= groups_total) return;
    const int g = p % G;
    const long len = (long)cpg * inner;
    __global const float* restrict xr = x + (long)p * len;
    __global float* restrict yr = y + (long)p * len;
    const float m = lanes_sum(xr, len) / (float)len;
    const float inv = 1.0f / sqrt(lanes_sqdev(xr, len, m) / (float)len + eps);
    for (int c = 0; c < cpg; ++c) {
        const int ch = g * cpg + c;
        const float a = scale[ch] * inv;
        const float b = bias[ch] - m * a;
        for (int k = 0; k < inner; ++k) yr[(long)c * inner + k] = xr[(long)c * inner + k] * a + b;
    }
}

/* LpNormalization (p = 1 or 2) along an axis: rows of `len` elements `inner` apart. */
__kernel void lpnorm(__global const float* x, __global float* y, const int rows, const int len, const int inner,
                     const int p) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    const int o = i / inner;
    const long base = (long)o * len * inner + (i - o * inner);
    float s = 0.0f;
    for (int k = 0; k < len; ++k) {
        const float v = x[base + (long)k * inner];
        s += p == 1 ? fabs(v) : v * v;
    }
    if (p != 1) s = sqrt(s);
    for (int k = 0; k < len; ++k) y[base + (long)k * inner] = s == 0.0f ? 0.0f : x[base + (long)k * inner] / s;
}

/* LayerNormalization across the channels of each pixel of an [N, C, inner] tensor (a LayerNorm
 * over the last axis between a Transpose to channels-last and its inverse: ConvNeXt's
 * LayerNorm2d, passes/fuse_layernorm.fuse_channel_norm), in place of the two transposes.
 * Each work-item takes 16 consecutive pixels of one image as vectors (channel c of them at
 * x + c*inner: one 16-lane load per channel), two passes for the statistics and one to write;
 * pixels past the image's last full 16 one at a time. X and Y may be half storage (XH, YH);
 * scale and bias [C] float32. gsize = N * ceil(inner / 16). */
__kernel void channelnorm(__global const ST_T(XH)* restrict x, __global const float* restrict scale,
                          __global const float* restrict bias, __global ST_T(YH)* restrict y,
                          const int n_img, const int C, const int inner, const float eps) {
    const int blocks = (inner + 15) / 16;
    const int gid = get_global_id(0);
    if (gid >= n_img * blocks) return;
    const int n = gid / blocks;
    const int p0 = (gid - n * blocks) * 16;
    const long base = (long)n * C * inner + p0;
    if (p0 + 16 <= inner) {
        float16 s = (float16)0.0f;
        for (int c = 0; c < C; ++c)
            s += ST_LDV(XH, 16, x + base + (long)c * inner);
        const float16 m = s / (float)C;
        float16 q = (float16)0.0f;
        for (int c = 0; c < C; ++c) {
            const float16 d = ST_LDV(XH, 16, x + base + (long)c * inner) - m;
            q += d * d;
        }
        const float16 inv = 1.0f / sqrt(q / (float)C + eps);
        for (int c = 0; c < C; ++c) {
            const long o = base + (long)c * inner;
            ST_STV(YH, 16, y + o, (ST_LDV(XH, 16, x + o) - m) * inv * scale[c] + bias[c]);
        }
        return;
    }
    for (int p = p0; p < inner; ++p) {
        const long b = (long)n * C * inner + p;
        float s = 0.0f;
        for (int c = 0; c < C; ++c) s += ST_LD(XH, x, b + (long)c * inner);
        const float m = s / (float)C;
        float q = 0.0f;
        for (int c = 0; c < C; ++c) {
            const float d = ST_LD(XH, x, b + (long)c * inner) - m;
            q += d * d;
        }
        const float inv = 1.0f / sqrt(q / (float)C + eps);
        for (int c = 0; c < C; ++c) {
            const long o = b + (long)c * inner;
            ST_ST(YH, y, o, (ST_LD(XH, x, o) - m) * inv * scale[c] + bias[c]);
        }
    }
}
