/* Producers of GEMM B panels (the B_PACKED=1 layout of gemm.cl):
 *   B[z][(q*K + k)*NR + c] holds column n = q*NR + c of a K x N matrix, zero for n >= N.
 * Each work-item writes whole panel rows (NR contiguous floats, aligned vector stores).
 * Only NR is a define; every shape is a run-time argument.
 */
#ifndef NR
#define NR 32
#endif

/* PV: the panel vector width; conv.py's panel_vector_width computes the same for the table. */
#if NR % 16 == 0
#define PV 16
typedef float16 floatp;
#elif NR % 8 == 0
#define PV 8
typedef float8 floatp;
#elif NR % 4 == 0
#define PV 4
typedef float4 floatp;
#else
#define PV 1
typedef float floatp;
#endif
typedef floatp floatp_u __attribute__((aligned(4)));

/* X_HALF: the input read (X of im2col and conv_phases, src of pack_b) is stored as half
 * (storage.h; 0: float, the plain loads). The panels and phase images written stay float. */
#ifndef X_HALF
#define X_HALF 0
#endif
#include "storage.h"
#define X_T ST_T(X_HALF)

/* im2col for a 2-D convolution (1-D convs pass H = 1), written straight into panels.
 * Row k = ci*KHW + r (r = kh*KW + kw: the [Cout, Cin/G*KH*KW] weight layout), column
 * n = oh*OW + ow. The geometry (pads, strides, dilations) lives in a per-layer table
 * tab[r*Np + n] = ih*W + iw, or -1 where the tap reads padding (and for n >= N), so the
 * kernel has no division or bounds test per element. After it, tab[KHW*Np + r*(Np/PV) + j]
 * holds the first offset of column run j (PV columns) when the run reads PV consecutive
 * inputs, -(offset + 2) when it reads every other input (stride 2: two loads, even lanes),
 * else -1: most runs of a stride-1 or stride-2 conv are then vector loads and one store.
 * Each work-item fills the KHW rows of one input channel for one panel, panel q0 + q of the
 * table written as panel q of dst (a conv is packed piece by piece):
 * gsize = (panels, round_up(Cin_g, lsize), images*G).
 * z = image*G + group: the input channel block of z is at offX + (z / G)*sX1 + (z % G)*sX2. */
__kernel void im2col(__global const X_T* restrict X, int offX, int sX1, int sX2, int G,
                     __global const int* restrict tab, __global float* restrict dst, int dst_s,
                     int HW, int KHW, int Np, int Cg, int q0)
{
    const int q = get_global_id(0);
    const int ci = get_global_id(1);
    const int z = get_global_id(2);
    if (ci >= Cg)
        return;
    const int zi = z / G;
    const int zg = z - zi * G;
    const __global X_T* xc = X + offX + zi * sX1 + zg * sX2 + ci * HW;
    const int K = Cg * KHW;
    __global float* d = dst + z * dst_s + (q * K + ci * KHW) * NR;
    const __global int* tq = tab + (q0 + q) * NR;
    const __global int* fq = tab + KHW * Np + (q0 + q) * (NR / PV);
    const int runs_per_row = Np / PV;
    for (int r = 0; r < KHW; ++r) {
        const __global int* tr = tq + r * Np;
        const __global int* fr = fq + r * runs_per_row;
        __global floatp* dv = (__global floatp*)(d + r * NR);
#pragma unroll
        for (int j = 0; j < NR / PV; ++j) {
            const int o = fr[j];
            if (o >= 0) {
                dv[j] = ST_LDV(X_HALF, PV, xc + o);
#if PV > 1
            } else if (o <= -2) {  /* every other input from -(o + 2): a stride-2 conv */
                const __global X_T* src = xc - o - 2;
                const floatp lo = ST_LDV(X_HALF, PV, src);
                const floatp hi = ST_LDV(X_HALF, PV, src + PV);
                dv[j] = (floatp)(lo.even, hi.even);
#endif
            } else {
                float t[PV] __attribute__((aligned(64)));
#pragma unroll
                for (int c = 0; c < PV; ++c) {
                    const int oc = tr[j * PV + c];
                    const float v = ST_LD(X_HALF, xc, oc < 0 ? 0 : oc);
                    t[c] = oc < 0 ? 0.0f : v;
                }
                dv[j] = *(const floatp*)t;
            }
        }
    }
}

