/* Work-group reductions for the GPU family (lower/gpu_reduce.py): ReduceSum/Mean/Max/Min/Prod/
 * L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin, the work of one output split over work-items
 * and combined in local memory by a tree (log2 steps, a barrier after each), instead of reduce.cl's
 * one work-item walking a whole row: a GPU runs a group's items side by side, so a row of
 * thousands takes thousands of dependent steps there and a few dozen here. OpenCL 1.2 (no
 * work_group_reduce builtins).
 *
 * Two mappings, chosen by which input dimension is contiguous:
 *   rows (wg_reduce, wg_argreduce)       the innermost reduced dimension is contiguous: a segment
 *        of `lr` neighbouring work-items per output reads its run side by side (coalesced);
 *        LS / lr outputs per group, so short runs (lr a power of two >= the run, at most LS) still
 *        fill the group. gsize (groups * LS), lsize (LS).
 *   cols (wg_reduce_cols, wg_argreduce_cols)  the innermost kept dimension (`inner` outputs) is
 *        contiguous: local dimension 0 takes neighbouring outputs (coalesced columns), dimension 1
 *        splits the reduced set. gsize (n_hi * ceil(inner / lx) * lx, ly), lsize (lx, ly): dimension 0
 *        holds every block (large second and third global sizes are not portable).
 *
 * Defines:
 *   T, TO, ACC   input, output and accumulator types (reduce.cl's); ACC_FLOAT when ACC is floating
 *   OP_<NAME>    the reduction;  EMPTY  Max/Min's identity (the value of an empty set)
 *   LS           work-items per group (a power of two): the local arrays' size
 *   LINEAR       x is [n_hi, n_red, inner] row-major (inner = 1 for rows): no index table
 *   FROM_PARTIAL x holds wg_reduce_split's partial results (T = ACC): each counts as it is
 *   RK, RR       else: kept dims (rows: all of them; cols: all but the innermost) and reduced dims
 *                in meta (int32): kept dims[RK], kept strides[RK], reduced dims[RR], strides[RR]
 *   XH, YH       1: x (T = float) / y (TO = float) stored as half (kernels_cl/storage.h; the
 *                accumulator stays ACC). FROM_PARTIAL's x and the split's partials stay ACC.
 * Every work-item of a group reaches every barrier (items past the outputs carry the identity).
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
#ifndef LS
#define LS 256
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
#include "storage.h"
/* x's and y's storage: T / TO, or half holding floats (XH / YH) */
#if XH
#define XT half
#define XLD(p, i) ST_LD(1, p, i)
#else
#define XT T
#define XLD(p, i) ((p)[i])
#endif
#if YH
#define YT half
#define YST(p, i, v) ST_ST(1, p, i, v)
#else
#define YT TO
#define YST(p, i, v) ((p)[i] = (v))
#endif

#define IS_NAN(v) ((v) != (v))

inline int kept_offset(int o, __global const int* restrict meta) {
    int base = 0;
    for (int d = RK - 1; d >= 0; --d) {
        const int dim = meta[d];
        const int q = o / dim;
        base += (o - q * dim) * meta[RK + d];
        o = q;
    }
    return base;
}

inline int red_offset(int r, __global const int* restrict meta) {
    int off = 0;
    for (int d = RR - 1; d >= 0; --d) {
        const int dim = meta[2 * RK + d];
        const int q = r / dim;
        off += (r - q * dim) * meta[2 * RK + RR + d];
        r = q;
    }
    return off;
}

/* Where output group-row h (rows: the output; cols: the outer kept index) starts, and where its
 * r-th reduced element lies from there. */
#ifdef LINEAR
#define BASE(h, n_red, inner) ((h) * (n_red) * (inner))
#define RED(r, inner) ((r) * (inner))
#else
#define BASE(h, n_red, inner) kept_offset(h, meta)
#define RED(r, inner) red_offset(r, meta)
#endif

/* --- the value reductions: identity, what each element contributes, how two partials combine --- */
#if defined(OP_MAX)
#define IDENT ((ACC)(EMPTY))
#define LOAD(v) (v)
inline ACC comb(ACC a, ACC b) { return IS_NAN(a) ? a : IS_NAN(b) ? b : (b > a ? b : a); }
#elif defined(OP_MIN)
#define IDENT ((ACC)(EMPTY))
#define LOAD(v) (v)
inline ACC comb(ACC a, ACC b) { return IS_NAN(a) ? a : IS_NAN(b) ? b : (b < a ? b : a); }
#elif defined(OP_PROD)
#define IDENT ((ACC)1)
#define LOAD(v) (v)
inline ACC comb(ACC a, ACC b) { return a * b; }
#elif defined(OP_LOGSUMEXP)
/* first the largest finite element (fmax skips NaN), then the sum of exp(v - max) */
#define IDENT ((ACC)(-INFINITY))
#define LOAD(v) (isinf(v) ? (ACC)(-INFINITY) : (v))
inline ACC comb(ACC a, ACC b) { return fmax(a, b); }
#else
#define IDENT ((ACC)0)
#if defined(FROM_PARTIAL)
#define LOAD(v) (v)
#elif defined(OP_L1)
#define LOAD(v) ((v) < (ACC)0 ? -(v) : (v))
#elif defined(OP_L2) || defined(OP_SUMSQUARE)
#define LOAD(v) ((v) * (v))
#else
#define LOAD(v) (v)
#endif
inline ACC comb(ACC a, ACC b) { return a + b; }
#endif

