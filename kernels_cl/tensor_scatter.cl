/* TensorScatter (opset 24): present = past with update's S rows written along the sequence axis
 * at write_indices[batch] (linear) or at that offset modulo the axis length L (circular). One
 * work-item per output element, so no element is written twice and the copy of past needs no
 * separate pass; an update row a linear write would put past the end is dropped.
 *   T  storage type of one element (the bits are moved, any dtype)
 * dims = [L, S, inner, batch_stride]: outer index = batch * batch_stride + (dims between)
 */
#ifndef T
#define T uint
#endif

__kernel void tensor_scatter(__global const T* past, __global const T* upd, __global const long* widx,
                             __global T* out, const int n, __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n) return;
    const int L = d[0], S = d[1], inner = d[2], per_batch = d[3];
    const int e = g % inner;
    const int r = g / inner;
    const int p = r % L;
    const int o = r / L;
#ifdef NO_INDICES
    const long w = 0;
#else
    const long w = widx[o / per_batch];
#endif
    long s = (long)p - w;
#ifdef CIRCULAR
    s %= L;
    if (s < 0) s += L;
#endif
    out[g] = (s >= 0 && s < S) ? upd[((long)o * S + s) * inner + e] : past[g];
}
