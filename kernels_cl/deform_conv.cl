/* DeformConv (2-D) as a deformable im2col and a grouped matrix product.
 *   T  float type;  HAS_MASK  a mask input;  HAS_BIAS  a bias input
 * dims (int32): N, IC, IH, IW, OH, OW, KH, KW, stride h, w, begin pad h, w, dilation h, w,
 * offset groups, groups, OC. */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif

/* The input sampled bilinearly at (h, w) in pixels, taps outside the image reading 0
 * (GridSample linear, zeros, align_corners, as the spec defines DeformConv). Branch-free: the
 * taps' indices are clamped into the image and their weights zeroed outside, so a driver can
 * vectorise across work-items. */
inline T dc_sample(__global const T* xp, int IH, int IW, T h, T w) {
    /* clamped where every tap is outside anyway (no int overflow); floor by truncation and a
     * compare (the floor builtin made the kernel 2x slower on pocl: 109 vs 44-56 ms, under load) */
    h = clamp(h, (T)(-2), (T)(IH + 1));
    w = clamp(w, (T)(-2), (T)(IW + 1));
    const int th = (int)h, tw = (int)w;
    const int h0 = th - (h < (T)th), w0 = tw - (w < (T)tw), h1 = h0 + 1, w1 = w0 + 1;
    const T lh = h - (T)h0, lw = w - (T)w0;
    const T ah = (h0 >= 0 && h0 < IH) ? (T)1 - lh : (T)0, bh = (h1 >= 0 && h1 < IH) ? lh : (T)0;
    const T aw = (w0 >= 0 && w0 < IW) ? (T)1 - lw : (T)0, bw = (w1 >= 0 && w1 < IW) ? lw : (T)0;
    const int r0 = clamp(h0, 0, IH - 1) * IW, r1 = clamp(h1, 0, IH - 1) * IW;
    const int c0 = clamp(w0, 0, IW - 1), c1 = clamp(w1, 0, IW - 1);
    return ah * (aw * xp[r0 + c0] + bw * xp[r0 + c1]) + bh * (aw * xp[r1 + c0] + bw * xp[r1 + c1]);
}

/* cols[n][(ic * KH + i) * KW + j][oh * OW + ow]; gsize = (OW, OH, N * IC): one work-item per
 * (image, input channel, output position) walks the KH x KW taps (its divisions paid once). */
__kernel void deform_im2col(__global const T* x, __global const T* offset, __global const T* mask,
                            __global T* cols, __global const int* restrict dims) {
    const int ow = get_global_id(0), oh = get_global_id(1), nic = get_global_id(2);
    const int N = dims[0], IC = dims[1], IH = dims[2], IW = dims[3], OH = dims[4], OW = dims[5];
    const int KH = dims[6], KW = dims[7], OG = dims[14];
    if (ow >= OW || oh >= OH || nic >= N * IC) return;
    const int P = OH * OW, p = oh * OW + ow, KK = KH * KW;
    const int n = nic / IC, ic = nic - n * IC;
    const int og = ic / (IC / OG);
    __global const T* op = offset + ((long)(n * OG + og) * KK * 2) * P + p;
#ifdef HAS_MASK
    __global const T* mp = mask + ((long)(n * OG + og) * KK) * P + p;
#endif
    __global const T* xp = x + (long)nic * IH * IW;
    __global T* cp = cols + (long)nic * KK * P + p;
    const int h0 = oh * dims[8] - dims[10], w0 = ow * dims[9] - dims[11];
    for (int i = 0; i < KH; ++i) {
        for (int j = 0; j < KW; ++j) {
            const int tap = i * KW + j;
            const T h = (T)(h0 + i * dims[12]) + op[(long)(2 * tap) * P];
            const T w = (T)(w0 + j * dims[13]) + op[(long)(2 * tap + 1) * P];
            T v = dc_sample(xp, IH, IW, h, w);
#ifdef HAS_MASK
            v *= mp[(long)tap * P];
#endif
            cp[(long)tap * P] = v;
        }
    }
}

/* y[n][oc][p] = bias[oc] + sum_k w[oc][k] * cols[n][g * K + k][p], K = IC / groups * KH * KW;
 * gsize = (P, ceil(OC / OCB), N): OCB output channels of one group per work-item share each
 * column load. */
#ifndef OCB
#define OCB 4
#endif
__kernel void deform_gemm(__global const T* cols, __global const T* wt, __global const T* bias, __global T* y,
                          __global const int* restrict dims) {
    const int p = get_global_id(0), ob = get_global_id(1), n = get_global_id(2);
    const int IC = dims[1], P = dims[4] * dims[5], G = dims[15], OC = dims[16];
    const int OCG = OC / G, BPG = (OCG + OCB - 1) / OCB;  /* blocks per group: a block never spans two */
    if (p >= P || ob >= G * BPG || n >= dims[0]) return;
    const int g = ob / BPG, oc0 = g * OCG + (ob - g * BPG) * OCB;
    const int nb = min(OCB, g * OCG + OCG - oc0);
    const int K = IC / G * dims[6] * dims[7];
    __global const T* cp = cols + ((long)n * IC * dims[6] * dims[7] + (long)g * K) * P + p;
    T acc[OCB];
    for (int o = 0; o < OCB; ++o) acc[o] = (T)0;
    for (int k = 0; k < K; ++k) {
        const T c = cp[(long)k * P];
        for (int o = 0; o < OCB; ++o) acc[o] += wt[(long)min(oc0 + o, OC - 1) * K + k] * c;
    }
    for (int o = 0; o < nb; ++o) {
#ifdef HAS_BIAS
        const T b = bias[oc0 + o];
#else
        const T b = (T)0;
#endif
        y[((long)n * OC + oc0 + o) * P + p] = acc[o] + b;
    }
}
