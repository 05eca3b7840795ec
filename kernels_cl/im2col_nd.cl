/* im2col for a 3-D convolution (X [N, C, D, H, W]), written straight into the B panels of
 * gemm.cl (B_PACKED=1):  B[z][(q*K + k)*NR + c] holds column n = q*NR + c of the K x N matrix,
 * zero for n >= N.
 *   row k    = ci*KVOL + r, r = (kd*KH + kh)*KW + kw  (the [Cout, Cin/G, KD, KH, KW] weights
 *              read as [Cout/G, K] per group),
 *   column n = (od*OH + oh)*OW + ow.
 * Each work-item fills row k for one output row (od, oh) of one image and group: its OW
 * columns are a run of X's input row (stride SW; the padded ends zeros, found once per row, no
 * test per element), stored as at most a few contiguous segments of panel rows. Measured on
 * pocl against one work-item per panel row gathering element by element (r3d-style net, 64
 * channels, 8x28x28 outputs, its three convs): 37 -> 13 ms.
 * The piece holds panels q0 .. q0+nq-1 of the conv, written as panels 0 .. nq-1 of dst (the
 * conv is packed piece by piece); the row that ends the real columns zero-fills its panel.
 * gsize = (output rows the piece touches, round_up(K, lsize), images*G); z = image*G + group, the input channel block
 * of z at offX + (z / G)*sX1 + (z % G)*sX2. Only NR is a define; every shape is a run-time
 * argument (geo: D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW).
 */
#ifndef NR
#define NR 32
#endif

__kernel void im2col_nd(__global const float* restrict X, int offX, int sX1, int sX2, int G,
                        __global float* restrict dst, int dst_s, __global const int* restrict geo,
                        int N, int K, int q0, int nq)
{
    const int k = get_global_id(1);
    const int z = get_global_id(2);
    const int D = geo[0], H = geo[1], W = geo[2], OH = geo[4], OW = geo[5];
    const int KH = geo[7], KW = geo[8], SW = geo[11];
    const int n_begin = q0 * NR;
    const int n_pad = (q0 + nq) * NR;       /* the piece's last panel ends here */
    const int n_end = min(N, n_pad);        /* real columns end here; zeros up to n_pad */
    const int r = n_begin / OW + get_global_id(0);  /* the output row (od*OH + oh) of this work-item */
    if (k >= K || r * OW >= n_end)
        return;
    const int kvol = geo[6] * KH * KW;
    const int ci = k / kvol;
    const int t = k - ci * kvol;
    const int kd = t / (KH * KW);
    const int kh = (t / KW) % KH;
    const int kw = t % KW;
    const int zi = z / G;
    const int zg = z - zi * G;
    const int od = r / OH, oh = r - (r / OH) * OH;
    const int id = od * geo[9] + kd * geo[15] - geo[12];
    const int ih = oh * geo[10] + kh * geo[16] - geo[13];
    const int bw = kw * geo[17] - geo[14];  /* input column of ow = 0 */
    /* the output columns [lo, hi) of this row that read inside X */
    int lo = 0, hi = 0;
    if (id >= 0 && id < D && ih >= 0 && ih < H && bw + (OW - 1) * SW >= 0 && bw < W) {
        lo = bw >= 0 ? 0 : (-bw + SW - 1) / SW;
        hi = min(OW, (W - 1 - bw) / SW + 1);
    }
    const __global float* xr = X + offX + zi * sX1 + zg * sX2 + (ci * D + max(id, 0)) * H * W + max(ih, 0) * W + bw;
    const int row0 = r * OW;
    const int a = max(row0, n_begin);
    const int e = row0 + OW >= n_end ? n_pad : row0 + OW;  /* the row ending the real columns pads the panel */
    __global float* dz = dst + z * dst_s + k * NR;
    for (int n = a; n < e;) {
        const int q = n / NR;
        const int seg = min(e, (q + 1) * NR);
        __global float* d = dz + (q - q0) * K * NR - q * NR;  /* d[n] is column n's slot */
        const int s_lo = clamp(row0 + lo, n, seg);
        const int s_hi = max(s_lo, min(row0 + hi, min(seg, n_end)));
        for (int i = n; i < s_lo; ++i)
            d[i] = 0.0f;
        if (SW == 1) {
            for (int i = s_lo; i < s_hi; ++i)
                d[i] = xr[i - row0];
        } else {
            for (int i = s_lo; i < s_hi; ++i)
                d[i] = xr[(i - row0) * SW];
        }
        for (int i = s_hi; i < seg; ++i)
            d[i] = 0.0f;
        n = seg;
    }
}

/* The implicit 3-D GEMM's input (conv_nd.py, stride 1 along H and W): X [n, C, D, H, W] copied
 * into zero-padded volumes at P + lead: [n, C, Dp, Hp, WP], X's (d, h, w) at (d + PD, h + PH, w).
 * The row pitch WP = W + max(left pad, right pad) holds the data in [0, W) and zeros after: a
 * tap reading left of a row (its left padding) lands in the previous row's zeros, as conv_phases
 * does for 2-D; the `lead` floats before the first row are zeros for the first row's reads.
 * gsize = (round_up(Hp, lsize), C*Dp, images); each work-item writes one padded row. */
__kernel void pad_nd(__global const float* restrict X, int offX, __global float* restrict P, int lead,
                     int C, int D, int H, int W, int Dp, int Hp, int WP, int PD, int PH)
{
    const int hp = get_global_id(0);
    const int cd = get_global_id(1);
    const int i = get_global_id(2);
    if (hp >= Hp || cd >= C * Dp)
        return;
    if (hp == 0 && cd == 0 && i == 0)
        for (int x = 0; x < lead; ++x)
            P[x] = 0.0f;
    const int c = cd / Dp;
    const int d = cd - c * Dp - PD;
    const int h = hp - PH;
    __global float* p = P + lead + ((size_t)(i * C + c) * Dp + (cd - c * Dp)) * Hp * WP + hp * WP;
    int x = 0;
    if (d >= 0 && d < D && h >= 0 && h < H) {
        const __global float* s = X + offX + ((size_t)(i * C + c) * D + d) * H * W + h * W;
        for (; x < W; ++x)
            p[x] = s[x];
    }
    for (; x < WP; ++x)
        p[x] = 0.0f;
}
