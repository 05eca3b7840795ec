/* Reductions over arbitrary axes (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare),
 * ArgMax/ArgMin, and scans along one axis (CumSum/CumProd). One work-item per output element.
 *   T     input storage type        TO   output storage type      ACC  accumulator type
 *   OP_<NAME>  which reduction      RK   kept rank (>= 1)          RR   reduced rank (>= 1)
 *   EMPTY value written when the reduced set is empty (Max/Min)
 * meta (int32): kept dims[RK], kept input strides[RK], reduced dims[RR], reduced input strides[RR].
 *   XH / YH  `reduce`'s x / y stored as half (storage.h; T / TO are float then, ACC float)
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef TO
#define TO T
#endif
#ifndef ACC
#define ACC float
#endif
#ifndef RK
#define RK 1
#endif
#ifndef RR
#define RR 1
#endif
#ifndef EMPTY
#define EMPTY 0
#endif
#include "lanes.h"
#include "storage.h"
#if XH
#define XT half
#else
#define XT T
#endif
#if YH
#define YT half
#else
#define YT TO
#endif
#define LDX(i) ST_LD(XH, x, i)
#define STY(i, v) ST_ST(YH, y, i, v)

inline int kept_offset(int o, __global const int* meta) {
    int base = 0;
    for (int d = RK - 1; d >= 0; --d) {
        const int dim = meta[d];
        const int q = o / dim;
        base += (o - q * dim) * meta[RK + d];
        o = q;
    }
    return base;
}

inline int red_offset(int r, __global const int* meta) {
    int off = 0;
    for (int d = RR - 1; d >= 0; --d) {
        const int dim = meta[2 * RK + d];
        const int q = r / dim;
        off += (r - q * dim) * meta[2 * RK + RR + d];
        r = q;
    }
    return off;
}

__kernel void reduce(__global const XT* x, __global YT* y, const int n_out, const int n_red,
                     __global const int* restrict meta) {
    const int o = get_global_id(0);
    if (o >= n_out) return;
    const int base = kept_offset(o, meta);
#if defined(OP_MAX) || defined(OP_MIN)
    if (n_red == 0) { STY(o, (TO)(EMPTY)); return; }
    ACC acc = (ACC)LDX(base + red_offset(0, meta));
    for (int r = 1; r < n_red; ++r) {
        const ACC v = (ACC)LDX(base + red_offset(r, meta));
#ifdef OP_MAX
        if (v > acc || v != v) acc = v;
#else
        if (v < acc || v != v) acc = v;
#endif
    }
    STY(o, (TO)acc);
#elif defined(OP_LOGSUMEXP)
    ACC mx = -INFINITY;
    for (int r = 0; r < n_red; ++r) {
        const ACC v = (ACC)LDX(base + red_offset(r, meta));
        if (v > mx && !isinf(v)) mx = v;
    }
    if (mx == -INFINITY) mx = 0;
    ACC s = 0;
    for (int r = 0; r < n_red; ++r) s += exp((ACC)LDX(base + red_offset(r, meta)) - mx);
    STY(o, (TO)(log(s) + mx));
#else
#ifdef OP_PROD
    ACC acc = (ACC)1;
#else
    ACC acc = (ACC)0;
#endif
    for (int r = 0; r < n_red; ++r) {
        const ACC v = (ACC)LDX(base + red_offset(r, meta));
#if defined(OP_PROD)
        acc *= v;
#elif defined(OP_L1)
        acc += v < (ACC)0 ? -v : v;
#elif defined(OP_L2) || defined(OP_SUMSQUARE)
        acc += v * v;
#else
        acc += v;
#endif
    }
#if defined(OP_MEAN)
    STY(o, (TO)(acc / (ACC)n_red));
#elif defined(OP_L2)
    STY(o, (TO)sqrt((float)acc));
#elif defined(OP_LOGSUM)
    STY(o, (TO)log((float)acc));
#else
    STY(o, (TO)acc);
#endif
#endif
}

/* The float32 sums (Sum, Mean, SumSquare, L2, LogSum) and Max/Min over one contiguous run per output
 * (rows of the last axes: a decomposed LayerNorm's ReduceMean, an SE block's spatial mean):
 * the run summed in 16 lanes (lanes.h) instead of one dependent chain with index arithmetic per
 * element. meta as `reduce` with RR == 1 and a reduced stride of 1. */
#if defined(OP_MAX)
LANES_EXTREME(lanes_extreme, >)
#elif defined(OP_MIN)
LANES_EXTREME(lanes_extreme, <)
#endif
__kernel void reduce_rows(__global const float* restrict x, __global float* restrict y, const int n_out,
                          const int n_red, __global const int* restrict meta) {
    const int o = get_global_id(0);
    if (o >= n_out) return;
    const __global float* restrict p = x + kept_offset(o, meta);
#if defined(OP_MAX) || defined(OP_MIN)
    y[o] = n_red == 0 ? (float)(EMPTY) : lanes_extreme(p, n_red);
    return;
#endif
#if defined(OP_SUMSQUARE) || defined(OP_L2)
    const float acc = lanes_sqdev(p, n_red, 0.0f);
#else
    const float acc = lanes_sum(p, n_red);
#endif
#if defined(OP_MEAN)
    y[o] = acc / (float)n_red;
#elif defined(OP_L2)
    y[o] = sqrt(acc);
#elif defined(OP_LOGSUM)
    y[o] = log(acc);
#else
    y[o] = acc;
#endif
}

