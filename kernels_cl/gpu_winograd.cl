/* Winograd F(2x2, 3x3) and F(4x4, 3x3) transforms for the GPU family (lower/gpu_winograd.py): the
 * batched element-wise products between them run as xgemm.cl's local-memory GEMM.
 *
 *   wino2_in    one work-item per (tile t, channel c, image z): the 4x4 input patch of output
 *               block t (rows 2*ty - PH .., columns 2*tx - PW ..; the padding as zeros by bounds)
 *               into d, V[z][xi][c][t] = (B^T d B)[xi] for the 16 xi (row-major in the 4x4);
 *               consecutive work-items write consecutive tiles (coalesced; xgemm reads V[z][xi]
 *               as a C x NT row-major B).
 *   wino2_out   one work-item per (tile t, output channel o, image z): the 16 products
 *               Mp[z][xi][o][t] folded back into the 2x2 block, Y = A^T Mp A, with the conv's
 *               epilogue ACT(y + bias[o] + Z) for the pixels inside OH x OW.
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1] (Lavin & Gray's
 * F(2x2, 3x3); the filter's G g G^T is computed once at plan time). Shapes are run-time
 * arguments; flags: 1 = bias, 2 = residual Z. OpenCL 1.2, no extension.
 *   wino4_in, wino4_out  the same for F(4x4, 3x3): 6x6 input patches of 4x4 output blocks, 36 xi,
 *               B^T and A^T of Lavin & Gray's F(4x4, 3x3) (points 0, +-1, +-2, infinity): 4x fewer
 *               multiplies than the direct conv instead of 2.25x, for more transform work per
 *               tile and a little more rounding (the tuner's choice, variant "F4").
 * Storage (kernels_cl/storage.h): XH = 1 reads X as half, YH = 1 writes Y and reads Z as half;
 * V, Mp and the bias stay float (scratch and a plan-time constant).
 */
#pragma OPENCL FP_CONTRACT ON

#include "storage.h"

#define FLAG_BIAS 1
#define FLAG_RES 2

#include "activation.h"
DEFINE_ACT(act_s, float)

/* X at (y, x) of the channel plane xp, zero outside H x W (the conv's padding). */
inline float wino_x(const __global ST_T(XH)* xp, int y, int x, int H, int W)
{
    return y >= 0 && y < H && x >= 0 && x < W ? ST_LD(XH, xp, y * W + x) : 0.0f;
}

/* One output pixel (y, x) of the plane at `plane`, if inside OH x OW: the conv's epilogue
 * ACT(v + bias + Z). */
inline void wino_store(__global ST_T(YH)* Y, const __global ST_T(YH)* Z, int plane, int y, int x, int OH, int OW,
                       float v, float b, int flags, float act_a, float act_b, float act_c)
{
    if (y >= OH || x >= OW)
        return;
    const int p = plane + y * OW + x;
    v += b;
    if (flags & FLAG_RES)
        v += ST_LD(YH, Z, p);
    ST_ST(YH, Y, p, act_s(v, act_a, act_b, act_c));
}

__kernel void wino2_in(__global const ST_T(XH)* restrict X, int offX, int sX, __global float* restrict V, int sV,
                       int C, int H, int W, int PH, int PW, int TW, int NT)
{
    const int t = get_global_id(0), c = get_global_id(1), z = get_global_id(2);
    if (t >= NT || c >= C)
        return;
    const int ty = t / TW, tx = t - ty * TW;
    const int y0 = 2 * ty - PH, x0 = 2 * tx - PW;
    const __global ST_T(XH)* xp = X + offX + z * sX + c * H * W;
    float d[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            d[i][j] = wino_x(xp, y0 + i, x0 + j, H, W);
    float e[4][4]; /* B^T d: along the rows */
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        e[0][j] = d[0][j] - d[2][j];
        e[1][j] = d[1][j] + d[2][j];
        e[2][j] = d[2][j] - d[1][j];
        e[3][j] = d[1][j] - d[3][j];
    }
    __global float* vp = V + z * sV + c * NT + t;
    const int sxi = C * NT; /* V[z][xi] is C x NT */
#pragma unroll
    for (int i = 0; i < 4; ++i) { /* (B^T d) B: along the columns */
        vp[(4 * i + 0) * sxi] = e[i][0] - e[i][2];
        vp[(4 * i + 1) * sxi] = e[i][1] + e[i][2];
        vp[(4 * i + 2) * sxi] = e[i][2] - e[i][1];
        vp[(4 * i + 3) * sxi] = e[i][1] - e[i][3];
    }
}

__kernel void wino2_out(__global const float* restrict Mp, int sM, __global ST_T(YH)* Y, int offY, int sY,
                        __global const float* restrict bias, __global const ST_T(YH)* Z, int Cout, int OH, int OW,
                        int TW, int NT, int flags, float act_a, float act_b, float act_c)
{
    const int t = get_global_id(0), o = get_global_id(1), z = get_global_id(2);
    if (t >= NT || o >= Cout)
        return;
    const __global float* mp = Mp + z * sM + o * NT + t;
    const int sxi = Cout * NT; /* Mp[z][xi] is Cout x NT */
    float m[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            m[i][j] = mp[(4 * i + j) * sxi];
    float r[2][4]; /* A^T m */
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        r[0][j] = m[0][j] + m[1][j] + m[2][j];
        r[1][j] = m[1][j] - m[2][j] - m[3][j];
    }
    const int ty = t / TW, tx = t - ty * TW;
    const float b = (flags & FLAG_BIAS) ? bias[o] : 0.0f;
    const int plane = offY + z * sY + o * OH * OW;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float v2[2] = {r[i][0] + r[i][1] + r[i][2], r[i][1] - r[i][2] - r[i][3]}; /* (A^T m) A */
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wino_store(Y, Z, plane, 2 * ty + i, 2 * tx + j, OH, OW, v2[j], b, flags, act_a, act_b, act_c);
    }
}

