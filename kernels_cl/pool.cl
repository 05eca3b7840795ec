/* Pooling over up to 3 spatial dims (1-D and 2-D are padded with unit dims), one output
 * element per work-item.
 *   T               element type (float)
 *   POOL_MAX / POOL_AVG
 *   COUNT_INCLUDE_PAD   AveragePool divides by the window clipped to the padded extent
 *   WITH_INDICES    MaxPool also writes the flat (row-major, whole tensor) argmax as long
 * p (int32): in[3], out[3], kernel[3], stride[3], pad_begin[3], pad_end[3], dilation[3].
 */
#ifndef T
#define T float
#endif

__kernel void pool(__global const T* x, __global T* y,
#ifdef WITH_INDICES
                   __global long* ind,
#endif
                   const int n, __global const int* restrict p) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int ID = p[0], IH = p[1], IW = p[2];
    const int OD = p[3], OH = p[4], OW = p[5];
    const int ow = i % OW;
    const int t1 = i / OW;
    const int oh = t1 % OH;
    const int t2 = t1 / OH;
    const int od = t2 % OD;
    const int nc = t2 / OD;
    const int d0 = od * p[9] - p[12], h0 = oh * p[10] - p[13], w0 = ow * p[11] - p[14];
    __global const T* xc = x + (long)nc * ID * IH * IW;
#ifdef POOL_MAX
    T best = -INFINITY;
    long arg = -1;
#else
    float acc = 0.0f;
    int cnt = 0;
#endif
    for (int kd = 0; kd < p[6]; ++kd) {
        const int id = d0 + kd * p[18];
#if defined(POOL_AVG) && defined(COUNT_INCLUDE_PAD)
        const int din = (id >= -p[12] && id < ID + p[15]);
#endif
        for (int kh = 0; kh < p[7]; ++kh) {
            const int ih = h0 + kh * p[19];
#if defined(POOL_AVG) && defined(COUNT_INCLUDE_PAD)
            const int hin = din && (ih >= -p[13] && ih < IH + p[16]);
#endif
            for (int kw = 0; kw < p[8]; ++kw) {
                const int iw = w0 + kw * p[20];
                const int inside = id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW;
#if defined(POOL_AVG) && defined(COUNT_INCLUDE_PAD)
                cnt += hin && (iw >= -p[14] && iw < IW + p[17]);
#elif defined(POOL_AVG)
                cnt += inside;
#endif
                if (!inside) continue;
                const int off = (id * IH + ih) * IW + iw;
                const T v = xc[off];
#ifdef POOL_MAX
                if (v > best || arg < 0) { best = v; arg = off; }
#else
                acc += v;
#endif
            }
        }
    }
#ifdef POOL_MAX
    y[i] = best;
#ifdef WITH_INDICES
    ind[i] = arg < 0 ? 0 : (long)nc * ID * IH * IW + arg;
#endif
#else
    y[i] = cnt > 0 ? acc / (float)cnt : 0.0f;
#endif
}

/* Global pooling: one work-item per (n, c) plane of `len` elements. */
__kernel void global_pool(__global const T* x, __global T* y, const int nc, const int len) {
    const int i = get_global_id(0);
    if (i >= nc) return;
    __global const T* xc = x + (long)i * len;
#ifdef POOL_MAX
    T best = -INFINITY;
    for (int k = 0; k < len; ++k) best = xc[k] > best ? xc[k] : best;
    y[i] = best;
#else
    float acc = 0.0f;
    for (int k = 0; k < len; ++k) acc += xc[k];
    y[i] = acc / (float)len;
#endif
}
