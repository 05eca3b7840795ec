/* Normalisations (float32). Shapes are run-time arguments; row/channel reductions use one
 * work-item per row (fast on CPU devices, correct everywhere).
 *   HAS_BIAS   LayerNormalization/InstanceNormalization add a bias
 */

/* BatchNormalization parameters -> per-channel (a, b) with y = x * a + b; ab = [a[C], b[C]]. */
__kernel void bn_prepare(__global const float* scale, __global const float* bias, __global const float* mean,
                         __global const float* var, __global float* ab, const int C, const float eps) {
    const int c = get_global_id(0);
    if (c >= C) return;
    const float a = scale[c] / sqrt(var[c] + eps);
    ab[c] = a;
    ab[C + c] = bias[c] - mean[c] * a;
}

/* y = x * a[c] + b[c] for x of shape (N, C, inner). */
__kernel void channel_affine(__global const float* x, __global const float* ab, __global float* y, const int n,
                             const int C, const int inner) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = (i / inner) % C;
    y[i] = x[i] * ab[c] + ab[C + c];
}

/* LRN across channels: y = x / (bias + alpha / size * sum of squares in the window) ^ beta. */
__kernel void lrn(__global const float* x, __global float* y, const int n, const int C, const int inner,
                  const int size, const float alpha, const float beta, const float bias) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int c = (i / inner) % C;
    const int lo = max(0, c - (size - 1) / 2);
    const int hi = min(C - 1, c + size / 2);  /* ceil((size - 1) / 2) == size / 2 */
    const int base = i - c * inner;
    float s = 0.0f;
    for (int k = lo; k <= hi; ++k) {
        const float v = x[base + k * inner];
        s += v * v;
    }
    y[i] = x[i] / pow(bias + alpha / (float)size * s, beta);
}

/* LayerNormalization: rows of `len` contiguous elements; scale/bias have `len` elements. */
__kernel void layernorm(__global const float* x, __global const float* scale,
#ifdef HAS_BIAS
                        __global const float* bias,
#endif
                        __global float* y, const int rows, const int len, const float eps) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    __global const float* xr = x + (long)r * len;
    __global float* yr = y + (long)r * len;
    float m = 0.0f;
    for (int k = 0; k < len; ++k) m += xr[k];
    m /= (float)len;
    float v = 0.0f;
    for (int k = 0; k < len; ++k) {
        const float d = xr[k] - m;
        v += d * d;
    }
    const float inv = 1.0f / sqrt(v / (float)len + eps);
    for (int k = 0; k < len; ++k) {
#ifdef HAS_BIAS
        yr[k] = (xr[k] - m) * inv * scale[k] + bias[k];
#else
        yr[k] = (xr[k] - m) * inv * scale[k];
#endif
    }
}

/* InstanceNormalization: one work-item per (n, c) plane of `len` elements. */
__kernel void instancenorm(__global const float* x, __global const float* scale, __global const float* bias,
                           __global float* y, const int planes, const int C, const int len, const float eps) {
    const int p = get_global_id(0);
    if (p >= planes) return;
    const int c = p % C;
    __global const float* xr = x + (long)p * len;
    __global float* yr = y + (long)p * len;
    float m = 0.0f;
    for (int k = 0; k < len; ++k) m += xr[k];
    m /= (float)len;
    float v = 0.0f;
    for (int k = 0; k < len; ++k) {
        const float d = xr[k] - m;
        v += d * d;
    }
    const float a = scale[c] / sqrt(v / (float)len + eps);
    const float b = bias[c] - m * a;
    for (int k = 0; k < len; ++k) yr[k] = xr[k] * a + b;
}