/* F(4x4, 3x3): B^T d along one axis of a 6-vector (rows of B^T: [4 0 -5 0 1 0], [0 -4 -4 1 1 0],
 * [0 4 -4 -1 1 0], [0 -2 -1 2 1 0], [0 2 -1 -2 1 0], [0 4 0 -5 0 1]). */
#define BT6_1D(o, d0, d1, d2, d3, d4, d5)                           \
    do {                                                            \
        (o)[0] = 4.0f * (d0) - 5.0f * (d2) + (d4);                  \
        (o)[1] = -4.0f * ((d1) + (d2)) + (d3) + (d4);               \
        (o)[2] = 4.0f * ((d1) - (d2)) - (d3) + (d4);                \
        (o)[3] = 2.0f * ((d3) - (d1)) - (d2) + (d4);                \
        (o)[4] = 2.0f * ((d1) - (d3)) - (d2) + (d4);                \
        (o)[5] = 4.0f * (d1) - 5.0f * (d3) + (d5);                  \
    } while (0)

/* A^T m along one axis (rows of A^T: [1 1 1 1 1 0], [0 1 -1 2 -2 0], [0 1 1 4 4 0],
 * [0 1 -1 8 -8 1]). */
#define AT6_1D(o, m0, m1, m2, m3, m4, m5)                           \
    do {                                                            \
        const float s12 = (m1) + (m2), d12 = (m1) - (m2);           \
        const float s34 = (m3) + (m4), d34 = (m3) - (m4);           \
        (o)[0] = (m0) + s12 + s34;                                  \
        (o)[1] = d12 + 2.0f * d34;                                  \
        (o)[2] = s12 + 4.0f * s34;                                  \
        (o)[3] = d12 + 8.0f * d34 + (m5);                           \
    } while (0)

__kernel void wino4_in(__global const ST_T(XH)* restrict X, int offX, int sX, __global float* restrict V, int sV,
                       int C, int H, int W, int PH, int PW, int TW, int NT)
{
    const int t = get_global_id(0), c = get_global_id(1), z = get_global_id(2);
    if (t >= NT || c >= C)
        return;
    const int ty = t / TW, tx = t - ty * TW;
    const int y0 = 4 * ty - PH, x0 = 4 * tx - PW;
    const __global ST_T(XH)* xp = X + offX + z * sX + c * H * W;
    float d[6][6];
#pragma unroll
    for (int i = 0; i < 6; ++i)
#pragma unroll
        for (int j = 0; j < 6; ++j)
            d[i][j] = wino_x(xp, y0 + i, x0 + j, H, W);
    float e[6][6]; /* B^T d: along the rows, e[.][j] from column j of d */
#pragma unroll
    for (int j = 0; j < 6; ++j) {
        float o[6];
        BT6_1D(o, d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j]);
#pragma unroll
        for (int i = 0; i < 6; ++i)
            e[i][j] = o[i];
    }
    __global float* vp = V + z * sV + c * NT + t;
    const int sxi = C * NT; /* V[z][xi] is C x NT */
#pragma unroll
    for (int i = 0; i < 6; ++i) { /* (B^T d) B: along the columns */
        float o[6];
        BT6_1D(o, e[i][0], e[i][1], e[i][2], e[i][3], e[i][4], e[i][5]);
#pragma unroll
        for (int j = 0; j < 6; ++j)
            vp[(6 * i + j) * sxi] = o[j];
    }
}

__kernel void wino4_out(__global const float* restrict Mp, int sM, __global ST_T(YH)* Y, int offY, int sY,
                        __global const float* restrict bias, __global const ST_T(YH)* Z, int Cout, int OH, int OW,
                        int TW, int NT, int flags, float act_a, float act_b, float act_c)
{
    const int t = get_global_id(0), o = get_global_id(1), z = get_global_id(2);
    if (t >= NT || o >= Cout)
        return;
    const __global float* mp = Mp + z * sM + o * NT + t;
    const int sxi = Cout * NT; /* Mp[z][xi] is Cout x NT */
    float r[4][6]; /* A^T m: r[.][j] from column j of the 6x6 products */
#pragma unroll
    for (int j = 0; j < 6; ++j) {
        float o4[4];
        AT6_1D(o4, mp[j * sxi], mp[(6 + j) * sxi], mp[(12 + j) * sxi], mp[(18 + j) * sxi], mp[(24 + j) * sxi],
               mp[(30 + j) * sxi]);
#pragma unroll
        for (int i = 0; i < 4; ++i)
            r[i][j] = o4[i];
    }
    const int ty = t / TW, tx = t - ty * TW;
    const float b = (flags & FLAG_BIAS) ? bias[o] : 0.0f;
    const int plane = offY + z * sY + o * OH * OW;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float v4[4]; /* (A^T m) A */
        AT6_1D(v4, r[i][0], r[i][1], r[i][2], r[i][3], r[i][4], r[i][5]);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            wino_store(Y, Z, plane, 4 * ty + i, 4 * tx + j, OH, OW, v4[j], b, flags, act_a, act_b, act_c);
    }
}