/* Pack strided [K, N] matrices (per batch z) into panels:
 *   dst[z*dst_s + (q*K + k)*NR + c] = src[off + z1*s1 + z2*s2 + k*s_k + n*s_n], n = q*NR + c
 * with z1 = z / D2, z2 = z % D2. gsize = (ceil(N / NR), K rounded up to the local size, batches). */
__kernel void pack_b(__global const X_T* restrict src, int off, int s1, int s2, int s_k, int s_n,
                     __global float* restrict dst, int dst_s, int N, int K, int D2)
{
    const int q = get_global_id(0);
    const int k = get_global_id(1);
    const int z = get_global_id(2);
    if (k >= K)
        return;
    const int z1 = z / D2;
    const int z2 = z - z1 * D2;
    const int n0 = q * NR;
    const int nn = min(NR, N - n0);
    const __global X_T* s = src + off + z1 * s1 + z2 * s2 + k * s_k + n0 * s_n;
    float t[NR] __attribute__((aligned(64)));
    if (nn == NR && s_n == 1) {
#pragma unroll
        for (int c = 0; c < NR; ++c)
            t[c] = ST_LD(X_HALF, s, c);
    } else {
        for (int c = 0; c < NR; ++c)
            t[c] = c < nn ? ST_LD(X_HALF, s, c * s_n) : 0.0f;
    }
    __global floatp* d = (__global floatp*)(dst + z * dst_s + (q * K + k) * NR);
    const floatp* tv = (const floatp*)t;
#pragma unroll
    for (int c = 0; c < NR / PV; ++c)
        d[c] = tv[c];
}

typedef float16 float16_u __attribute__((aligned(4)));
typedef float8 float8_u __attribute__((aligned(4)));

/* One row of a phase image: WPH floats, X's row iy (every SW-th input, from column s0 on) in
 * columns [lo, hi), zeros elsewhere (see conv_phases). */
inline void phase_row(__global float* restrict d, const __global X_T* restrict xr, int iy, int H, int W,
                      int WPH, int SW, int s0, int lo, int hi)
{
    if (iy < 0 || iy >= H) {
        for (int xx = 0; xx < WPH; ++xx)
            d[xx] = 0.0f;
        return;
    }
    const __global X_T* s = xr + iy * W + s0;  /* the input of column lo */
    for (int xx = 0; xx < lo; ++xx)
        d[xx] = 0.0f;
    if (SW == 1) {
        for (int xx = lo; xx < hi; ++xx)
            d[xx] = ST_LD(X_HALF, s, xx - lo);
    } else if (SW == 2) {  /* every other input: 16 loaded, the even 8 stored */
        int xx = lo;
        for (; xx + 8 <= hi && s0 + 2 * (xx - lo) + 16 <= W; xx += 8) {
            const float16 v = ST_LDV(X_HALF, 16, s + 2 * (xx - lo));
            *(__global float8_u*)(d + xx) = v.even;
        }
        for (; xx < hi; ++xx)
            d[xx] = ST_LD(X_HALF, s, 2 * (xx - lo));
    } else {
        for (int xx = lo; xx < hi; ++xx)
            d[xx] = ST_LD(X_HALF, s, (xx - lo) * SW);
    }
    for (int xx = hi; xx < WPH; ++xx)
        d[xx] = 0.0f;
}

/* One input row into the rows of its two column phases (SW = 2): column c goes to phase
 * p = (c + PW) & 1 at xx = (c + PW - p) / 2, the phases' padding columns [0, lo_p) and
 * [hi_p, WPH) are zeroed. Per 16 columns, the even lanes of two loads one column apart, one
 * 8-wide store into each phase: the row is read once for both (see phase_rows_pair). (The odd
 * lanes of one load would do, but Oclgrind's checker reports their store as uninitialised.) */
