/* Col2Im (N-D): one work-item per image element gathers the column entries that land on it, so
 * no two work-items write one element (no atomics) and the sum order is fixed. Per dim, the
 * kernel offsets whose block covers the element (at most MAXK) are listed once, then their
 * product is walked with a counter: a few divisions per element, not a few per tap.
 *   T   float type;  ND  spatial dims;  MAXK  the largest block dim
 * meta (int32): image[ND], block[ND], dilations[ND], begin pads[ND], strides[ND], columns[ND]
 * (the number of blocks along each dim); col is [planes, prod(block), prod(columns)]. */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef ND
#define ND 2
#endif
#ifndef MAXK
#define MAXK 8
#endif

__kernel void col2im(__global const T* col, __global T* im, const int n_out, const int K, const int L,
                     __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n_out) return;
    int kof[ND][MAXK], cof[ND][MAXK], cnt[ND];
    int rem = i;
    for (int d = ND - 1; d >= 0; --d) {
        const int pos = rem % meta[d];
        rem /= meta[d];
        const int kd = meta[ND + d], dil = meta[2 * ND + d], s = meta[4 * ND + d], nc = meta[5 * ND + d];
        int kstride = 1, cstride = 1;
        for (int e = d + 1; e < ND; ++e) {
            kstride *= meta[ND + e];
            cstride *= meta[5 * ND + e];
        }
        int m = 0;
        for (int kk = 0; kk < kd; ++kk) {
            const int t = pos + meta[3 * ND + d] - kk * dil;
            if (t < 0) break;  /* t falls as kk grows */
            const int c = t / s;
            if (c * s == t && c < nc) {
                kof[d][m] = kk * kstride;
                cof[d][m] = c * cstride;
                ++m;
            }
        }
        cnt[d] = m;
        if (m == 0) {
            im[i] = (T)0;
            return;
        }
    }
    __global const T* base = col + (long)rem * K * L;
    int idx[ND];
    for (int d = 0; d < ND; ++d) idx[d] = 0;
    T acc = (T)0;
    for (;;) {
        int kf = 0, cf = 0;
        for (int d = 0; d < ND; ++d) {
            kf += kof[d][idx[d]];
            cf += cof[d][idx[d]];
        }
        acc += base[(long)kf * L + cf];
        int d = ND - 1;
        while (d >= 0 && ++idx[d] == cnt[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    im[i] = acc;
}

/* The 2-D case: gsize = (W, H, planes); the taps walked in the same order as col2im's (kernel
 * row, then column) with loops of uniform trip count, which a driver can vectorise across
 * work-items. m = [H, W, KH, KW, dil h, w, pad h, w, stride h, w, columns h, w]. */
__kernel void col2im_2d(__global const T* col, __global T* im, const int planes, __global const int* restrict m) {
    const int x = get_global_id(0), y = get_global_id(1), pl = get_global_id(2);
    const int H = m[0], W = m[1], KH = m[2], KW = m[3], CH = m[10], CW = m[11];
    if (x >= W || y >= H || pl >= planes) return;
    const int L = CH * CW;
    __global const T* base = col + (long)pl * KH * KW * L;
    T acc = (T)0;
    for (int kh = 0; kh < KH; ++kh) {
        const int th = y + m[6] - kh * m[4];
#ifdef STRIDE1  /* strides of 1: no division per tap */
        const int ch = th;
#else
        const int ch = th / m[8];
#endif
        const int okh = th >= 0 && ch * m[8] == th && ch < CH;
        for (int kw = 0; kw < KW; ++kw) {
            const int tw = x + m[7] - kw * m[5];
#ifdef STRIDE1
            const int cw = tw;
#else
            const int cw = tw / m[9];
#endif
            if (okh && tw >= 0 && cw * m[9] == tw && cw < CW) acc += base[(kh * KW + kw) * L + ch * CW + cw];
        }
    }
    im[((long)pl * H + y) * W + x] = acc;
}
