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
 * along the row (last[k]): no division per element. */
#ifndef BCAST_INDEX_H
#define BCAST_INDEX_H

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
