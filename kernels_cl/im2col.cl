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
__kernel void im2col(__global const float* restrict X, int offX, int sX1, int sX2, int G,
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
    const __global float* xc = X + offX + zi * sX1 + zg * sX2 + ci * HW;
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
                dv[j] = *(const __global floatp_u*)(xc + o);
#if PV > 1
            } else if (o <= -2) {  /* every other input from -(o + 2): a stride-2 conv */
                const __global float* src = xc - o - 2;
                const floatp lo = *(const __global floatp_u*)src;
                const floatp hi = *(const __global floatp_u*)(src + PV);
                dv[j] = (floatp)(lo.even, hi.even);
#endif
            } else {
                float t[PV] __attribute__((aligned(64)));
#pragma unroll
                for (int c = 0; c < PV; ++c) {
                    const int oc = tr[j * PV + c];
                    const float v = xc[oc < 0 ? 0 : oc];
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
__kernel void pack_b(__global const float* restrict src, int off, int s1, int s2, int s_k, int s_n,
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
    const __global float* s = src + off + z1 * s1 + z2 * s2 + k * s_k + n0 * s_n;
    float t[NR] __attribute__((aligned(64)));
    if (nn == NR && s_n == 1) {
#pragma unroll
        for (int c = 0; c < NR; ++c)
            t[c] = s[c];
    } else {
        for (int c = 0; c < NR; ++c)
            t[c] = c < nn ? s[c * s_n] : 0.0f;
    }
    __global floatp* d = (__global floatp*)(dst + z * dst_s + (q * K + k) * NR);
    const floatp* tv = (const floatp*)t;
#pragma unroll
    for (int c = 0; c < NR / PV; ++c)
        d[c] = tv[c];
}
