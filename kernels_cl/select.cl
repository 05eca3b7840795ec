/* Ops whose output size is known only after they ran (NonZero, Compress, NonMaxSuppression): each
 * writes its outputs compactly at the start of buffers sized for the most it could produce, and
 * the number produced into `total` (one long), which the executor reads back (runtime/engine.py).
 *
 * Selection by mask runs in three launches over `groups` chunks of `chunk` elements, so the
 * order is the input's (row-major) order on any device:
 *   mask_count   one work-item per chunk counts its selected elements -> counts[chunk]
 *   scan_counts  one work-item: exclusive prefix sum counts -> offs, the sum -> *total
 *   *_write      one work-item per chunk writes its selections from offs[chunk] on
 *
 *   TM   the mask's element type (an element is selected when it is not zero)
 *   T    the storage type of the elements a gather moves
 *   RANK NonZero's input rank
 */
#pragma OPENCL FP_CONTRACT OFF
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef TM
#define TM uchar
#endif
#ifndef T
#define T uint
#endif
#ifndef RANK
#define RANK 1
#endif
#ifndef WG
#define WG 64
#endif

__kernel void mask_count(__global const TM* mask, const int n, const int chunk, const int groups,
                         __global int* counts) {
    const int g = get_global_id(0);
    if (g >= groups) return;
    const int lo = g * chunk;
    const int hi = min(n, lo + chunk);
    int c = 0;
    for (int i = lo; i < hi; ++i) c += mask[i] != (TM)0;
    counts[g] = c;
}

__kernel void scan_counts(__global const int* counts, const int groups, __global int* offs,
                          __global long* total) {
    if (get_global_id(0) != 0) return;
    int s = 0;
    for (int g = 0; g < groups; ++g) {
        offs[g] = s;
        s += counts[g];
    }
    total[0] = s;
}

/* NonZero: out [RANK, total] int64, row d holding coordinate d of each nonzero element;
 * dims[RANK] the input's shape. */
__kernel void nonzero_write(__global const TM* x, const int n, const int chunk, const int groups,
                            __global const int* offs, __global const long* total,
                            __global const int* dims, __global long* out) {
    const int g = get_global_id(0);
    if (g >= groups) return;
    const long stride = total[0];
    int p = offs[g];
    const int hi = min(n, g * chunk + chunk);
    for (int i = g * chunk; i < hi; ++i) {
        if (x[i] == (TM)0) continue;
        int rem = i;
        for (int d = RANK - 1; d >= 0; --d) {
            const int q = rem / dims[d];
            out[d * stride + p] = rem - q * dims[d];
            rem = q;
        }
        ++p;
    }
}

/* Compress: the positions of the selected entries of the condition -> sel[total] */
__kernel void mask_positions(__global const TM* mask, const int n, const int chunk, const int groups,
                             __global const int* offs, __global int* sel) {
    const int g = get_global_id(0);
    if (g >= groups) return;
    int p = offs[g];
    const int hi = min(n, g * chunk + chunk);
    for (int i = g * chunk; i < hi; ++i)
        if (mask[i] != (TM)0) sel[p++] = i;
}

/* x viewed as [outer, dim, inner]: out [outer, total, inner] = x[:, sel[:total], :]; one work-item
 * per element of the largest output [outer, bound, inner], those past total return. */
__kernel void compress_gather(__global const T* x, __global const int* sel, __global const long* total,
                              const int dim, const int inner, const int bound, const int n,
                              __global T* out) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int k = (i / inner) % bound;
    const int o = i / (inner * bound);
    const int t = (int)total[0];
    if (k >= t) return;
    const int j = i % inner;
    out[((long)o * t + k) * inner + j] = x[((long)o * dim + sel[k]) * inner + j];
}

/* --- NonMaxSuppression ------------------------------------------------------------------------ *
 * One work-group of WG items per (batch, class): repeatedly the best live candidate (highest
 * score, the lowest index among equal scores: the reference's order) is kept, and every live
 * candidate whose IoU with it exceeds the threshold dies, until none lives or `limit` are kept.
 * The IoU arithmetic is the reference's (runtime/nms.py), in float, without contraction.
 *   boxes [B, N, 4], scores [B, C, N]; alive [B*C, N] scratch; sel [B*C, cap]; counts [B*C]
 */
