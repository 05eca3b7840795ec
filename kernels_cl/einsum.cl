/* Einsum, any equation over 1-3 operands: one work-item per output element sums the products over
 * the contracted index space. Repeated letters (diagonals) and broadcast ellipsis dims are folded
 * into per-letter strides on the host.
 *   T    element type;  NIN  number of operands;  NO / NS  output / summed letters (NO, NS >= 1)
 * meta (int32): out dims[NO], sum dims[NS], then per operand strides over out letters[NO], sum letters[NS].
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef NIN
#define NIN 2
#endif

__kernel void einsum(__global const T* a,
#if NIN > 1
                     __global const T* b,
#endif
#if NIN > 2
                     __global const T* c,
#endif
                     __global T* y, const int n, const int nsum, __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    __global const int* st = meta + NO + NS;
    long oa = 0, ob = 0, oc = 0;
    int rem = i;
    for (int d = NO - 1; d >= 0; --d) {
        const int dim = meta[d];
        const int q = rem / dim;
        const int r = rem - q * dim;
        rem = q;
        oa += (long)r * st[d];
#if NIN > 1
        ob += (long)r * st[(NO + NS) + d];
#endif
#if NIN > 2
        oc += (long)r * st[2 * (NO + NS) + d];
#endif
    }
    T acc = 0;
    for (int s = 0; s < nsum; ++s) {
        long pa = oa, pb = ob, pc = oc;
        int rs = s;
        for (int d = NS - 1; d >= 0; --d) {
            const int dim = meta[NO + d];
            const int q = rs / dim;
            const int r = rs - q * dim;
            rs = q;
            pa += (long)r * st[NO + d];
#if NIN > 1
            pb += (long)r * st[(NO + NS) + NO + d];
#endif
#if NIN > 2
            pc += (long)r * st[2 * (NO + NS) + NO + d];
#endif
        }
        T p = a[pa];
#if NIN > 1
        p *= b[pb];
#endif
#if NIN > 2
        p *= c[pc];
#endif
        acc += p;
    }
    y[i] = acc;
}
