/* Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions: the input and output transforms around a
 * batched GEMM (F(4x4) at the end of the file).
 *
 * A stride-1 3x3 convolution computes each 2x2 block of output pixels from a 4x4 patch d of
 * the input as Y = A^T [U (.) V] A with U = G g G^T (the 3x3 filter g transformed once, at plan
 * time: lower/winograd.py) and V = B^T d B: 16 products per output block instead of 36.
 * Summed over the input channels, the 16 element-wise products are 16 independent GEMMs
 * M[xi] = U[xi] (Cout x Cin) @ V[xi] (Cin x tiles), run by gemm.cl with xi as a batch index.
 *
 *   wino_in   X [N][Cin][H][W] -> V [N][Cin][16][LDV]: for image i and xi a Cin x tiles matrix
 *             with rows 16 * LDV apart, the GEMM's B read in place (a channel's 16 rows side by
 *             side: a segment's 16 stores land in one 16 * LDV stretch; with the 16 matrices
 *             apart the transform took 2.4x as long)
 *   wino_out  M [N][16][Cout][tiles] -> Y [N][Cout][OH][OW], with the conv's epilogue: bias,
 *             residual Z, activation (activation.h)
 * Each work-item takes 8 consecutive tiles of one tile row (one channel, one image) as float8
 * lanes: a patch row is three shifted loads from a private ring of zero-padded input rows (see
 * wino_in), and the 16 values of the 8 tiles' 2x2 blocks in an output row one float16 store. Pocl runs a
 * work-item's code as written (no builtins inlined, no vectorising across scalar work-items
 * with scattered stores): one tile per work-item ran 5x slower.
 *
 * Tile (ty, tx) covers output rows 2*ty, 2*ty+1 and columns 2*tx, 2*tx+1 and reads input rows
 * 2*ty - ph .. +3 and columns 2*tx - pw .. +3, zero outside X. A launch covers the tile rows
 * TY0 .. TY0 + TH - 1 (a piece of the image: the scratch stays small), tile t = (ty - TY0) *
 * TW + tx of V and M.
 *
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]      A^T = [1 1 1 0; 0 1 -1 -1]
 */
#include "activation.h"
DEFINE_ACT(act_s, float)
DEFINE_ACT(act_16, float16)

typedef float16 f16u __attribute__((aligned(4)));
typedef float8 f8u __attribute__((aligned(4)));
typedef float2 f2u __attribute__((aligned(4)));

/* Storage of X (XH) and of Y with its residual Z (YH): 0 float, 1 half (storage.h; read and
 * written as floats, the transforms and the GEMM's V and M stay float). */
#include "storage.h"
#define XT ST_T(XH)
#define YT ST_T(YH)

/* B^T applied to 4 values (a row or a column of the patch; scalars or vectors). */
#define BT4(o0, o1, o2, o3, d0, d1, d2, d3) do { \
        o0 = (d0) - (d2); o1 = (d1) + (d2); o2 = (d2) - (d1); o3 = (d1) - (d3); } while (0)

#define WINO_ROW 512  /* floats per ring row (lower/winograd.py _WINO_ROW) */

/* Input row `row` (W floats; zeros when `in` is false: a padding row) into a ring buffer row at
 * dst (its column pw), in vectors of 16 (the last 16 overlapping) without bounds tests. */
inline void ring_row(float* dst, const __global XT* row, int w, bool in)
{
    if (w >= 16) {
#pragma unroll 1
        for (int c = 0; c < w - 16; c += 16)
            *(f16u*)(dst + c) = in ? ST_LDV(XH, 16, row + c) : (float16)0.0f;
        *(f16u*)(dst + w - 16) = in ? ST_LDV(XH, 16, row + w - 16) : (float16)0.0f;
    } else {
#pragma unroll 1
        for (int c = 0; c < w; ++c)
            dst[c] = in ? ST_LD(XH, row, c) : 0.0f;
    }
}

/* `rows` ring rows of WINO_ROW floats zeroed over their first `span` columns. */
inline void ring_zero(float* buf, int rows, int span)
{
#pragma unroll 1
    for (int r = 0; r < rows; ++r)
#pragma unroll 1
        for (int c = 0; c < span; c += 16)
            *(float16*)(buf + r * WINO_ROW + c) = (float16)0.0f;
}