inline void phase_row_pair(__global float* restrict d0, __global float* restrict d1, const __global X_T* restrict xr,
                           bool in, int W, int WPH, int PW, int lo0, int hi0, int lo1, int hi1)
{
    for (int xx = 0; xx < lo0; ++xx)
        d0[xx] = 0.0f;
    for (int xx = in ? hi0 : lo0; xx < WPH; ++xx)
        d0[xx] = 0.0f;
    for (int xx = 0; xx < lo1; ++xx)
        d1[xx] = 0.0f;
    for (int xx = in ? hi1 : lo1; xx < WPH; ++xx)
        d1[xx] = 0.0f;
    if (!in)
        return;
    int c = 0;
    for (; c + 17 <= W; c += 16) {
        const float8 ve = ST_LDV(X_HALF, 16, xr + c).even;      /* columns c, c + 2, ... */
        const float8 vo = ST_LDV(X_HALF, 16, xr + c + 1).even;  /* c + 1, c + 3, ... */
        if ((c + PW) & 1) {  /* the even columns are phase 1's */
            *(__global float8_u*)(d1 + ((c + PW - 1) >> 1)) = ve;
            *(__global float8_u*)(d0 + ((c + PW + 1) >> 1)) = vo;
        } else {
            *(__global float8_u*)(d0 + ((c + PW) >> 1)) = ve;
            *(__global float8_u*)(d1 + ((c + PW) >> 1)) = vo;
        }
    }
    for (; c < W; ++c) {
        const int p = (c + PW) & 1;
        (p ? d1 : d0)[(c + PW - p) >> 1] = ST_LD(X_HALF, xr, c);
    }
}

/* The operand of an implicit-GEMM convolution (gemm.cl implicit flag): X zero-padded and split
 * into phase images (py, px) < (NPY, NPX) <= (SH, SW), the ones some tap reads, so that every
 * tap of a strided conv reads a plain shifted row:
 *   dst[z*dst_s + (ci*NPH + p)*HPH*WPH + yy*WPH + xx] = X[ci][yy*SH + py - PH][xx*SW + px - PW]
 * (p = py*NPX + px, NPH = NPY*NPX; 0 outside X). A stride-1 conv has one phase: X with a zero
 * border; a strided 1x1 conv one too: X subsampled.
 * Rows are WPH apart with no gap: a GEMM row that runs past a row's end wraps into the next
 * row's left padding (conv.py phase_geometry makes that read zeros), and HPH includes one
 * extra bottom row for the last row's wrap.
 * Each work-item writes RB rows of one (channel, phase) plane, or with SW = NPX = 2 of the two
 * column phases' planes (phase_rows_pair); gsize = (ceil(HPH / RB), Cin*NPH (Cin*NPY with
 * SW = NPX = 2) rounded up to the group, images), groups of 16 (pocl pays per group). The
 * rows are written whole every run, so the scratch holds no stale values. */
#define RB 8
/* The RB rows from y0 of the planes (ci, py, 0) and (ci, py, 1) of a conv whose taps read both
 * column phases of stride 2 (NPX = 2, SW = 2: the usual 3x3/2, the 7x7/2 stem), from one read
 * of each input row, where one plane at a time reads each row once per phase and keeps half of
 * every load (see conv_phases). */
inline void phase_rows_pair(const __global X_T* restrict xc, __global float* restrict d0, int py, int y0, int H,
                            int W, int HPH, int WPH, int SH, int PH, int PW)
{
    __global float* d1 = d0 + HPH * WPH;
    /* the data columns [lo, hi) of each phase, as conv_phases computes them for one plane */
    const int lo0 = min(WPH, (PW + 1) / 2), lo1 = min(WPH, max(0, PW / 2));
    const int hi0 = max(lo0, min(WPH, (W - 1 + PW) / 2 + 1));
    const int hi1 = W - 1 + PW - 1 < 0 ? lo1 : max(lo1, min(WPH, (W - 2 + PW) / 2 + 1));
    const int y1 = min(HPH, y0 + RB);
    for (int yy = y0; yy < y1; ++yy) {
        const int iy = yy * SH + py - PH;
        const bool in = iy >= 0 && iy < H;
        phase_row_pair(d0 + yy * WPH, d1 + yy * WPH, xc + (in ? iy : 0) * W, in, W, WPH, PW, lo0, hi0, lo1, hi1);
    }
}

