/* Index arithmetic for broadcasting and strided kernels, shared by elementwise.cl,
 * movement.cl and fused_elementwise.cl.
 *
 * bcast_offsets: the offsets of flat output element i in `nops` operands. meta holds the
 * (collapsed) dims[rank], then one row of `rank` element strides per operand (0 where the
 * operand is broadcast). One division per dim per element: the fallback layout.
 *
 * The row layout (the fast one, chosen by lower/elementwise.py's row_layout): gsize = (the
 * last dim, the other dims flattened), each rounded up to ROW_GROUP, and the host computes
 * every row's start offset per operand (rowoff[row * nops + k]) and each operand's stride
 * along the row (last[k]): no division per element. ROW_STEP(k, j) is operand k's offset
 * along the row: j * ROW_S<k> when the host passed that stride as a define (0: broadcast,
 * 1: contiguous; consecutive work-items then touch one value or consecutive elements, which
 * the driver turns into vector operations), else j * last[k], read at run time. */
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
