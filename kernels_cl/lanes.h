/* Reductions over a contiguous run of floats in 16 independent lanes, combined at the end.
 *
 * A single running sum is a chain of dependent adds: latency-bound, one element per add latency
 * (measured on pocl, AVX-512: MobileNet-style's SE global pools 0.149 -> 0.017 ms in lanes).
 * The lanes add in a different order than a sequential loop, as any parallel reduction does.
 * Used by pool.cl (global pooling) and norm.cl (layer, instance and group normalization). */
#ifndef LANES_H
#define LANES_H

typedef float16 lanes_f16u __attribute__((aligned(4)));

inline float lanes_hsum(const float16 v) {
    const float8 a8 = v.lo + v.hi;
    const float4 a4 = a8.lo + a8.hi;
    return (a4.x + a4.y) + (a4.z + a4.w);
}

/* sum of p[0 .. n) */
inline float lanes_sum(const __global float* restrict p, const long n) {
    float16 acc = (float16)0.0f;
    long k = 0;
    for (; k + 16 <= n; k += 16)
        acc += *(const __global lanes_f16u*)(p + k);
    float s = lanes_hsum(acc);
    for (; k < n; ++k)
        s += p[k];
    return s;
}

/* sum of (p[k] - m)^2 over [0, n) */
inline float lanes_sqdev(const __global float* restrict p, const long n, const float m) {
    float16 acc = (float16)0.0f;
    long k = 0;
    for (; k + 16 <= n; k += 16) {
        const float16 d = *(const __global lanes_f16u*)(p + k) - m;
        acc += d * d;
    }
    float s = lanes_hsum(acc);
    for (; k < n; ++k) {
        const float d = p[k] - m;
        s += d * d;
    }
    return s;
}

/* max of p[0 .. n) (-INFINITY when empty); NaN elements are skipped, as by fmax */
inline float lanes_max(const __global float* restrict p, const long n) {
    float16 best = (float16)(-INFINITY);
    long k = 0;
    for (; k + 16 <= n; k += 16) {
        const float16 v = *(const __global lanes_f16u*)(p + k);
        best = v > best ? v : best;
    }
    const float8 b8 = best.lo > best.hi ? best.lo : best.hi;
    const float4 b4 = b8.lo > b8.hi ? b8.lo : b8.hi;
    const float2 b2 = b4.lo > b4.hi ? b4.lo : b4.hi;
    float b = b2.x > b2.y ? b2.x : b2.y;
    for (; k < n; ++k)
        b = p[k] > b ? p[k] : b;
    return b;
}

/* LANES_EXTREME(NAME, OP): `float NAME(p, n)`, the max (OP >) or min (OP <) of p[0 .. n), n >= 1,
 * a NaN propagating as ReduceMax/ReduceMin do (once seen, it stays). */
#define LANES_EXTREME(NAME, OP)                                                            \
    inline float NAME(const __global float* restrict p, const long n) {                   \
        long k = 1;                                                                        \
        float b = p[0];                                                                    \
        if (n >= 16) {                                                                     \
            float16 best = *(const __global lanes_f16u*)p;                                 \
            for (k = 16; k + 16 <= n; k += 16) {                                           \
                const float16 v = *(const __global lanes_f16u*)(p + k);                    \
                best = ((v OP best) | (v != v)) ? v : best;                                \
            }                                                                              \
            float l[16];                                                                   \
            *(float16*)l = best;                                                           \
            b = l[0];                                                                      \
            for (int j = 1; j < 16; ++j)                                                   \
                b = (l[j] OP b || l[j] != l[j]) ? l[j] : b;                                \
        }                                                                                  \
        for (; k < n; ++k)                                                                 \
            b = (p[k] OP b || p[k] != p[k]) ? p[k] : b;                                    \
        return b;                                                                          \
    }

#endif