/* One output row of a segment: `nv` float16s of pixels from `at`, of which the first n are real
 * (the rest lie past the row's end): residual, activation, store; whole vectors when all are. */
inline void store_row(__global YT* Y, const __global YT* Z, int at, const float16* v, int nv, int n,
                      int flags, float act_a, float act_b, float act_c)
{
    if (n == 16 * nv) {
        for (int q = 0; q < nv; ++q) {  /* nv is a constant where this is inlined */
            float16 u = v[q];
            if (flags & 2)
                u += ST_LDV(YH, 16, Z + at + 16 * q);
            ST_STV(YH, 16, Y + at + 16 * q, act_16(u, act_a, act_b, act_c));
        }
        return;
    }
    const float* t = (const float*)v;
#pragma unroll 1
    for (int c = 0; c < n; ++c) {
        float u = t[c];
        if (flags & 2)
            u += ST_LD(YH, Z, at + c);
        ST_ST(YH, Y, at + c, act_s(u, act_a, act_b, act_c));
    }
}

/* Work-item (image * Cin + channel): its channel's tile rows in order, 8 tiles at a time.
 * Each tile row's 4 input rows are first copied into a private zero-padded row buffer (column
 * c is input column c - pw): no bounds tests after that, and no scalar stores just before
 * vector loads (each such load waits for the stores to drain: an edge path built that way
 * took 34% of the kernel). Along the columns B^T works on shifted rows: with R0, R1, R2 the 16
 * buffer columns from 2 * tx0, + 1, + 2, tile t's four column sums are lanes of
 *   R0 - R2 (even lane 2t: d0 - d2, odd lane 2t + 1: d1 - d3), R1 + R2 (lane 2t: d1 + d2),
 *   R2 - R1 (lane 2t: d2 - d1),
 * so a patch row costs three loads and three vector ops; B^T along the rows is then lane-wise.
 * Every segment stores 8 tiles: a tile row's last segment spills into the next tile row's
 * first tiles, which this work-item writes next, or past the last tile into the row's
 * padding (LDV >= tiles + 8).
 * WINO_ROW (lower/winograd.py checks it): the buffer's floats per row, at least
 * max(pw + W, 2 * TW rounded up to 8) + 18. */
__kernel void wino_in(__global const XT* X, int offX, int x_s1, int cin, int h, int w, int ph, int pw,
                      int tw, int ty0, int th, int ldv, __global float* V, int v_s1)
{
    const int zc = get_global_id(0);
    if (cin == 0)
        return;
    const int i = zc / cin;
    const int ci = zc - i * cin;
    const __global XT* xp = X + offX + i * x_s1 + ci * (h * w);
    const int xs = ldv;  /* from a channel's row of one xi to the next xi's */
    __global float* vrow = V + i * v_s1 + ci * (16 * ldv);
    const int span = 2 * ((tw + 7) & ~7) + 18;  /* buffer columns the segments read */
    /* Padded input row yy = y + ph lives in slot yy & 7. Tile row ty reads padded rows 2 ty ..
     * 2 ty + 3, copied while the tile row before it was computed: a vector load of a row just
     * copied waits for the copy's stores to drain (half the kernel's time when each tile row
     * copied its own rows). The columns outside [pw, pw + W) are zeroed once and never written
     * after. */
    float buf[8][WINO_ROW] __attribute__((aligned(64)));
    ring_zero(buf[0], 8, span);

#pragma unroll 1
    for (int ty = ty0; ty < ty0 + th; ++ty) {
        /* the next tile row's two new rows (and at the start this one's four) */
#pragma unroll 1
        for (int yy = ty == ty0 ? 2 * ty : 2 * ty + 4; yy < 2 * ty + 6 && yy < 2 * (ty0 + th) + 2; ++yy) {
            const int y = yy - ph;
            ring_row(buf[yy & 7] + pw, xp + y * w, w, y >= 0 && y < h);
        }
        const int s0 = 2 * ty;  /* the tile row's first padded row */
#pragma unroll 1
        for (int tx0 = 0; tx0 < tw; tx0 += 8) {
            float16 e[4], f[4], g[4];  /* per patch row: R0 - R2, R1 + R2, R2 - R1 */
#pragma unroll 1
            for (int r = 0; r < 4; ++r) {
                const float* src = buf[(s0 + r) & 7] + 2 * tx0;
                const float16 r0 = *(const f16u*)src;
                const float16 r1 = *(const f16u*)(src + 1);
                const float16 r2 = *(const f16u*)(src + 2);
                e[r] = r0 - r2;
                f[r] = r1 + r2;
                g[r] = r2 - r1;
            }
            __global float* vb = vrow + (ty - ty0) * tw + tx0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {  /* row k of B^T, on the column sums */
                float16 ek, fk, gk;
                if (k == 0) { ek = e[0] - e[2]; fk = f[0] - f[2]; gk = g[0] - g[2]; }
                else if (k == 1) { ek = e[1] + e[2]; fk = f[1] + f[2]; gk = g[1] + g[2]; }
                else if (k == 2) { ek = e[2] - e[1]; fk = f[2] - f[1]; gk = g[2] - g[1]; }
                else { ek = e[1] - e[3]; fk = f[1] - f[3]; gk = g[1] - g[3]; }
                *(__global f8u*)(vb + (4 * k + 0) * xs) = ek.even;
                *(__global f8u*)(vb + (4 * k + 1) * xs) = fk.even;
                *(__global f8u*)(vb + (4 * k + 2) * xs) = gk.even;
                *(__global f8u*)(vb + (4 * k + 3) * xs) = ek.odd;
            }
        }
    }
}