__kernel void conv_phases(__global const X_T* restrict X, int offX, int sX1, int Cin, int H, int W,
                          __global float* restrict dst, int dst_s, int HPH, int WPH,
                          int SH, int SW, int PH, int PW, int NPY, int NPX)
{
    const int y0 = get_global_id(0) * RB;
    const int cp = get_global_id(1);
    const int z = get_global_id(2);
    const int nph = NPY * NPX;  /* the phases some tap reads: py < NPY, px < NPX */
    if (SW == 2 && NPX == 2) {  /* cp = ci * NPY + py: both column phases at once */
        if (cp < Cin * NPY) {
            const int ci = cp / NPY;
            phase_rows_pair(X + offX + z * sX1 + ci * H * W, dst + z * dst_s + (cp * 2) * HPH * WPH,
                            cp - ci * NPY, y0, H, W, HPH, WPH, SH, PH, PW);
        }
        return;
    }
    if (cp >= Cin * nph)
        return;
    const int ci = cp / nph;
    const int p = cp - ci * nph;
    const int py = p / NPX;
    const int px = p - py * NPX;
    const __global X_T* xc = X + offX + z * sX1 + ci * H * W;
    __global float* d = dst + z * dst_s + cp * HPH * WPH;
    /* Columns xx with 0 <= xx*SW + px - PW < W come from X, [lo, hi); the others are padding:
     * the same for every row of the plane, so worked out once per work-item instead of per row
     * (alone, hot, alternating: 20-25% faster for ResNet-50's 28x28 and 56x56 strided inputs,
     * 9-11% for the stem's). */
    const int lo = min(WPH, max(0, (PW - px + SW - 1) / SW));
    const int last = W - 1 + PW - px;  /* xx <= last / SW reads inside X */
    const int hi = last < 0 ? lo : max(lo, min(WPH, last / SW + 1));
    const int s0 = lo * SW + px - PW;
    const int y1 = min(HPH, y0 + RB);
    for (int yy = y0; yy < y1; ++yy)
        phase_row(d + yy * WPH, xc, yy * SH + py - PH, H, W, WPH, SW, s0, lo, hi);
}

/* Pack the rows of row-major matrices (a live GEMM A: rows s_m apart, k contiguous) into panels
 * of NR rows, the layout pack_b writes for A'^T:
 *   dst[z*dst_s + (q*K + k)*NR + c] = src[off + z1*s1 + z2*s2 + (q*NR + c)*s_m + k], 0 past row M.
 * 16 k per work-item: one vector load per row, transposed through a private tile that is then
 * 16 consecutive panel rows (16 * NR contiguous floats, NR vector stores). pack_b would read
 * each panel row as NR floats s_m apart. gsize = (ceil(M / NR), ceil(K / 16) rounded up to the
 * local size, batches). */
__kernel void pack_rows(__global const float* restrict src, int off, int s1, int s2, int s_m,
                        __global float* restrict dst, int dst_s, int M, int K, int D2)
{
    const int q = get_global_id(0);
    const int k0 = get_global_id(1) * 16;
    const int z = get_global_id(2);
    if (k0 >= K)
        return;
    const int z1 = z / D2;
    const int z2 = z - z1 * D2;
    const int kn = min(16, K - k0);
    const __global float* s = src + off + z1 * s1 + z2 * s2 + k0;
    float t[16 * NR] __attribute__((aligned(64)));
    float lanes[16] __attribute__((aligned(64)));
    /* rows rolled: unrolled, the 16 x NR moves cost ~0.2 s of code generation at a cold start */
#pragma unroll 1
    for (int c = 0; c < NR; ++c) {
        const int m = q * NR + c;
        if (m < M && kn == 16) {
            *(float16*)lanes = *(const __global float16_u*)(s + m * s_m);
        } else {
#pragma unroll 1
            for (int kk = 0; kk < 16; ++kk)
                lanes[kk] = m < M && kk < kn ? s[m * s_m + kk] : 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < 16; ++kk)
            t[kk * NR + c] = lanes[kk];
    }
    __global float* d = dst + z * dst_s + (q * K + k0) * NR;
    if (kn == 16) {
#pragma unroll
        for (int i = 0; i < NR; ++i)
            *(__global float16_u*)(d + 16 * i) = *(const float16*)(t + 16 * i);
    } else {
#pragma unroll 1
        for (int i = 0; i < kn * NR; ++i)
            d[i] = t[i];
    }
}
