/* Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (which is LogSoftmax over
 * axis 1 followed by the NLL kernels).
 *   T    float type of the scores (float or double)
 *   TI   index type of the targets (int or long)
 *   HAS_WEIGHT   per-class weights are given
 * Layout: scores (N, C, D) with D the product of the trailing dims, targets (N, D).
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef TI
#define TI long
#endif

/* log_softmax over C for each (n, d): one work-item per (n, d). */
__kernel void log_softmax_c(__global const T* x, __global T* y, const int rows, const int C, const int D) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    const int n = i / D;
    const int d = i - n * D;
    const long base = (long)n * C * D + d;
    T m = -INFINITY;
    for (int c = 0; c < C; ++c) m = fmax(m, x[base + (long)c * D]);
    T s = 0;
    for (int c = 0; c < C; ++c) s += exp(x[base + (long)c * D] - m);
    const T ls = m + log(s);
    for (int c = 0; c < C; ++c) y[base + (long)c * D] = x[base + (long)c * D] - ls;
}

/* loss[n, d] = -w * x[n, t, d] and wout[n, d] = w, with w = weight[t] (or 1), 0 where t == ignore. */
__kernel void nll_elem(__global const T* x, __global const TI* target,
#ifdef HAS_WEIGHT
                       __global const T* weight,
#endif
                       __global T* loss, __global T* wout, const int rows, const int C, const int D,
                       const long ignore, const int has_ignore) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    const int n = i / D;
    const int d = i - n * D;
    const long t0 = (long)target[i];
    long t = t0 < 0 ? 0 : (t0 >= C ? C - 1 : t0);
    T w = 1;
#ifdef HAS_WEIGHT
    w = weight[t];
#endif
    if (has_ignore && t0 == ignore) w = 0;
    loss[i] = w == 0 ? (T)0 : -x[((long)n * C + t) * D + d] * w;
    wout[i] = w;
}

/* out[0] = sum(loss) (MEAN: divided by sum(w)); one work-item, deterministic order. */
__kernel void nll_reduce(__global const T* loss, __global const T* w, __global T* out, const int rows,
                         const int mean) {
    if (get_global_id(0) != 0) return;
    T s = 0, sw = 0;
    for (int i = 0; i < rows; ++i) {
        s += loss[i];
        sw += w[i];
    }
    out[0] = mean ? s / sw : s;
}
