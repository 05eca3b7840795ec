/* Producers of GEMM B panels (the B_PACKED=1 layout of gemm.cl):
 *   B[z][(q*K + k)*NR + c] holds column n = q*NR + c of a K x N matrix, zero for n >= N.
 * Only NR is a define; every shape is a run-time argument.
 */
#ifndef NR
#define NR 32
#endif

/* im2col for a 2-D convolution (1-D convs pass H = KH = 1), written straight into panels.
 * Row k = (ci*KH + kh)*KW + kw (the [Cout, Cin/G*KH*KW] weight layout), column n = oh*OW + ow.
 * z = image*G + group: the input channel block of z is at offX + (z / G)*sX1 + (z % G)*sX2.
 * gsize = (round_up(N, NR), K, images*G). */
__kernel void im2col(__global const float* restrict X, int offX, int sX1, int sX2, int G,
                     __global float* restrict dst, int dst_s,
                     int H, int W, int OW, int KH, int KW, int sh, int sw, int ph, int pw,
                     int dh, int dw, int N, int K)
{
    const int n = get_global_id(0);
    const int k = get_global_id(1);
    const int z = get_global_id(2);
    float v = 0.0f;
    if (n < N) {
        const int khw = KH * KW;
        const int ci = k / khw;
        const int r = k - ci * khw;
        const int kh = r / KW;
        const int kw = r - kh * KW;
        const int oh = n / OW;
        const int ow = n - oh * OW;
        const int ih = oh * sh - ph + kh * dh;
        const int iw = ow * sw - pw + kw * dw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
            const int zi = z / G;
            const int zg = z - zi * G;
            v = X[offX + zi * sX1 + zg * sX2 + (ci * H + ih) * W + iw];
        }
    }
    const int q = n / NR;
    dst[z * dst_s + (q * K + k) * NR + (n - q * NR)] = v;
}

/* Pack strided [K, N] matrices (per batch z) into panels:
 *   dst[z*dst_s + (q*K + k)*NR + c] = src[off + z1*s1 + z2*s2 + k*s_k + n*s_n], n = q*NR + c
 * with z1 = z / D2, z2 = z % D2. gsize = (round_up(N, NR), K, batches). */
__kernel void pack_b(__global const float* restrict src, int off, int s1, int s2, int s_k, int s_n,
                     __global float* restrict dst, int dst_s, int N, int K, int D2)
{
    const int n = get_global_id(0);
    const int k = get_global_id(1);
    const int z = get_global_id(2);
    const int z1 = z / D2;
    const int z2 = z - z1 * D2;
    const int q = n / NR;
    float v = 0.0f;
    if (n < N)
        v = src[off + z1 * s1 + z2 * s2 + k * s_k + n * s_n];
    dst[z * dst_s + (q * K + k) * NR + (n - q * NR)] = v;
}
