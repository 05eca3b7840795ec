/* TopK along an axis (lower/topk.py). Output order: by value (largest first, or smallest with
 * LARGEST undefined), equal values by lower index first (the spec's).
 *   TOPK_T  the element type;  USE_FP64  for double */
#pragma OPENCL FP_CONTRACT OFF
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef TOPK_T
#define TOPK_T float
#endif
#ifndef WG
#define WG 64
#endif

/* TopK along an axis: one work-item per row of `len` elements `inner` apart; k passes, each picking
 * the best element after the previous pick in the order (value, then lower index first).
 *   T value type;  LARGEST  largest (else smallest) first */
inline int topk_before(TOPK_T a, int ia, TOPK_T b, int ib) {
#ifdef LARGEST
    return a > b || (a == b && ia < ib);
#else
    return a < b || (a == b && ia < ib);
#endif
}

__kernel void topk(__global const TOPK_T* x, __global TOPK_T* vals, __global long* idx, const int rows,
                   const int len, const int inner, const int k) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    const int o = r / inner;
    const int in = r - o * inner;
    __global const TOPK_T* xr = x + (long)o * len * inner + in;
    const long ob = (long)o * k * inner + in;
    if (k <= 16) {
        /* One pass keeping the best k so far in order (insertion): the same total order as
         * the passes below, which read the row k times (pocl, AVX-512, top 5 of [64, 1000]:
         * 0.32 -> 0.07 ms). */
        TOPK_T bv[16];
        int bi[16];
        int cnt = 0;
        for (int t = 0; t < len; ++t) {
            const TOPK_T v = xr[(long)t * inner];
            if (cnt == k && !topk_before(v, t, bv[k - 1], bi[k - 1])) continue;
            int pos = cnt < k ? cnt++ : k - 1;
            while (pos > 0 && topk_before(v, t, bv[pos - 1], bi[pos - 1])) {
                bv[pos] = bv[pos - 1];
                bi[pos] = bi[pos - 1];
                --pos;
            }
            bv[pos] = v;
            bi[pos] = t;
        }
        for (int j = 0; j < k; ++j) {
            vals[ob + (long)j * inner] = bv[j];
            idx[ob + (long)j * inner] = bi[j];
        }
        return;
    }
    TOPK_T pv = 0;
    int pi = -1;
    for (int j = 0; j < k; ++j) {
        int best = -1;
        TOPK_T bv = 0;
        for (int t = 0; t < len; ++t) {
            const TOPK_T v = xr[(long)t * inner];
            if (pi >= 0 && !topk_before(pv, pi, v, t)) continue;
            if (best < 0 || topk_before(v, t, bv, best)) {
                best = t;
                bv = v;
            }
        }
        vals[ob + (long)j * inner] = bv;
        idx[ob + (long)j * inner] = best;
        pv = bv;
        pi = best;
    }
}

/* TopK by radix select, one work-group of WG items per row (k > 16, or k read on the device):
 * each element's order key (an unsigned integer of KEY_BITS bits, larger = earlier in the
 * output; -0.0 keyed as +0.0, so equal values have equal keys) is matched against the k-th
 * key's prefix 4 bits at a time (16 digit counts per work-item, summed: no local atomics, which
 * pocl 3.1 miscounted here), so the k-th key T is exact after KEY_BITS / 4 passes over the row.
 * The k winners are those keyed above T and the first ones (lowest indices) keyed T; each is
 * then ranked among the k (key, then lower index first: the spec's order, as `topk`), so a row
 * costs a few passes and k * k compares, not k passes.
 *   cand_i [rows, kmax] / cand_k [rows, kmax]: the winners' indices and keys (scratch);
 *   K_BUF: k read from kp[0] (a run-time k: the output sized at run time, *count = k) */
#if defined(KEY_F32) || defined(KEY_F64) || defined(KEY_S32) || defined(KEY_S64) || defined(KEY_U32) \
    || defined(KEY_U64)
#if defined(KEY_F64) || defined(KEY_S64) || defined(KEY_U64)
#define KEY_BITS 64
typedef ulong key_t;
#else
#define KEY_BITS 32
typedef uint key_t;
#endif

/* ascending in the value's order (the element type picked by KEY_*) */
inline key_t raw_key(TOPK_T v) {
#if defined(KEY_F32)
    const uint u = v == 0.0f ? 0u : as_uint(v);
    return (u >> 31) ? ~u : (u | 0x80000000u);
#elif defined(KEY_F64)
    const ulong u = v == 0.0 ? 0ul : as_ulong(v);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ul);
#elif defined(KEY_S32)
    return (uint)(int)v ^ 0x80000000u;
