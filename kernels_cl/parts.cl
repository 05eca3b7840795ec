/* Concat and Split of up to four parts in one launch.
 *
 * Both see the tensor as [outer, W] rows (W = the concatenated axis times what follows it) made of
 * parts [outer, w_p] side by side (W = w0 + w1 + w2 + w3, an absent part has w_p = 0 and is never
 * touched). A decode step concatenates its past keys and values with the new token's, and splits
 * the fused QKV projection in three: small tensors, where each part's copy as a launch of its
 * own costs more than the bytes it moves.
 *   T      element storage type (bits are moved)
 *   VT     (optional) T16 vector of 16 elements, when every w_p is a multiple of 16: each
 *          work-item's 16 elements then lie in one part and move as one vector
 * Work-item (c, o) moves elements 16c .. 16c + 15 of row o.
 */
#ifndef T
#define T uint
#endif
#ifdef VT
typedef VT vt_u __attribute__((aligned(4)));
#endif

/* part p of element j of a row (r: j's offset within part p) */
inline int part_of(int j, const int w0, const int w1, const int w2, int* r) {
    if (j < w0) { *r = j; return 0; }
    j -= w0;
    if (j < w1) { *r = j; return 1; }
    j -= w1;
    if (j < w2) { *r = j; return 2; }
    *r = j - w2;
    return 3;
}

#define PART_PTR(p, b0, b1, b2, b3) ((p) == 0 ? (b0) : (p) == 1 ? (b1) : (p) == 2 ? (b2) : (b3))
#define PART_W(p) ((p) == 0 ? w0 : (p) == 1 ? w1 : (p) == 2 ? w2 : w3)

__kernel void concat_parts(__global const T* x0, __global const T* x1, __global const T* x2,
                           __global const T* x3, __global T* y, const int w0, const int w1, const int w2,
                           const int w3, const int outer) {
    const int W = w0 + w1 + w2 + w3;
    const int j0 = get_global_id(0) * 16;
    const int o = get_global_id(1);
    if (j0 >= W || o >= outer) return;
#ifdef VT
    int r;
    const int p = part_of(j0, w0, w1, w2, &r);
    const __global T* src = PART_PTR(p, x0, x1, x2, x3) + (long)o * PART_W(p) + r;
    *(__global vt_u*)(y + (long)o * W + j0) = *(const __global vt_u*)src;
#else
    const int j1 = min(j0 + 16, W);
    for (int j = j0; j < j1; ++j) {
        int r;
        const int p = part_of(j, w0, w1, w2, &r);
        y[(long)o * W + j] = PART_PTR(p, x0, x1, x2, x3)[(long)o * PART_W(p) + r];
    }
#endif
}

__kernel void split_parts(__global const T* x, __global T* y0, __global T* y1, __global T* y2, __global T* y3,
                          const int w0, const int w1, const int w2, const int w3, const int outer) {
    const int W = w0 + w1 + w2 + w3;
    const int j0 = get_global_id(0) * 16;
    const int o = get_global_id(1);
    if (j0 >= W || o >= outer) return;
#ifdef VT
    int r;
    const int p = part_of(j0, w0, w1, w2, &r);
    __global T* dst = PART_PTR(p, y0, y1, y2, y3) + (long)o * PART_W(p) + r;
    *(__global vt_u*)dst = *(const __global vt_u*)(x + (long)o * W + j0);
#else
    const int j1 = min(j0 + 16, W);
    for (int j = j0; j < j1; ++j) {
        int r;
        const int p = part_of(j, w0, w1, w2, &r);
        PART_PTR(p, y0, y1, y2, y3)[(long)o * PART_W(p) + r] = x[(long)o * W + j];
    }
#endif
}