/* Whether v replaces the best so far (scalars or vectors; select_last: a tie moves to the later). */
#ifdef OP_ARGMAX
#define ARG_BETTER(v, b) (select_last ? ((v) >= (b)) : ((v) > (b)))
#else
#define ARG_BETTER(v, b) (select_last ? ((v) <= (b)) : ((v) < (b)))
#endif

/* ArgMax/ArgMin along one axis: meta as above with RR == 1; output int64. */
__kernel void argreduce(__global const T* x, __global long* y, const int n_out, const int n_red,
                        __global const int* restrict meta, const int select_last) {
    const int o = get_global_id(0);
    if (o >= n_out) return;
    const int base = kept_offset(o, meta);
    const int st = meta[2 * RK + RR];
    T best = x[base];
    int bi = 0;
    for (int r = 1; r < n_red; ++r) {
        const T v = x[base + r * st];
        const int better = ARG_BETTER(v, best);
        if (better) { best = v; bi = r; }
    }
    y[o] = (long)bi;
}

/* ArgMax/ArgMin of float32 along an inner axis (rows `inner` apart, inner >= 16, e.g. over the
 * classes of [N, C, H, W]): 16 adjacent outputs per work-item as vectors, the same comparisons
 * per lane as argreduce (pocl, AVX-512, [1, 1000, 196] over axis 1: 0.73 ms with argreduce's
 * one output per work-item, 0.034 ms this way). A partial last run goes element by element.
 * gsize = (ceil(inner / 16), outer). */
typedef float16 red_f16u __attribute__((aligned(4)));
__kernel void argreduce_cols(__global const float* restrict x, __global long* restrict y, const int len,
                             const int inner, const int select_last) {
    const int r0 = get_global_id(0) * 16;
    const int o = get_global_id(1);
    if (r0 >= inner) return;
    __global const float* xr = x + (long)o * len * inner + r0;
    __global long* yr = y + (long)o * inner + r0;
    const int nj = min(16, inner - r0);
    int bl[16];
    if (nj == 16) {
        float16 best = *(const __global red_f16u*)xr;
        int16 bi = (int16)0;
        for (int k = 1; k < len; ++k) {
            const float16 v = *(const __global red_f16u*)(xr + (long)k * inner);
            const int16 better = ARG_BETTER(v, best);
            best = better ? v : best;
            bi = better ? (int16)k : bi;
        }
        *(int16*)bl = bi;
    } else {
        for (int j = 0; j < nj; ++j) {
            float best = xr[j];
            int b = 0;
            for (int k = 1; k < len; ++k) {
                const float v = xr[(long)k * inner + j];
                const int better = ARG_BETTER(v, best);
                if (better) { best = v; b = k; }
            }
            bl[j] = b;
        }
    }
    for (int j = 0; j < nj; ++j)
        yr[j] = (long)bl[j];
}

/* Hardmax along one axis: 1 at the first maximum, 0 elsewhere (meta as argreduce). */
__kernel void hardmax(__global const T* x, __global T* y, const int n_out, const int n_red,
                      __global const int* restrict meta) {
    const int o = get_global_id(0);
    if (o >= n_out) return;
    const int base = kept_offset(o, meta);
    const int st = meta[2 * RK + RR];
    T best = x[base];
    int bi = 0;
    for (int r = 1; r < n_red; ++r) {
        const T v = x[base + r * st];
        if (v > best) { best = v; bi = r; }
    }
    for (int r = 0; r < n_red; ++r) y[base + r * st] = (T)(r == bi ? 1 : 0);
}

/* CumSum/CumProd along one axis (meta as argreduce), exclusive and/or reverse. */
__kernel void scan(__global const T* x, __global T* y, const int n_out, const int n_red,
                   __global const int* restrict meta, const int exclusive, const int reverse) {
    const int o = get_global_id(0);
    if (o >= n_out) return;
    const int base = kept_offset(o, meta);
    const int st = meta[2 * RK + RR];
#ifdef OP_CUMPROD
    ACC acc = (ACC)1;
#else
    ACC acc = (ACC)0;
#endif
    for (int k = 0; k < n_red; ++k) {
        const int r = reverse ? n_red - 1 - k : k;
        const ACC v = (ACC)x[base + r * st];
        if (exclusive) y[base + r * st] = (T)acc;
#ifdef OP_CUMPROD
        acc *= v;
#else
        acc += v;
#endif
        if (!exclusive) y[base + r * st] = (T)acc;
    }
}
