/* Index arithmetic for broadcasting and strided kernels, shared by elementwise.cl,
 * movement.cl and fused_elementwise.cl.
 *
 * bcast_offsets: the offsets of flat output element i in `nops` operands. meta holds the
 * (collapsed) dims[rank], then one row of `rank` element strides per operand (0 where the
 * operand is broadcast). One division per dim per element: the fallback layout.
 *
 * The row layout (the fast one, chosen by lower/elementwise.py's row_layout): gsize = (the
 * last dim in runs of ROW_VEC elements, the other dims flattened), each rounded up to
 * ROW_GROUP, and the host computes every row's start offset per operand (rowoff[row * nops + k])
 * and each operand's stride along the row (last[k]): no division per element. ROW_STEP(k, j)
 * is operand k's offset along the row: j * ROW_S<k> when the host passed that stride as a
 * define (0: broadcast, 1: contiguous), else j * last[k], read at run time.
 *
 * ROW_LOOP(j0, inner, BODY): BODY for j = j0 .. j0 + ROW_VEC - 1, unrolled when the run is
 * whole, else up to the row's end. A work-item's run of a contiguous or broadcast row is then
 * one vector load/store per operand: with restrict pointers (a kernel's output never shares
 * memory with its inputs: the buffer planner keeps them apart) the compiler vectorises within
 * the work-item. Measured on pocl (AVX-512), X[160, 784] * s[160]: 82-120 us with one element
 * per work-item in 32 x 8 groups, 10-16 us this way; [2048, 64] rows 164 -> 14 us. */
#ifndef BCAST_INDEX_H
#define BCAST_INDEX_H

#ifdef ROW_S0
#define ROW_STEP0(j) ((j) * ROW_S0)
#else
#define ROW_STEP0(j) ((j) * last[0])
#endif
#ifdef ROW_S1
#define ROW_STEP1(j) ((j) * ROW_S1)
#else
#define ROW_STEP1(j) ((j) * last[1])
#endif
#ifdef ROW_S2
#define ROW_STEP2(j) ((j) * ROW_S2)
#else
#define ROW_STEP2(j) ((j) * last[2])
#endif
#ifdef ROW_S3
#define ROW_STEP3(j) ((j) * ROW_S3)
#else
#define ROW_STEP3(j) ((j) * last[3])
#endif
#define ROW_STEP(k, j) ROW_STEP##k(j)

#define ROW_VEC 16
#define ROW_LOOP(j0, inner, ...) do {                                    \
        if ((j0) + ROW_VEC <= (inner)) {                                 \
            _Pragma("unroll") for (int t_ = 0; t_ < ROW_VEC; ++t_) {    \
                const int j = (j0) + t_;                                 \
                __VA_ARGS__;                                             \
            }                                                            \
        } else {                                                         \
            for (int j = (j0); j < (inner); ++j) {                       \
                __VA_ARGS__;                                             \
            }                                                            \
        }                                                                \
    } while (0)

inline void bcast_offsets(int i, __global const int* restrict meta, const int rank, const int nops, int* off) {
    for (int k = 0; k < nops; ++k)
        off[k] = 0;
    int rem = i;
    for (int d = rank - 1; d > 0; --d) {
        const int dim = meta[d];
        const int q = rem / dim;
        const int r = rem - q * dim;
        for (int k = 0; k < nops; ++k)
            off[k] += r * meta[(k + 1) * rank + d];
        rem = q;
    }
    for (int k = 0; k < nops; ++k)
        off[k] += rem * meta[(k + 1) * rank];
}

#endif