/* Work-item (tile row, image * Cout + channel): the row's tiles 8 at a time. M has 8 floats of
 * slack past its end (a last segment's loads past the last tile). flags: 1 = bias (per output
 * channel), 2 = residual Z (Y's layout). */
__kernel void wino_out(__global const float* Mt, int m_s1, int cout, int tw, int ty0, int th, int oh, int ow,
                       __global YT* Y, int offY, int y_s1, __global const float* bias,
                       __global const YT* Z, int flags, float act_a, float act_b, float act_c)
{
    const int tr = get_global_id(0);  /* tile row ty0 + tr */
    const int zc = get_global_id(1);
    if (tr >= th || cout == 0)
        return;
    const int i = zc / cout;
    const int co = zc - i * cout;
    const int ntiles = th * tw;
    const int plane = cout * ntiles;
    const float b = (flags & 1) ? bias[co] : 0.0f;
    const int y0 = 2 * (ty0 + tr);
    const int rows = min(2, oh - y0);
#pragma unroll 1
    for (int tx0 = 0; tx0 < tw; tx0 += 8) {
        const __global float* mp = Mt + i * m_s1 + co * ntiles + tr * tw + tx0;
        float8 s[2][4];  /* A^T M */
#pragma unroll 1
        for (int c = 0; c < 4; ++c) {
            const float8 m0 = *(const __global f8u*)(mp + c * plane);
            const float8 m1 = *(const __global f8u*)(mp + (4 + c) * plane);
            const float8 m2 = *(const __global f8u*)(mp + (8 + c) * plane);
            const float8 m3 = *(const __global f8u*)(mp + (12 + c) * plane);
            s[0][c] = m0 + m1 + m2;
            s[1][c] = m1 - m2 - m3;
        }
        const int n = min(16, ow - 2 * tx0);  /* output columns of this segment */
#pragma unroll 1
        for (int r = 0; r < rows; ++r) {
            const float8 e = s[r][0] + s[r][1] + s[r][2] + b;  /* even output columns */
            const float8 o = s[r][1] - s[r][2] - s[r][3] + b;  /* odd ones */
            float16 v[1] __attribute__((aligned(64)));
            v[0] = (float16)(e.s0, o.s0, e.s1, o.s1, e.s2, o.s2, e.s3, o.s3,
                             e.s4, o.s4, e.s5, o.s5, e.s6, o.s6, e.s7, o.s7);
            store_row(Y, Z, offY + i * y_s1 + co * (oh * ow) + (y0 + r) * ow + 2 * tx0, v, 1, n, flags,
                      act_a, act_b, act_c);
        }
    }
}

