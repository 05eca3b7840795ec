/* The squeeze of a squeeze-and-excitation block (clglow.SqueezeExcite,
 * passes/fuse_squeeze_excite.py): s[n, c] = ACT2(b2[c] + sum_j W2[c, j] * ACT1(b1[j] + sum_k
 * W1[j, k] * mean_HW(x[n, k]))). One work-group per image: the channel means, then the hidden
 * vector, in local memory (SE_CAP floats each: C and CM rounded up to a power of two, so a few
 * programs serve a model's blocks), a barrier between the phases. Every loop over the group's
 * work-items runs the same trip count in each, the tail guarded inside (pocl 3.1 ran the body of
 * the usual for (i = lid; i < n; i += ls) for ids past n too, see recurrent.cl).
 *   SE_ACT1, SE_ACT2  activation.h codes of the two FCs (0, the default: piecewise linear); each
 *                     takes its (a, b, c) as run-time arguments
 *   HAS_B1, HAS_B2    the FCs' biases given
 *   XH                x stored as half (storage.h; the means and both FCs in float)
 * gsize = (local size, N). */
#include "storage.h"
#define ACT SE_ACT2
#include "activation.h"
DEFINE_ACT(se_act2, float)

/* The first FC's activation, by activation.h's codes: that header defines one activation per
 * program (and a program includes it once), the second FC's; Gelu (7) is not offered here. */
#ifndef SE_ACT1
#define SE_ACT1 0
#endif
inline float se_act1(float v, float a, float b, float c) {
#if SE_ACT1 == 0
    v = v < 0.0f ? v * a : v;
    v = v < b ? b : v;
    return v > c ? c : v;
#elif SE_ACT1 == 4
    return 1.0f / (1.0f + clg_exp(-v));
#elif SE_ACT1 == 5
    v = v * a + b;
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
#elif SE_ACT1 == 6
    return clg_tanh(v);
#elif SE_ACT1 == 8
    return v / (1.0f + clg_exp(v * -a));
#elif SE_ACT1 == 9
    float h = v * a + b;
    h = h < 0.0f ? 0.0f : h;
    return v * (h > 1.0f ? 1.0f : h);
#else
#error "SE_ACT1 must be 0, 4, 5, 6, 8 or 9"
#endif
}

#ifndef HAS_B1
#define HAS_B1 0
#endif
#ifndef HAS_B2
#define HAS_B2 0
#endif

typedef float16 float16_se __attribute__((aligned(4)));  /* rows of W and planes of x start anywhere */

/* sum_k w[k] * v[k] for k < n (v in local memory, 64-byte aligned): 16 lanes of independent
 * multiply-adds, then the tail (a scalar chain per k would wait on each multiply-add: the 576 x 144
 * FCs of MobileNetV3's last blocks; vload16 instead of the aligned(4) loads: 2.5x slower there) */
inline float se_dot(const __global float* restrict w, const __local float* v, const int n) {
    float16 acc = (float16)0.0f;
    int k = 0;
    for (; k + 16 <= n; k += 16)
        acc = mad(*(const __global float16_se*)(w + k), *(const __local float16*)(v + k), acc);
    float t = 0.0f;
    for (; k < n; ++k)
        t = mad(w[k], v[k], t);
    const float8 h8 = acc.lo + acc.hi;
    const float4 h4 = h8.lo + h8.hi;
    return t + (h4.x + h4.y) + (h4.z + h4.w);
}

__kernel void se_squeeze(__global const ST_T(XH)* restrict x, __global const float* restrict w1,
                         __global const float* restrict b1, __global const float* restrict w2,
                         __global const float* restrict b2, __global float* restrict s, const int C, const int CM,
                         const int HW, const float a1, const float p1, const float q1, const float a2,
                         const float p2, const float q2) {
    const int lid = get_local_id(0), ls = get_local_size(0), n = get_group_id(1);
    __local float mean[SE_CAP] __attribute__((aligned(64)));
    __local float hid[SE_CAP] __attribute__((aligned(64)));
    const float inv = 1.0f / (float)HW;
    for (int u = 0; u < C; u += ls) {
        const int c = u + lid;
        if (c < C) {
            const __global ST_T(XH)* xp = x + ((size_t)n * C + c) * HW;
            float16 acc = (float16)0.0f;
            int j = 0;
            for (; j + 16 <= HW; j += 16)
                acc += ST_LDV(XH, 16, xp + j);
            float t = 0.0f;
            for (; j < HW; ++j)
                t += ST_LD(XH, xp, j);
            const float8 h8 = acc.lo + acc.hi;
            const float4 h4 = h8.lo + h8.hi;
            mean[c] = (t + (h4.x + h4.y) + (h4.z + h4.w)) * inv;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int u = 0; u < CM; u += ls) {
        const int j = u + lid;
        if (j < CM) {
            hid[j] = se_act1((HAS_B1 ? b1[j] : 0.0f) + se_dot(w1 + (size_t)j * C, mean, C), a1, p1, q1);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int u = 0; u < C; u += ls) {
        const int c = u + lid;
        if (c < C) {
            s[(size_t)n * C + c] = se_act2((HAS_B2 ? b2[c] : 0.0f) + se_dot(w2 + (size_t)c * CM, hid, CM), a2, p2, q2);
        }
    }
}
