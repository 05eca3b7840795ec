/* GridSample: one work-item per output element (n, c, spatial...), up to 3 spatial dims.
 *   T       float type;  SD  number of spatial dims (1..3)
 *   MODE    0 nearest, 1 linear, 2 cubic;  PAD  0 zeros, 1 border, 2 reflection;  ALIGN  align_corners
 * dims = [N, C, in spatial[SD], out spatial[SD]]
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef SD
#define SD 2
#endif

inline float gs_reflect(float x, float lo, float hi) {
    const float rng = hi - lo;
    if (x < lo) {
        const float dx = lo - x;
        const int n = (int)(dx / rng);
        const float r = dx - n * rng;
        return (n % 2 == 0) ? lo + r : hi - r;
    }
    if (x > hi) {
        const float dx = x - hi;
        const int n = (int)(dx / rng);
        const float r = dx - n * rng;
        return (n % 2 == 0) ? hi - r : lo + r;
    }
    return x;
}

/* index along one dim after padding; -1 means "zero" (zeros padding out of range). */
inline int gs_index(int i, int d, float lo, float hi) {
#if PAD == 0
    return (i >= 0 && i < d) ? i : -1;
#elif PAD == 1
    return clamp(i, 0, d - 1);
#else
    i = (int)gs_reflect((float)i, lo, hi);
    return clamp(i, 0, d - 1);
#endif
}

inline void gs_cubic(float x, float* c) {
    const float a = -0.75f;
    x = fabs(x);
    c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
    c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

__kernel void grid_sample(__global const T* x, __global const T* grid, __global T* y, const int n_out,
                          __global const int* restrict dims) {
    const int i = get_global_id(0);
    if (i >= n_out) return;
    const int C = dims[1];
    int osz = 1, isz = 1;
    int o[SD];
    int rem = i;
    for (int k = SD - 1; k >= 0; --k) {
        const int od = dims[2 + SD + k];
        o[k] = rem % od;
        rem /= od;
        osz *= od;
        isz *= dims[2 + k];
    }
    const int c = rem % C;
    const int n = rem / C;
    const int opos = i % osz;
    __global const T* g = grid + ((long)n * osz + opos) * SD;
    __global const T* xp = x + ((long)n * C + c) * isz;
    float v[SD], lo[SD], hi[SD];
    int base[SD];
    float w[SD][4];
    for (int k = 0; k < SD; ++k) {
        const int d = dims[2 + k];
        const float gn = (float)g[SD - 1 - k];
#ifdef ALIGN
        float p = (gn + 1) / 2.0f * (d - 1);
        lo[k] = 0.0f;
        hi[k] = d - 1.0f;
#else
        float p = ((gn + 1) * d - 1) / 2.0f;
        lo[k] = -0.5f;
        hi[k] = d - 0.5f;
#endif
#if MODE == 0
        p = rint(p);
#endif
        if (p < lo[k] || p > hi[k]) {
#if PAD == 1
            p = clamp(p, 0.0f, d - 1.0f);
#elif PAD == 2
            p = gs_reflect(p, lo[k], hi[k]);
#endif
        }
        v[k] = p;
#if MODE == 0
        base[k] = (int)p;
        w[k][0] = 1.0f;
#elif MODE == 1
        base[k] = (int)floor(p);
        w[k][1] = p - base[k];
        w[k][0] = 1.0f - w[k][1];
#else
        base[k] = (int)floor(p) - 1;
        gs_cubic(p - floor(p), w[k]);
#endif
    }
#if MODE == 0
#define TAPS 1
#elif MODE == 1
#define TAPS 2
#else
#define TAPS 4
#endif
    int ntaps = 1;
    for (int k = 0; k < SD; ++k) ntaps *= TAPS;
    float acc = 0.0f;
    for (int t = 0; t < ntaps; ++t) {
        int tr = t;
        float wt = 1.0f;
        long off = 0;
        int zero = 0;
        for (int k = SD - 1; k >= 0; --k) {
            const int tk = tr % TAPS;
            tr /= TAPS;
            const int idx = gs_index(base[k] + tk, dims[2 + k], lo[k], hi[k]);
            if (idx < 0) zero = 1;
            wt *= w[k][tk];
            int stride = 1;
            for (int kk = k + 1; kk < SD; ++kk) stride *= dims[2 + kk];
            off += (long)idx * stride;
        }
        if (!zero) acc += wt * (float)xp[off];
    }
    y[i] = (T)acc;
}
