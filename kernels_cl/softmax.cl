/* Softmax / LogSoftmax along one axis: one work-item per row of `len` elements that sit
 * `inner` apart (inner = 1 for the last axis and for the opset < 13 flattened form).
 * Three passes over the row (max, sum of exp, write) keep it numerically safe; one
 * work-item per row is the fast layout on CPU devices and correct on any device.
 *   LOG_SOFTMAX   write x - max - log(sum) instead of exp(x - max) / sum
 */
__kernel void softmax(__global const float* x, __global float* y, const int rows, const int len,
                      const int inner) {
    const int i = get_global_id(0);
    if (i >= rows) return;
    const int o = i / inner;
    const int r = i - o * inner;
    const long base = (long)o * len * inner + r;
    __global const float* xr = x + base;
    __global float* yr = y + base;
    float m = -INFINITY;
    for (int k = 0; k < len; ++k) m = fmax(m, xr[(long)k * inner]);
    float s = 0.0f;
    for (int k = 0; k < len; ++k) s += exp(xr[(long)k * inner] - m);
#ifdef LOG_SOFTMAX
    const float ls = m + log(s);
    for (int k = 0; k < len; ++k) yr[(long)k * inner] = xr[(long)k * inner] - ls;
#else
    const float inv = 1.0f / s;
    for (int k = 0; k < len; ++k) yr[(long)k * inner] = exp(xr[(long)k * inner] - m) * inv;
#endif
}