inline ACC add(ACC a, ACC b) { return a + b; }

/* The tree over one dimension of the group's grid: item `idx` holds its partial in buf[idx];
 * its `width` (a power of two) partners are `step` apart, and `lane` is its position among them.
 * Afterwards buf[idx - lane * step] holds the combination. SUM selects addition (LogSumExp's
 * second pass), else comb. Called by every item of the group. */
inline void tree(__local ACC* buf, const int idx, const int lane, const int width, const int step,
                 const int sum) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = width >> 1; s > 0; s >>= 1) {
        if (lane < s)
            buf[idx] = sum ? add(buf[idx], buf[idx + s * step]) : comb(buf[idx], buf[idx + s * step]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

inline TO finish(ACC acc, const int n_red) {
#if defined(OP_MEAN)
#ifdef ACC_FLOAT
    return (TO)(acc / (ACC)n_red);
#else
    return (TO)(acc / (ACC)(n_red > 0 ? n_red : 1));
#endif
#elif defined(OP_L2)
#ifdef ACC_FLOAT
    return (TO)sqrt(acc);
#else
    return (TO)sqrt((float)acc);
#endif
#elif defined(OP_LOGSUM)
    return (TO)log(acc);
#else
    return (TO)acc;
#endif
}

/* The partial of one work-item over r = first, first + stride, ... < n_red of the elements at
 * p + RED(r), and the group's combined result for its segment (LogSumExp: both passes). */
#define REDUCE_BODY(p, live, first, stride, idx, lane, width, step, head)                       \
    ACC acc = IDENT;                                                                        \
    if (live)                                                                               \
        for (int r = first; r < n_red; r += stride)                                         \
            acc = comb(acc, LOAD((ACC)XLD(p, RED(r, inner))));                                   \
    buf[idx] = acc;                                                                         \
    tree(buf, idx, lane, width, step, 0);                                                   \
    ACC res = buf[head];

#ifndef OP_ARG
/* rows: y[o] over x's run o; n_div: the element count a mean divides by (n_red, or the split's
 * whole run when x holds PARTIAL results). */
__kernel void wg_reduce(__global const XT* restrict x, __global YT* restrict y, const int n_out, const int n_red,
                        const int lr, __global const int* restrict meta, const int n_div) {
    __local ACC buf[LS];
    const int inner = 1;
    const int lid = get_local_id(0);
    const int seg = lid / lr;
    const int lane = lid - seg * lr;
    const int o = get_group_id(0) * (LS / lr) + seg;
    const int live = o < n_out;
    __global const XT* p = x + (live ? BASE(o, n_red, 1) : 0);
    REDUCE_BODY(p, live, lane, lr, lid, lane, lr, 1, seg * lr)
#ifdef OP_LOGSUMEXP
    const ACC m = res == (ACC)(-INFINITY) ? (ACC)0 : res;
    barrier(CLK_LOCAL_MEM_FENCE);  /* everyone has read the max before buf is reused */
    acc = 0;
    if (live)
        for (int r = lane; r < n_red; r += lr) acc += exp((ACC)XLD(p, RED(r, 1)) - m);
    buf[lid] = acc;
    tree(buf, lid, lane, lr, 1, 1);
    res = log(buf[seg * lr]) + m;
#endif
    if (live && lane == 0)
        YST(y, o, finish(res, n_div));
}

/* rows split in `parts` chunks of `chunk` elements when outputs are too few to fill the device
 * (a whole-tensor sum): group g combines chunk g % parts of run g / parts into part[g] (ACC, no
 * finish); wg_reduce with FROM_PARTIAL then combines each run's parts. Not for LogSumExp. */
__kernel void wg_reduce_split(__global const XT* restrict x, __global ACC* restrict part, const int n_red,
                              const int chunk, const int parts, __global const int* restrict meta) {
    __local ACC buf[LS];
    const int inner = 1;
    const int lid = get_local_id(0);
    const int g = get_group_id(0);
    const int o = g / parts;
    const int r0 = (g - o * parts) * chunk;
    const int r1 = min(n_red, r0 + chunk);
    __global const XT* p = x + BASE(o, n_red, 1);
    ACC acc = IDENT;
    for (int r = r0 + lid; r < r1; r += LS)
        acc = comb(acc, LOAD((ACC)XLD(p, RED(r, inner))));
    buf[lid] = acc;
    tree(buf, lid, lid, LS, 1, 0);
    if (lid == 0)
        part[g] = buf[0];
}

__kernel void wg_reduce_cols(__global const XT* restrict x, __global YT* restrict y, const int inner,
                             const int n_red, __global const int* restrict meta) {
    __local ACC buf[LS];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int wx = get_local_size(0), wy = get_local_size(1);
    const int blocks = (inner + wx - 1) / wx;  /* column blocks per outer position */
    const int h = get_group_id(0) / blocks;
    const int j = (get_group_id(0) - h * blocks) * wx + lx;
    const int live = j < inner;
    const int idx = ly * wx + lx;
    __global const XT* p = x + (live ? BASE(h, n_red, inner) + j : 0);
    REDUCE_BODY(p, live, ly, wy, idx, ly, wy, wx, lx)
#ifdef OP_LOGSUMEXP
    const ACC m = res == (ACC)(-INFINITY) ? (ACC)0 : res;
    barrier(CLK_LOCAL_MEM_FENCE);
    acc = 0;
    if (live)
        for (int r = ly; r < n_red; r += wy) acc += exp((ACC)XLD(p, RED(r, inner)) - m);
    buf[idx] = acc;
    tree(buf, idx, ly, wy, wx, 1);
    res = log(buf[lx]) + m;
#endif
    if (live && ly == 0)
        YST(y, (long)h * inner + j, finish(res, n_red));
}
#else
/* --- ArgMax / ArgMin (OP_ARG with OP_ARGMAX or OP_ARGMIN): (value, index) pairs. NaN wins, as
 * numpy's argmax/argmin take the first NaN; ties go to the lower index (select_last: the higher);
 * an index of -1 marks an empty partial. The order is total, so any tree gives one answer. --- */
inline int arg_better(T v, int i, T b, int bi, const int select_last) {
    if (i < 0) return 0;
    if (bi < 0) return 1;
    if (IS_NAN(v) || IS_NAN(b)) {
        if (!IS_NAN(b)) return 1;
        if (!IS_NAN(v)) return 0;
    } else {
#ifdef OP_ARGMAX
        if (v != b) return v > b;
#else
        if (v != b) return v < b;
#endif
    }
    return select_last ? i > bi : i < bi;
}

inline void arg_tree(__local T* bv, __local int* bi, const int idx, const int lane, const int width,
                     const int step, const int select_last) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = width >> 1; s > 0; s >>= 1) {
        if (lane < s && arg_better(bv[idx + s * step], bi[idx + s * step], bv[idx], bi[idx], select_last)) {
            bv[idx] = bv[idx + s * step];
            bi[idx] = bi[idx + s * step];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

#define ARG_BODY(p, live, first, stride, idx, lane, width, step)                                \
    T best = 0;                                                                             \
    int bidx = -1;                                                                          \
    if (live)                                                                               \
        for (int r = first; r < n_red; r += stride) {                                       \
            const T v = XLD(p, RED(r, inner));                                                   \
            if (arg_better(v, r, best, bidx, select_last)) { best = v; bidx = r; }          \
        }                                                                                   \
    bv[idx] = best;                                                                         \
    bi[idx] = bidx;                                                                         \
    arg_tree(bv, bi, idx, lane, width, step, select_last);

__kernel void wg_argreduce(__global const XT* restrict x, __global long* restrict y, const int n_out,
                           const int n_red, const int lr, __global const int* restrict meta,
                           const int select_last) {
    __local T bv[LS];
    __local int bi[LS];
    const int inner = 1;
    const int lid = get_local_id(0);
    const int seg = lid / lr;
    const int lane = lid - seg * lr;
    const int o = get_group_id(0) * (LS / lr) + seg;
    const int live = o < n_out;
    __global const XT* p = x + (live ? BASE(o, n_red, 1) : 0);
    ARG_BODY(p, live, lane, lr, lid, lane, lr, 1)
    if (live && lane == 0)
        y[o] = (long)max(bi[lid], 0);
}

__kernel void wg_argreduce_cols(__global const XT* restrict x, __global long* restrict y, const int inner,
                                const int n_red, __global const int* restrict meta, const int select_last) {
    __local T bv[LS];
    __local int bi[LS];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int wx = get_local_size(0), wy = get_local_size(1);
    const int blocks = (inner + wx - 1) / wx;  /* column blocks per outer position */
    const int h = get_group_id(0) / blocks;
    const int j = (get_group_id(0) - h * blocks) * wx + lx;
    const int live = j < inner;
    const int idx = ly * wx + lx;
    __global const XT* p = x + (live ? BASE(h, n_red, inner) + j : 0);
    ARG_BODY(p, live, ly, wy, idx, ly, wy, wx)
    if (live && ly == 0)
        y[(long)h * inner + j] = (long)max(bi[idx], 0);
}
#endif