/* --- F(4x4, 3x3): 6x6 patches, 4x4 output blocks, 36 GEMMs (4x fewer multiplies than direct) --
 *
 *   B^T = [4  0 -5  0 1 0;  0 -4 -4  1 1 0;  0 4 -4 -1 1 0;
 *          0 -2 -1  2 1 0;  0  2 -1 -2 1 0;  0 4  0 -5 0 1]
 *   A^T = [1 1  1 1  1 0;  0 1 -1 2 -2 0;  0 1 1 4 4 0;  0 1 -1 8 -8 1]
 * Same layouts as above with 36 matrices (xi = 6 * row + column); tile (ty, tx) covers output rows
 * 4*ty .. +3 and columns 4*tx .. +3 and reads input rows 4*ty - ph .. +5, columns 4*tx - pw .. +5.
 */

/* B^T applied to 6 values. */
#define BT6(o, d) do {                                              \
        o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];                    \
        o[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]);                  \
        o[2] = d[4] - d[3] + 4.0f * (d[1] - d[2]);                  \
        o[3] = d[4] - d[2] + 2.0f * (d[3] - d[1]);                  \
        o[4] = d[4] - d[2] + 2.0f * (d[1] - d[3]);                  \
        o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];                    \
    } while (0)

/* Work-item (image * Cin + channel), as wino_in: a private ring of 16 zero-padded input rows
 * (tile row ty reads padded rows 4 ty .. 4 ty + 5; the next tile row's 4 new rows are copied
 * before this one is computed). For 8 tiles the patch column c is lanes c, c + 4, .., c + 28
 * of the buffer's 48 columns from 4 * tx0. WINO_ROW >= max(pw + W, 4 * TW rounded up to 8 + 16). */
__kernel void wino4_in(__global const XT* X, int offX, int x_s1, int cin, int h, int w, int ph, int pw,
                       int tw, int ty0, int th, int ldv, __global float* V, int v_s1)
{
    const int zc = get_global_id(0);
    if (cin == 0)
        return;
    const int i = zc / cin;
    const int ci = zc - i * cin;
    const __global XT* xp = X + offX + i * x_s1 + ci * (h * w);
    const int xs = ldv;  /* from a channel's row of one xi to the next xi's */
    __global float* vrow = V + i * v_s1 + ci * (36 * ldv);
    const int span = 4 * ((tw + 7) & ~7) + 16;
    float buf[16][WINO_ROW] __attribute__((aligned(64)));
    ring_zero(buf[0], 16, span);

#pragma unroll 1
    for (int ty = ty0; ty < ty0 + th; ++ty) {
#pragma unroll 1
        for (int yy = ty == ty0 ? 4 * ty : 4 * ty + 6; yy < 4 * ty + 10 && yy < 4 * (ty0 + th) + 2; ++yy) {
            const int y = yy - ph;
            ring_row(buf[yy & 15] + pw, xp + y * w, w, y >= 0 && y < h);
        }
#pragma unroll 1
        for (int tx0 = 0; tx0 < tw; tx0 += 8) {
            float8 u[6][6];  /* u[r][k]: B^T along the columns of patch row r */
#pragma unroll 1
            for (int r = 0; r < 6; ++r) {
                const float* src = buf[(4 * ty + r) & 15] + 4 * tx0;
                const float16 a = *(const f16u*)src, b = *(const f16u*)(src + 16);
                const float2 c = *(const f2u*)(src + 32);
                float8 d[6];
                d[0] = (float8)(a.s0, a.s4, a.s8, a.sc, b.s0, b.s4, b.s8, b.sc);
                d[1] = (float8)(a.s1, a.s5, a.s9, a.sd, b.s1, b.s5, b.s9, b.sd);
                d[2] = (float8)(a.s2, a.s6, a.sa, a.se, b.s2, b.s6, b.sa, b.se);
                d[3] = (float8)(a.s3, a.s7, a.sb, a.sf, b.s3, b.s7, b.sb, b.sf);
                d[4] = (float8)(a.s4, a.s8, a.sc, b.s0, b.s4, b.s8, b.sc, c.s0);
                d[5] = (float8)(a.s5, a.s9, a.sd, b.s1, b.s5, b.s9, b.sd, c.s1);
                BT6(u[r], d);
            }
            __global float* vb = vrow + (ty - ty0) * tw + tx0;
#pragma unroll 1
            for (int k = 0; k < 6; ++k) {  /* B^T along the rows, column k */
                float8 col[6], v[6];
#pragma unroll
                for (int r = 0; r < 6; ++r)
                    col[r] = u[r][k];
                BT6(v, col);
#pragma unroll
                for (int j = 0; j < 6; ++j)
                    *(__global f8u*)(vb + (6 * j + k) * xs) = v[j];
            }
        }
    }
}

