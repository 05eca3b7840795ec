/* Det: one work-item per square matrix, LU factorisation with partial pivoting (the row of the
 * largest magnitude in each column, as LAPACK's getrf) on a private copy in scratch memory; the
 * determinant is the product of the pivots, negated per row swap. A zero column gives 0.
 *   T  float type (float, or double with USE_FP64)
 * x [n_mat, n, n], a scratch [n_mat, n, n], y [n_mat]
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif

__kernel void det(__global const T* x, __global T* a, __global T* y, const int n_mat, const int n) {
    const int g = get_global_id(0);
    if (g >= n_mat) return;
    const long nn = (long)n * n;
    __global const T* src = x + g * nn;
    __global T* m = a + g * nn;
    for (long e = 0; e < nn; ++e) m[e] = src[e];
    T det = 1;
    for (int k = 0; k < n; ++k) {
        int p = k;
        T best = fabs(m[(long)k * n + k]);
        for (int i = k + 1; i < n; ++i) {
            const T v = fabs(m[(long)i * n + k]);
            if (v > best) {
                best = v;
                p = i;
            }
        }
        if (best == (T)0) {
            det = 0;
            break;
        }
        if (p != k) {
            for (int j = k; j < n; ++j) {
                const T t = m[(long)k * n + j];
                m[(long)k * n + j] = m[(long)p * n + j];
                m[(long)p * n + j] = t;
            }
            det = -det;
        }
        const T piv = m[(long)k * n + k];
        det *= piv;
        for (int i = k + 1; i < n; ++i) {
            const T f = m[(long)i * n + k] / piv;
            for (int j = k + 1; j < n; ++j) m[(long)i * n + j] -= f * m[(long)k * n + j];
        }
    }
    y[g] = det;
}