inline void corners(__global const float* b, float* x0, float* x1, float* y0, float* y1) {
#ifdef CENTER_POINT
    const float hw = b[2] / 2.0f, hh = b[3] / 2.0f;
    *x0 = b[0] - hw; *x1 = b[0] + hw; *y0 = b[1] - hh; *y1 = b[1] + hh;
#else
    *x0 = fmin(b[1], b[3]); *x1 = fmax(b[1], b[3]); *y0 = fmin(b[0], b[2]); *y1 = fmax(b[0], b[2]);
#endif
}

/* IoU of two boxes given by corners above `thr`; 0 for empty or degenerate boxes (the reference's rule). */
inline int iou_above(const float ax0, const float ax1, const float ay0, const float ay1,
                     const float bx0, const float bx1, const float by0, const float by1, const float thr) {
    const float ix0 = fmax(ax0, bx0), ix1 = fmin(ax1, bx1);
    const float iy0 = fmax(ay0, by0), iy1 = fmin(ay1, by1);
    const float w = ix1 - ix0, h = iy1 - iy0;
    const float inter = w * h;
    const float wa = ax1 - ax0, ha = ay1 - ay0, wb = bx1 - bx0, hb = by1 - by0;
    const float area_a = wa * ha;
    const float area_b = wb * hb;
    const float sum = area_a + area_b;
    const float uni = sum - inter;
    if (!(ix1 > ix0 && iy1 > iy0 && inter > 0.0f && area_a > 0.0f && area_b > 0.0f && uni > 0.0f)) return 0;
    return inter / uni > thr;
}

inline int overlaps(__global const float* a, __global const float* b, const float thr) {
    float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
    corners(a, &ax0, &ax1, &ay0, &ay1);
    corners(b, &bx0, &bx1, &by0, &by1);
    return iou_above(ax0, ax1, ay0, ay1, bx0, bx1, by0, by1, thr);
}

/* The optional inputs max_output_boxes_per_class (0 when absent: keep none, the reference's
 * rule; at most `cap`) and iou_threshold (0 when absent). */
inline int nms_limit(__global const long* max_per_class, const int cap) {
#ifdef HAS_MAX
    return (int)min((long)cap, max(max_per_class[0], 0L));
#else
    return 0;
#endif
}