/* Work-item (tile row, image * Cout + channel): the row's tiles 8 at a time, each output row of
 * them 32 pixels (two float16 stores). M has 8 floats of slack past its end. */
__kernel void wino4_out(__global const float* Mt, int m_s1, int cout, int tw, int ty0, int th, int oh, int ow,
                        __global YT* Y, int offY, int y_s1, __global const float* bias,
                        __global const YT* Z, int flags, float act_a, float act_b, float act_c)
{
    const int tr = get_global_id(0);
    const int zc = get_global_id(1);
    if (tr >= th || cout == 0)
        return;
    const int i = zc / cout;
    const int co = zc - i * cout;
    const int ntiles = th * tw;
    const int plane = cout * ntiles;
    const float b = (flags & 1) ? bias[co] : 0.0f;
    const int y0 = 4 * (ty0 + tr);
    const int rows = min(4, oh - y0);
#pragma unroll 1
    for (int tx0 = 0; tx0 < tw; tx0 += 8) {
        const __global float* mp = Mt + i * m_s1 + co * ntiles + tr * tw + tx0;
        float8 s[4][6];  /* A^T M (over the rows j), column k */
#pragma unroll 1
        for (int k = 0; k < 6; ++k) {
            float8 m[6];
#pragma unroll
            for (int j = 0; j < 6; ++j)
                m[j] = *(const __global f8u*)(mp + (6 * j + k) * plane);
            s[0][k] = m[0] + m[1] + m[2] + m[3] + m[4];
            s[1][k] = m[1] - m[2] + 2.0f * (m[3] - m[4]);
            s[2][k] = m[1] + m[2] + 4.0f * (m[3] + m[4]);
            s[3][k] = m[1] - m[2] + 8.0f * (m[3] - m[4]) + m[5];
        }
        const int n = min(32, ow - 4 * tx0);  /* output columns of this segment */
#pragma unroll 1
        for (int r = 0; r < rows; ++r) {
            const float8 y0v = s[r][0] + s[r][1] + s[r][2] + s[r][3] + s[r][4] + b;
            const float8 y1v = s[r][1] - s[r][2] + 2.0f * (s[r][3] - s[r][4]) + b;
            const float8 y2v = s[r][1] + s[r][2] + 4.0f * (s[r][3] + s[r][4]) + b;
            const float8 y3v = s[r][1] - s[r][2] + 8.0f * (s[r][3] - s[r][4]) + s[r][5] + b;
            float16 v[2] __attribute__((aligned(64)));
            v[0] = (float16)(y0v.s0, y1v.s0, y2v.s0, y3v.s0, y0v.s1, y1v.s1, y2v.s1, y3v.s1,
                             y0v.s2, y1v.s2, y2v.s2, y3v.s2, y0v.s3, y1v.s3, y2v.s3, y3v.s3);
            v[1] = (float16)(y0v.s4, y1v.s4, y2v.s4, y3v.s4, y0v.s5, y1v.s5, y2v.s5, y3v.s5,
                             y0v.s6, y1v.s6, y2v.s6, y3v.s6, y0v.s7, y1v.s7, y2v.s7, y3v.s7);
            store_row(Y, Z, offY + i * y_s1 + co * (oh * ow) + (y0 + r) * ow + 4 * tx0, v, 2, n, flags,
                      act_a, act_b, act_c);
        }
    }
}