#elif defined(KEY_S64)
    return (ulong)(long)v ^ 0x8000000000000000ul;
#else
    return (key_t)v;
#endif
}

inline key_t order_key(TOPK_T v) {
    const key_t k = raw_key(v);
#ifdef LARGEST
    return k;
#else
    return ~k;
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void topk_radix(__global const TOPK_T* x, __global TOPK_T* vals, __global long* idx, const int len,
                const int inner, const int kmax, __global const long* kp, __global long* count,
                __global int* cand_i, __global key_t* cand_k) {
    const int row = get_group_id(0), lid = get_local_id(0);
    const int o = row / inner, in = row - o * inner;
    __global const TOPK_T* xr = x + (long)o * len * inner + in;
#ifdef K_BUF
    const long kr = kp[0];
    if (row == 0 && lid == 0) count[0] = kr;  /* the executor refuses a k outside [0, len] */
    const int k = (int)clamp(kr, 0L, (long)min(len, kmax));
#else
    const int k = kmax;
#endif
    __local int part[16 * WG];  /* per work-item digit counts of one pass (no local atomics) */
    __local int hist[16];
    __local int scan_g[WG], scan_e[WG];
    __local key_t prefix_l[1];
    __local int need_l[1];
    /* the k-th key's prefix so far and the winners still to find among the keys matching it
     * (no work-item returns early: every one reaches every barrier) */
    if (lid == 0) {
        prefix_l[0] = 0;
        need_l[0] = k;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int shift = KEY_BITS - 4; shift >= 0; shift -= 4) {
        const key_t prefix = prefix_l[0];
        const key_t mask = shift + 4 >= KEY_BITS ? (key_t)0 : ~(key_t)0 << (shift + 4);
        int c16[16];
        for (int b = 0; b < 16; ++b) c16[b] = 0;
        for (int t = lid; t < len; t += WG) {
            const key_t key = order_key(xr[(long)t * inner]);
            if ((key & mask) == prefix) ++c16[(int)((key >> shift) & 15)];
        }
        for (int b = 0; b < 16; ++b) part[b * WG + lid] = c16[b];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int b = lid; b < 16; b += WG) {
            int sum = 0;
            for (int w = 0; w < WG; ++w) sum += part[b * WG + w];
            hist[b] = sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {  /* the digit of the k-th key: from the top, where the count reaches `need` */
            const int need = need_l[0];
            int c = 0, b = 15;
            for (; b > 0 && c + hist[b] < need; --b) c += hist[b];
            prefix_l[0] = prefix | ((key_t)b << shift);
            need_l[0] = need - c;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const key_t prefix = prefix_l[0];  /* the k-th key T */
    const int need = need_l[0];  /* how many keyed T win (the lowest indices) */
    /* winners compacted: keys above T from 0 on, the first `need` keyed T from k - need on, each
     * work-item taking one contiguous chunk so that "first" is index order */
    const int chunk = (len + WG - 1) / WG;
    const int lo = min(len, lid * chunk), hi = min(len, lo + chunk);
    int gt = 0, eq = 0;
    for (int t = lo; t < hi; ++t) {
        const key_t key = order_key(xr[(long)t * inner]);
        gt += key > prefix;
        eq += key == prefix;
    }
    scan_g[lid] = gt;
    scan_e[lid] = eq;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {  /* exclusive prefix sums over the work-items' chunks */
        int sg = 0, se = 0;
        for (int w = 0; w < WG; ++w) {
            const int a = scan_g[w], b = scan_e[w];
            scan_g[w] = sg;
            scan_e[w] = se;
            sg += a;
            se += b;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int pg = scan_g[lid], pe = scan_e[lid];
    __global int* ci = cand_i + (long)row * kmax;
    __global key_t* ck = cand_k + (long)row * kmax;
    const int base_eq = k - need;
    for (int t = lo; t < hi; ++t) {
        const key_t key = order_key(xr[(long)t * inner]);
        if (key > prefix) {  /* (k = 0: nothing is, T being the largest key) */
            if (pg < k) { ci[pg] = t; ck[pg] = key; }
            ++pg;
        } else if (key == prefix) {
            if (pe < need) { ci[base_eq + pe] = t; ck[base_eq + pe] = key; }
            ++pe;
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    const long ob = (long)o * k * inner + in;
    for (int p = lid; p < k; p += WG) {
        const key_t kv = ck[p];
        const int iv = ci[p];
        int r = 0;
        for (int q = 0; q < k; ++q) {
            const key_t kq = ck[q];
            r += kq > kv || (kq == kv && ci[q] < iv);
        }
        vals[ob + (long)r * inner] = xr[(long)iv * inner];
        idx[ob + (long)r * inner] = iv;
    }
}
#endif