inline float nms_iou_threshold(__global const float* iou_threshold) {
#ifdef HAS_IOU
    return iou_threshold[0];
#else
    return 0.0f;
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void nms_select(__global const float* boxes, __global const float* scores, const int classes, const int n,
                const int cap, __global const long* max_per_class, __global const float* iou_threshold,
                __global const float* score_threshold, __global uchar* alive, __global int* sel,
                __global int* counts) {
    const int limit = nms_limit(max_per_class, cap);
    const float iou_thr = nms_iou_threshold(iou_threshold);
    __local float best_s[WG];
    __local int best_i[WG];
    const int bc = get_group_id(0);
    const int lid = get_local_id(0);
    const int b = bc / classes;
    __global const float* sc = scores + (long)bc * n;
    __global const float* bx = boxes + (long)b * n * 4;
    __global uchar* live = alive + (long)bc * n;
#ifdef HAS_SCORE
    const float score_thr = score_threshold[0];
    for (int i = lid; i < n; i += WG) live[i] = sc[i] > score_thr;
#else
    for (int i = lid; i < n; i += WG) live[i] = 1;
#endif
    barrier(CLK_GLOBAL_MEM_FENCE);
    int kept = 0;
    while (kept < limit) {
        float s = 0.0f;
        int k = -1;
        for (int i = lid; i < n; i += WG)
            if (live[i] && (k < 0 || sc[i] > s)) { s = sc[i]; k = i; }
        best_s[lid] = s;
        best_i[lid] = k;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int w = WG / 2; w > 0; w >>= 1) {
            if (lid < w) {
                const int ko = best_i[lid + w];
                const float so = best_s[lid + w];
                const int km = best_i[lid];
                if (ko >= 0 && (km < 0 || so > best_s[lid] || (so == best_s[lid] && ko < km))) {
                    best_s[lid] = so;
                    best_i[lid] = ko;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const int best = best_i[0];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (best < 0) break;
        if (lid == 0) sel[(long)bc * cap + kept] = best;
        ++kept;
        for (int i = lid; i < n; i += WG)
            if (live[i] && (i == best || overlaps(bx + (long)best * 4, bx + (long)i * 4, iou_thr))) live[i] = 0;
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
    if (lid == 0) counts[bc] = kept;
}

/* selected_indices [total, 3] int64 rows (batch, class, box), per (batch, class) in order */
__kernel void nms_write(__global const int* sel, __global const int* counts, __global const int* offs,
                        const int classes, const int cap, const int n, __global long* out) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int bc = i / cap, k = i % cap;
    if (k >= counts[bc]) return;
    __global long* row = out + (long)(offs[bc] + k) * 3;
    row[0] = bc / classes;
    row[1] = bc % classes;
    row[2] = sel[i];
}

/* --- Unique ----------------------------------------------------------------------------------- *
 * x viewed as [outer, dim, inner]: entry k is the slice x[:, k, :] (an element when there is no
 * axis), compared lexicographically in C order as numpy.unique does (NaNs equal, after numbers).
 * The entries are sorted (unique_merge), then grouped; any dim.
 *   TV   the element type;  FLOAT_T  when it is a float type
 */
#ifndef TV
#define TV float
#endif
#ifdef FLOAT_T
inline int eqv(const TV a, const TV b) { return a == b || (isnan(a) && isnan(b)); }
inline int ltv(const TV a, const TV b) { return a < b || (!isnan(a) && isnan(b)); }
#else
inline int eqv(const TV a, const TV b) { return a == b; }
inline int ltv(const TV a, const TV b) { return a < b; }
#endif

inline int cmp_entries(__global const TV* x, const int a, const int b, const int outer, const int dim,
                       const int inner) {
    for (int o = 0; o < outer; ++o) {
        __global const TV* pa = x + ((long)o * dim + a) * inner;
        __global const TV* pb = x + ((long)o * dim + b) * inner;
        for (int i = 0; i < inner; ++i)
            if (!eqv(pa[i], pb[i])) return ltv(pa[i], pb[i]) ? -1 : 1;
    }
    return 0;
}

/* The entries sorted by a stable merge sort on their indices (cmp_entries, then index order):
 * ceil(log2(dim)) passes, each work-item placing one entry by a binary search in the other run
 * of its pair, so a pass costs dim * log(dim) compares and any dim fits (no local memory, one
 * kernel for scalars and slices). Equal entries end up adjacent, first occurrence first. */
/* KEYED (scalar entries: outer = inner = 1): the values travel with the indices (keys k*), so a
 * compare reads them in place instead of through the index */
#ifdef KEYED
#define UKEY_ARGS , __global const TV* ksrc, __global TV* kdst
#define UCMP(m, e) (eqv(ksrc[m], ke) ? 0 : (ltv(ksrc[m], ke) ? -1 : 1))
#else
#define UKEY_ARGS
#define UCMP(m, e) cmp_entries(x, src[m], e, outer, dim, inner)
#endif

__kernel void unique_iota(__global const TV* x, __global int* idx, const int n UKEY_ARGS) {
    const int i = get_global_id(0);
    if (i >= n) return;
    idx[i] = i;
#ifdef KEYED
    kdst[i] = x[i];
#endif
}

/* runs [r * width, (r + 1) * width) of src (sorted) merged pairwise into dst */
__kernel void unique_merge(__global const TV* x, const int outer, const int dim, const int inner,
                           __global const int* src, __global int* dst, const int width UKEY_ARGS) {
    const int i = get_global_id(0);
    if (i >= dim) return;
    const long run = i / width, base = (run & ~1L) * width;
    const int e = src[i];
#ifdef KEYED
    const TV ke = ksrc[i];
#endif
    const int odd = (int)(run & 1);
    /* the other run: after this one (count entries below e) or before it (count those <= e) */
    const long lo = odd ? base : min((long)dim, base + width);
    const long hi = odd ? base + width : min((long)dim, base + 2L * width);
    long a = lo, b = hi;
    while (a < b) {
        const long m = (a + b) >> 1;
        const int c = UCMP(m, e);
        if (c < 0 || (odd && c == 0)) a = m + 1; else b = m;
    }
    const long to = base + (i - base - (odd ? width : 0)) + (a - lo);
    dst[to] = e;
#ifdef KEYED
    kdst[to] = ke;
#endif
}

/* flag[p]: sorted entry p is the first of its value */
__kernel void unique_starts(__global const TV* x, const int outer, const int dim, const int inner,
                            __global const int* sorted, __global uchar* flag UKEY_ARGS) {
    const int p = get_global_id(0);
    if (p >= dim) return;
#ifdef KEYED
    flag[p] = p == 0 || !eqv(ksrc[p - 1], ksrc[p]);
#else
    flag[p] = p == 0 || cmp_entries(x, sorted[p - 1], sorted[p], outer, dim, inner) != 0;
#endif
}

/* per chunk of the sorted entries (offs from scan_counts over flag): uid[p], the place of p's
 * value among the distinct values; start[u], where value u's entries begin */
__kernel void unique_ids(__global const uchar* flag, const int n, const int chunk, const int groups,
                         __global const int* offs, __global int* uid, __global int* start) {
    const int g = get_global_id(0);
    if (g >= groups) return;
    int u = offs[g] - 1;
    const int hi = min(n, g * chunk + chunk);
    for (int p = g * chunk; p < hi; ++p) {
        if (flag[p]) start[++u] = p;
        uid[p] = u;
    }
}

/* first[k], cnt[k], rep[k] of every entry k (as unique_write reads them); SORTED: the distinct
 * values' order as well (order[u] = first entry of value u, pos[k] = u) */
__kernel void unique_groups(__global const int* sorted, __global const int* uid, __global const int* start,
                            __global const long* total, const int dim, __global int* first, __global int* cnt,
                            __global uchar* rep, __global int* order, __global int* pos) {
    const int p = get_global_id(0);
    if (p >= dim) return;
    const int k = sorted[p], u = uid[p], s = start[u];
    const int e = u + 1 < total[0] ? start[u + 1] : dim;
    first[k] = sorted[s];
    cnt[k] = e - s;
    rep[k] = p == s;
#ifdef SORTED
    if (p == s) {
        order[u] = k;
        pos[k] = u;
    }
#endif
}

/* unsorted: the first entries in their own order (offs from scan_counts over rep) */
__kernel void unique_order(__global const uchar* rep, const int n, const int chunk, const int groups,
                           __global const int* offs, __global int* order, __global int* pos) {
    const int g = get_global_id(0);
    if (g >= groups) return;
    int p = offs[g];
    const int hi = min(n, g * chunk + chunk);
    for (int i = g * chunk; i < hi; ++i)
        if (rep[i]) { order[p] = i; pos[i] = p; ++p; }
}

/* indices[total], counts[total] (distinct values in output order), inverse[dim] */
__kernel void unique_write(__global const int* order, __global const int* first, __global const int* cnt,
                           __global const int* pos, __global const long* total, const int dim,
                           __global long* indices, __global long* inverse, __global long* counts) {
    const int k = get_global_id(0);
    if (k >= dim) return;
#ifdef HAS_INVERSE
    inverse[k] = pos[first[k]];
#endif
    if (k >= total[0]) return;
#ifdef HAS_INDICES
    indices[k] = order[k];
#endif
#ifdef HAS_COUNTS
    counts[k] = cnt[order[k]];
#endif
}

/* --- NonMaxSuppression, sorted (many boxes per class) ------------------------------------------ *
 * The candidates sorted once by score (bitonic, on (key, index) pairs: score descending, lower
 * index first: the reference's order), the boxes once per batch by x_min; then one work-group
 * per (batch, class) walks the candidates in order, and each kept box tests only the boxes whose
 * x extent can meet its own (a window of the x order found by binary search): torchvision's
 * batched NMS puts each class's boxes apart (offsets), so thousands of candidates have few
 * neighbours each. Same IoU arithmetic as nms_select (and runtime/nms.py).
 *   P: the sort length (a power of two >= n);  rows = batches * classes */
inline uint fkey(const float v) {  /* ascending in v; -0.0 as +0.0 */
    const uint u = v == 0.0f ? 0u : as_uint(v);
    return (u >> 31) ? ~u : (u | 0x80000000u);
}

/* corner[b, i] = (x0, x1, y0, y1) of box i of batch b; x order keys (x0 ascending), padded to P */
__kernel void nms_corners(__global const float* boxes, const int n, const int P, const int total,
                          __global float* corner, __global uint* xkey, __global int* xidx) {
    const int g = get_global_id(0);
    if (g >= total) return;
    const int b = g / P, i = g - b * P;
    if (i >= n) {
        xkey[g] = 0u;
        xidx[g] = INT_MAX;
        return;
    }
    float x0, x1, y0, y1;
    corners(boxes + ((long)b * n + i) * 4, &x0, &x1, &y0, &y1);
    __global float* c = corner + ((long)b * n + i) * 4;
    c[0] = x0; c[1] = x1; c[2] = y0; c[3] = y1;
    xkey[g] = ~fkey(x0);
    xidx[g] = i;
}

/* score keys of each (batch, class) row, padded to P; a box at or below score_threshold keys 0 */
__kernel void nms_score_keys(__global const float* scores, __global const float* score_threshold, const int n,
                             const int P, const int total, __global uint* skey, __global int* sidx) {
    const int g = get_global_id(0);
    if (g >= total) return;
    const int r = g / P, i = g - r * P;
    if (i >= n) {
        skey[g] = 0u;
        sidx[g] = INT_MAX;
        return;
    }
    const float s = scores[(long)r * n + i];
#ifdef HAS_SCORE
    skey[g] = s > score_threshold[0] ? max(fkey(s), 1u) : 0u;
#else
    skey[g] = max(fkey(s), 1u);
#endif
    sidx[g] = i;
}

/* one bitonic step over rows of P (key, index) pairs: key descending, index ascending */
__kernel void nms_bitonic(__global uint* key, __global int* idx, const int P, const int j, const int k,
                          const int pairs) {
    const int g = get_global_id(0);
    if (g >= pairs) return;
    const int hp = P >> 1;
    const int r = g / hp, q = g - r * hp;
    const int i = 2 * j * (q / j) + q % j, l = i + j;
    __global uint* kr = key + (long)r * P;
    __global int* ir = idx + (long)r * P;
    const uint ka = kr[i], kb = kr[l];
    const int ia = ir[i], ib = ir[l];
    const int b_first = kb > ka || (kb == ka && ib < ia);
    if (((i & k) == 0) == b_first) {  /* descending blocks want b after a, ascending ones before */
        kr[i] = kb; kr[l] = ka;
        ir[i] = ib; ir[l] = ia;
    }
}

/* the bitonic steps of stages kmin..kmax (doubling) whose pairs lie within chunks of 2 * BW
 * pairs' elements, in local memory: one work-group of BW items per chunk (the steps between
 * chunks are nms_bitonic launches) */
#ifndef BW
#define BW 64
#endif
__kernel __attribute__((reqd_work_group_size(BW, 1, 1)))
void nms_bitonic_local(__global uint* key, __global int* idx, const int P, const int kmin, const int kmax) {
    __local uint lk[2 * BW];
    __local int li[2 * BW];
    const int grp = get_group_id(0), lid = get_local_id(0);
    const int chunks = P / (2 * BW);
    const int r = grp / chunks, ch = grp - r * chunks;
    const long base = (long)r * P + (long)ch * 2 * BW;
    lk[lid] = key[base + lid];
    lk[lid + BW] = key[base + lid + BW];
    li[lid] = idx[base + lid];
    li[lid + BW] = idx[base + lid + BW];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = kmin; k <= kmax; k <<= 1) {
        for (int j = min(k >> 1, BW); j >= 1; j >>= 1) {
            const int i = 2 * j * (lid / j) + lid % j, l = i + j;
            const uint ka = lk[i], kb = lk[l];
            const int ia = li[i], ib = li[l];
            const int b_first = kb > ka || (kb == ka && ib < ia);
            if ((((ch * 2 * BW + i) & k) == 0) == b_first) {
                lk[i] = kb; lk[l] = ka;
                li[i] = ib; li[l] = ia;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    key[base + lid] = lk[lid];
    key[base + lid + BW] = lk[lid + BW];
    idx[base + lid] = li[lid];
    idx[base + lid + BW] = li[lid + BW];
}

/* the same order by a bottom-up merge sort, one work-item per row (the CPU family's row: its
 * work-items run one after another, where the bitonic steps' barriers and launches cost more
 * than the sort); tk/ti scratch of the same size; the result ends in key/idx */
inline int pair_first(const uint ka, const int ia, const uint kb, const int ib) {
    return ka > kb || (ka == kb && ia < ib);
}

__kernel void nms_merge_sort(__global uint* key, __global int* idx, __global uint* tk, __global int* ti,
                             const int P, const int rows) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    __global uint* sk = key + (long)r * P;
    __global int* si = idx + (long)r * P;
    __global uint* dk = tk + (long)r * P;
    __global int* di = ti + (long)r * P;
    for (int w = 1; w < P; w <<= 1) {
        for (int lo = 0; lo < P; lo += 2 * w) {
            const int mid = min(lo + w, P), hi = min(lo + 2 * w, P);
            int a = lo, b = mid, o = lo;
            while (a < mid && b < hi) {
                if (pair_first(sk[b], si[b], sk[a], si[a])) { dk[o] = sk[b]; di[o] = si[b]; ++b; }
                else { dk[o] = sk[a]; di[o] = si[a]; ++a; }
                ++o;
            }
            for (; a < mid; ++a, ++o) { dk[o] = sk[a]; di[o] = si[a]; }
            for (; b < hi; ++b, ++o) { dk[o] = sk[b]; di[o] = si[b]; }
        }
        __global uint* t0 = sk; sk = dk; dk = t0;
        __global int* t1 = si; si = di; di = t1;
    }
    if (sk != key + (long)r * P)  /* an odd number of passes: the result is in the scratch */
        for (int t = 0; t < P; ++t) { dk[t] = sk[t]; di[t] = si[t]; }
}

/* xc[b, t] = the corners of the t-th box of batch b in x order; xplace[b, box] = t */
__kernel void nms_xs(__global const int* xidx, __global const float* corner, const int n, const int P,
                     const int total, __global float* xc, __global int* xplace) {
    const int g = get_global_id(0);
    if (g >= total) return;
    const int b = g / n, t = g - b * n;
    const int box = xidx[(long)b * P + t];
    __global const float* c = corner + ((long)b * n + box) * 4;
    __global float* o = xc + (long)g * 4;
    o[0] = c[0]; o[1] = c[1]; o[2] = c[2]; o[3] = c[3];
    xplace[(long)b * n + box] = t;
}

/* rkx[r, t] = the score place in row r of the box at x place t; deadx[r, t] = 0 */
__kernel void nms_ranks(__global const int* sidx, __global const int* xplace, const int classes, const int n,
                        const int P, const int total, __global int* rkx, __global uchar* deadx) {
    const int g = get_global_id(0);
    if (g >= total) return;
    const int r = g / n, t = g - r * n;
    const int b = r / classes;
    rkx[(long)r * n + xplace[(long)b * n + sidx[(long)r * P + t]]] = t;
    deadx[g] = 0;
}

/* overlaps() on boxes already in corner form (x0, x1, y0, y1) */
inline int overlaps_c(__global const float* a, __global const float* b, const float thr) {
    return iou_above(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], thr);
}

/* the first x place in [0, n) whose x_min is >= v (xc: corners in x order) */
inline int lower_bound(__global const float* xc, const int n, const float v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (xc[(long)mid * 4] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void nms_sorted(__global const float* xc, __global const int* xplace, __global const uint* skey,
                __global const int* sidx, __global const int* rkx, const int classes, const int n, const int P,
                const int cap, __global const long* max_per_class, __global const float* iou_threshold,
                __global uchar* deadx, __global int* sel, __global int* counts) {
    const int limit = nms_limit(max_per_class, cap);
    const float iou_thr = nms_iou_threshold(iou_threshold);
    __local float wide[WG];
    const int row = get_group_id(0), lid = get_local_id(0);
    const int b = row / classes;
    __global const float* cb = xc + (long)b * n * 4;  /* corners in x order */
    __global const int* xp = xplace + (long)b * n;
    __global const int* rk = rkx + (long)row * n;  /* score places in x order */
    __global uchar* dd = deadx + (long)row * n;  /* suppressed, in x order */
    /* the widest box of the batch: a box can only meet those whose x_min lies within it of its own */
    float w = 0.0f;
    for (int i = lid; i < n; i += WG) w = fmax(w, cb[i * 4 + 1] - cb[i * 4]);
    wide[lid] = w;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) wide[lid] = fmax(wide[lid], wide[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float widest = wide[0];
    /* candidates: the keys above 0 (sorted first) */
    __global const uint* kr = skey + (long)row * P;
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (kr[mid] > 0u) lo = mid + 1; else hi = mid;
    }
    const int ncand = lo;
    int kept = 0;
    for (int r = 0; r < ncand && kept < limit; ++r) {
        barrier(CLK_GLOBAL_MEM_FENCE);
        const int box = sidx[(long)row * P + r];
        const int tx = xp[box];
        if (!dd[tx]) {
            if (lid == 0) sel[(long)row * cap + kept] = box;
            ++kept;
            __global const float* c = cb + (long)tx * 4;
            /* a box reaching past x_min is at most `widest` wide: x_min at most that far before (with
             * a margin for the rounding of widths), and never at or past x_max */
            const float reach = widest * 1.0001f + fabs(c[0]) * 1e-6f;
            const int t0 = lower_bound(cb, n, c[0] - reach), t1 = lower_bound(cb, n, c[1]);
            for (int t = t0 + lid; t < t1; t += WG)
                if (rk[t] > r && !dd[t] && overlaps_c(c, cb + (long)t * 4, iou_thr)) dd[t] = 1;
        }
    }
    if (lid == 0) counts[row] = kept;
}
