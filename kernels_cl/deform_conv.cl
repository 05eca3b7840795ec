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
 * (GridSample linear, zeros, align_corners, as the spec defines DeformConv). */
inline T dc_sample(__global const T* xp, int IH, int IW, T h, T w) {
    const T fh = floor(h), fw = floor(w);
    const int h0 = (int)fh, w0 = (int)fw;
    const T lh = h - fh, lw = w - fw;
    T acc = (T)0;
    for (int a = 0; a < 2; ++a) {
        const int hh = h0 + a;
        if (hh < 0 || hh >= IH) continue;
        const T wh = a ? lh : (T)1 - lh;
        for (int b = 0; b < 2; ++b) {
            const int ww = w0 + b;
            if (ww < 0 || ww >= IW) continue;
            acc += wh * (b ? lw : (T)1 - lw) * xp[hh * IW + ww];
        }
    }
    return acc;
}

/* cols[n][(ic * KH + i) * KW + j][oh * OW + ow]; gsize = (OH * OW, KH * KW, N * IC). */
__kernel void deform_im2col(__global const T* x, __global const T* offset, __global const T* mask,
                            __global T* cols, __global const int* restrict dims) {
    const int p = get_global_id(0), tap = get_global_id(1), nic = get_global_id(2);
    const int N = dims[0], IC = dims[1], IH = dims[2], IW = dims[3], OH = dims[4], OW = dims[5];
    const int KH = dims[6], KW = dims[7], OG = dims[14];
    const int P = OH * OW;
    if (p >= P || tap >= KH * KW || nic >= N * IC) return;
    const int oh = p / OW, ow = p - oh * OW;
    const int i = tap / KW, j = tap - i * KW;
    const int n = nic / IC, ic = nic - n * IC;
    const int og = ic / (IC / OG);
    const int kk = og * KH * KW + tap;
    __global const T* op = offset + ((long)n * OG * KH * KW * 2 + kk * 2) * P + p;
    const T h = (T)(oh * dims[8] - dims[10] + i * dims[12]) + op[0];
    const T w = (T)(ow * dims[9] - dims[11] + j * dims[13]) + op[P];
    T v = dc_sample(x + (long)nic * IH * IW, IH, IW, h, w);
#ifdef HAS_MASK
    v *= mask[((long)n * OG * KH * KW + kk) * P + p];
#endif
    cols[((long)nic * KH * KW + tap) * P + p] = v;
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