/* --- The transposed forms for few tiles (lower/winograd.py, variants F2T / F4T) ---------------
 *
 * On a small map (ResNet's 14x14 and 7x7 layers: 16-49 tiles) the per-point GEMM's N = tiles is
 * too narrow for the register tile's columns; transposed, M^T[xi] = V^T[xi] U^T[xi] takes the
 * tiles as its MR rows and the output channels as its wide NR columns, and the GEMM stores M
 * transposed (gemm.cl C_TRANS), in the layout wino_out / wino4_out read. The input transform
 * writes V^T as gemm.cl's packed A panels: V [N][alpha^2][tiles / MR][Cin][MR], the panel rows
 * past the last tile zero. Work-item (image * Cin + channel): every tile of its channel, one
 * patch at a time with bounds tests (few tiles: the transform is a small part of the conv). */
#define WT_IN_BODY(ALPHA, M_OUT, BT)                                                          \
    const int zc = get_global_id(0);                                                          \
    if (cin == 0)                                                                             \
        return;                                                                               \
    const int i = zc / cin;                                                                   \
    const int ci = zc - i * cin;                                                              \
    const __global XT* xp = X + offX + i * x_s1 + ci * (h * w);                               \
    __global float* vp = V + i * v_s1 + ci * mr;                                              \
    const int nt = tw * th;                                                                   \
    const int ntp = (nt + mr - 1) / mr * mr;                                                  \
    _Pragma("unroll 1")                                                                       \
    for (int t = 0; t < ntp; ++t) {                                                           \
        __global float* vt = vp + (t / mr) * (cin * mr) + t % mr;                             \
        if (t >= nt) {                                                                        \
            for (int x = 0; x < ALPHA * ALPHA; ++x)                                           \
                vt[x * v_s2] = 0.0f;                                                          \
            continue;                                                                         \
        }                                                                                     \
        const int ty = t / tw, tx = t - (t / tw) * tw;                                        \
        const int y0 = M_OUT * ty - ph, x0 = M_OUT * tx - pw;                                 \
        float d[ALPHA][ALPHA], u[ALPHA][ALPHA];                                               \
        _Pragma("unroll")                                                                     \
        for (int r = 0; r < ALPHA; ++r) {                                                     \
            const int y = y0 + r;                                                             \
            _Pragma("unroll")                                                                 \
            for (int c = 0; c < ALPHA; ++c) {                                                 \
                const int x = x0 + c;                                                         \
                d[r][c] = (y >= 0 && y < h && x >= 0 && x < w) ? ST_LD(XH, xp, y * w + x) : 0.0f; \
            }                                                                                 \
            BT(u[r], d[r]);                                                                   \
        }                                                                                     \
        _Pragma("unroll")                                                                     \
        for (int k = 0; k < ALPHA; ++k) {                                                     \
            float col[ALPHA], o[ALPHA];                                                       \
            _Pragma("unroll")                                                                 \
            for (int r = 0; r < ALPHA; ++r)                                                   \
                col[r] = u[r][k];                                                             \
            BT(o, col);                                                                       \
            _Pragma("unroll")                                                                 \
            for (int j = 0; j < ALPHA; ++j)                                                   \
                vt[(ALPHA * j + k) * v_s2] = o[j];                                            \
        }                                                                                     \
    }

#define BT4A(o, d) BT4(o[0], o[1], o[2], o[3], d[0], d[1], d[2], d[3])

/* F(2x2) transposed: V^T panels of `mr` tiles (v_s2 floats from one xi's panels to the next). */
__kernel void wt2_in(__global const XT* X, int offX, int x_s1, int cin, int h, int w, int ph, int pw,
                     int tw, int th, int mr, __global float* V, int v_s1, int v_s2)
{
    WT_IN_BODY(4, 2, BT4A)
}

/* F(4x4) transposed: as wt2_in with 6x6 patches. */
__kernel void wt4_in(__global const XT* X, int offX, int x_s1, int cin, int h, int w, int ph, int pw,
                     int tw, int th, int mr, __global float* V, int v_s1, int v_s2)
{
    WT_IN_BODY(6, 4, BT6)
}
