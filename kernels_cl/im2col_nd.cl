/* im2col for a 3-D convolution (X [N, C, D, H, W]), written straight into the B panels of
 * gemm.cl (B_PACKED=1):  B[z][(q*K + k)*NR + c] holds column n = q*NR + c of the K x N matrix,
 * zero for n >= N.
 *   row k    = ci*KVOL + r, r = (kd*KH + kh)*KW + kw  (the [Cout, Cin/G, KD, KH, KW] weights
 *              read as [Cout/G, K] per group),
 *   column n = (od*OH + oh)*OW + ow.
 * Each work-item writes one whole panel row (NR contiguous floats, aligned vector stores): the
 * output coordinates advance column by column (no division per element), padding reads give 0.
 * Panel q0 + q of the conv is written as panel q of dst (the conv is packed piece by piece).
 * gsize = (panels, round_up(K, lsize), images*G); z = image*G + group, the input channel block
 * of z at offX + (z / G)*sX1 + (z % G)*sX2. Only NR is a define; every shape is a run-time
 * argument (geo: D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW).
 */
#ifndef NR
#define NR 32
#endif

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

__kernel void im2col_nd(__global const float* restrict X, int offX, int sX1, int sX2, int G,
                        __global float* restrict dst, int dst_s, __global const int* restrict geo,
                        int N, int K, int q0)
{
    const int q = get_global_id(0);
    const int k = get_global_id(1);
    const int z = get_global_id(2);
    if (k >= K)
        return;
    const int D = geo[0], H = geo[1], W = geo[2], OH = geo[4], OW = geo[5];
    const int KD = geo[6], KH = geo[7], KW = geo[8];
    const int SD = geo[9], SH = geo[10], SW = geo[11];
    const int kvol = KD * KH * KW;
    const int ci = k / kvol;
    const int r = k - ci * kvol;
    const int kd = r / (KH * KW);
    const int kh = (r / KW) % KH;
    const int kw = r % KW;
    const int zi = z / G;
    const int zg = z - zi * G;
    const __global float* xc = X + offX + zi * sX1 + zg * sX2 + ci * (D * H * W);
    /* the input coordinate of output (0, 0, 0) through this tap */
    const int bd = kd * geo[15] - geo[12];
    const int bh = kh * geo[16] - geo[13];
    const int bw = kw * geo[17] - geo[14];
    const int n0 = (q0 + q) * NR;
    int od = n0 / (OH * OW);
    int oh = (n0 / OW) % OH;
    int ow = n0 % OW;
    float t[NR] __attribute__((aligned(64)));
    for (int c = 0; c < NR; ++c) {
        const int id = od * SD + bd, ih = oh * SH + bh, iw = ow * SW + bw;
        const int ok = n0 + c < N && id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
        const float v = xc[ok ? (id * H + ih) * W + iw : 0];
        t[c] = ok ? v : 0.0f;
        if (++ow == OW) {
            ow = 0;
            if (++oh == OH) {
                oh = 0;
                ++od;
            }
        }
    }
    __global floatp* d = (__global floatp*)(dst + z * dst_s + (q * K + k) * NR);
    const floatp* tv = (const floatp*)t;
#pragma unroll
    for (int c = 0; c < NR / PV; ++c)
        d[c] = tv[c];
}
