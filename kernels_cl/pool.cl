/* Pooling over up to 3 spatial dims (1-D and 2-D are padded with unit dims).
 *   T               element type (float; uchar / char for an 8-bit MaxPool, with POOL_INIT its minimum)
 *   POOL_MAX / POOL_AVG
 *   COUNT_INCLUDE_PAD   AveragePool divides by the window clipped to the padded extent
 *   WITH_INDICES    MaxPool also writes the flat (row-major, whole tensor) argmax as long
 *   STORAGE_COL     ... with the spatial offset counted column-major (storage_order=1: d + h*D + w*D*H,
 *                   as onnx.reference's MaxPool; the plane offset n*C + c stays row-major)
 *   XH / YH         x / y stored as half (storage.h; T is float then): read and written through
 *                   the storage macros, the arithmetic in float (0: the plain loads and stores)
 * The window geometry comes as by-value arguments (uniform across work-items, so pocl keeps the
 * window loops scalar and vectorises across output columns); padded taps read a clamped, valid
 * address and are masked with a select, no branches.
 * gsize = (round_up(OW, lsize0), OH, N*C*OD): one output element per work-item.
 */
#ifndef T
#define T float
#endif
#include "lanes.h"
#include "storage.h"
#if XH
#define XT half
#else
#define XT T
#endif
#if YH
#define YT half
#else
#define YT T
#endif

#define POOL_GEOM int ID, int IH, int IW, int OD, int OH, int OW, int KD, int KH, int KW, \
                  int SD, int SH, int SW, int PD, int PH, int PW, int ED, int EH, int EW,   \
                  int DD, int DH, int DW

__kernel void pool(__global const XT* restrict x, __global YT* restrict y,
#ifdef WITH_INDICES
                   __global long* restrict ind,
#endif
                   POOL_GEOM) {
    const int ow = get_global_id(0);
    const int oh = get_global_id(1);
    const int z = get_global_id(2);
    if (ow >= OW) return;
    const int nc = z / OD;
    const int od = z - nc * OD;
    const int d0 = od * SD - PD, h0 = oh * SH - PH, w0 = ow * SW - PW;
    const int plane = ID * IH * IW;
    __global const XT* xc = x + (long)nc * plane;
#ifdef POOL_MAX
#ifdef POOL_INIT
    T best = POOL_INIT;  /* an integer type's minimum (uint8 / int8 MaxPool) */
#else
    T best = -INFINITY;
#endif
#ifdef WITH_INDICES
    int arg = -1;
#endif
#else
    float acc = 0.0f;
    int cnt = 0;
#endif
    for (int kd = 0; kd < KD; ++kd) {
        const int id = d0 + kd * DD;
        const bool din = id >= 0 && id < ID;
        const int idc = clamp(id, 0, ID - 1);
#if defined(POOL_AVG) && defined(COUNT_INCLUDE_PAD)
        const bool dpad = id >= -PD && id < ID + ED;
#endif
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            const bool hin = din && ih >= 0 && ih < IH;
            const int row = (idc * IH + clamp(ih, 0, IH - 1)) * IW;
#if defined(POOL_AVG) && defined(COUNT_INCLUDE_PAD)
            const bool hpad = dpad && ih >= -PH && ih < IH + EH;
#endif
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = w0 + kw * DW;
                const bool inside = hin && iw >= 0 && iw < IW;
                const int off = row + clamp(iw, 0, IW - 1);
                const T v = ST_LD(XH, xc, off);
#ifdef POOL_MAX
#ifdef WITH_INDICES
                const bool take = inside && (v > best || arg < 0);
#ifdef STORAGE_COL
                arg = take ? idc + (clamp(ih, 0, IH - 1) + clamp(iw, 0, IW - 1) * IH) * ID : arg;
#else
                arg = take ? off : arg;
#endif
                best = take ? v : best;
#else
                best = (inside && v > best) ? v : best;
#endif
#else
                acc += inside ? v : 0.0f;
#ifdef COUNT_INCLUDE_PAD
                cnt += (hpad && iw >= -PW && iw < IW + EW) ? 1 : 0;
#else
                cnt += inside ? 1 : 0;
#endif
#endif
            }
        }
    }
    const int i = (z * OH + oh) * OW + ow;
#ifdef POOL_MAX
    ST_ST(YH, y, i, best);
#ifdef WITH_INDICES
    ind[i] = arg < 0 ? 0 : (long)nc * plane + arg;
#endif
#else
    ST_ST(YH, y, i, cnt > 0 ? acc / (float)cnt : 0.0f);
#endif
}

/* 2-D MaxPool/AveragePool fast path (no dilation, no Indices, 15*SW + KW <= 48, IW <= MP_MAXW,
 * pads <= 16): one work-item per output row. The KH input rows are reduced (max, or summed) into
 * a private row first (float16 loads, the row padded with -inf or 0 on both sides), then each
 * run of 16 outputs reduces its KW columns from it: one unaligned vector per tap at stride 1,
 * the even lanes of two at stride 2, no bounds tests in either loop. The average divides by the
 * window's rows x columns inside X (or inside the padded extent, COUNT_INCLUDE_PAD), computed
 * per lane. Measured on pocl (AVX-512): ResNet's 3x3/2 max pool of 64x112x112 0.05 ms (0.33 ms
 * reading the windows with per-load edge tests); against the general kernel, a 3x3/1 average
 * pool of 128x28x28 0.84 -> 0.11 ms, YOLO's 5x5/1 max pool of 256x20x20 0.35 -> 0.13 ms, a 2x2/2
 * max pool of 128x80x80 0.26 -> 0.08 ms. gsize = (OH, N*C). */
#define MP_MAXW 256
typedef float16 float16_u __attribute__((aligned(4)));
#ifdef POOL_MAX
#define P_PAD (-INFINITY)
#define P_OP(a, b) ((b) > (a) ? (b) : (a))
#else
#define P_PAD 0.0f
#define P_OP(a, b) ((a) + (b))
#endif

__kernel void pool2d_rows(__global const XT* restrict x, __global YT* restrict y, int IH, int IW, int OH,
                          int OW, int KH, int KW, int SH, int SW, int PH, int PW, int EH, int EW) {
    const int oh = get_global_id(0);
    const int z = get_global_id(1);
    if (oh >= OH)
        return;
    /* row[16 + i] = the reduction over the window's rows of x[.][i]; P_PAD at 0 .. 15 and past IW */
    float row[16 + MP_MAXW + 96] __attribute__((aligned(64)));
    __global const XT* xc = x + (long)z * IH * IW;
    const int h0 = oh * SH - PH;
    const int r0 = max(h0, 0);
    const int r1 = min(h0 + KH, IH);
    const int nv = r0 < r1 ? IW / 16 : 0;
    for (int i = 0; i < nv; ++i) {
        float16 m = ST_LDV(XH, 16, xc + r0 * IW + 16 * i);
        for (int r = r0 + 1; r < r1; ++r)
            m = P_OP(m, ST_LDV(XH, 16, xc + r * IW + 16 * i));
        *(float16*)(row + 16 + 16 * i) = m;
    }
    for (int i = nv * 16; i < IW; ++i) {
        float m = P_PAD;
        for (int r = r0; r < r1; ++r)
            m = P_OP(m, ST_LD(XH, xc, r * IW + i));
        row[16 + i] = m;
    }
    *(float16*)row = (float16)(P_PAD);
#pragma unroll
    for (int i = 0; i < 6; ++i)
        *(float16_u*)(row + 16 + IW + 16 * i) = (float16)(P_PAD);
    const float* base = row + 16 - PW;
    __global YT* yr = y + ((long)z * OH + oh) * OW;
#ifdef POOL_AVG
    /* rows of the window counted, then columns per lane */
#ifdef COUNT_INCLUDE_PAD
    const float rows_in = (float)(min(h0 + KH, IH + EH) - max(h0, -PH));
    const int c_lo = -PW, c_hi = IW + EW;
#else
    const float rows_in = (float)(r1 - r0);
    const int c_lo = 0, c_hi = IW;
#endif
    const float16 lanef = (float16)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f,
                                    12.0f, 13.0f, 14.0f, 15.0f);
#endif
    for (int o0 = 0; o0 < OW; o0 += 16) {
        const float* w = base + SW * o0;
        float16 res;
#ifdef POOL_MAX
        if (SW == 2 && KW == 3) {
            /* ResNet/VGG's 3x3/2 in shuffles: output c takes columns 2c, 2c+1, 2c+2 of w, i.e.
             * max(even[c], odd[c], even[c+1]). */
            const float16 a = *(const float16_u*)w;
            const float16 b = *(const float16_u*)(w + 16);
            const float16 ev = (float16)(a.even, b.even);
            const float16 od = (float16)(a.odd, b.odd);
            const float16 e1 = (float16)(ev.s1234, ev.s5678, ev.s9abc, ev.sdef, w[32]);
            res = od > ev ? od : ev;
            res = e1 > res ? e1 : res;
        } else
#endif
        if (SW == 1) {
            res = *(const float16_u*)w;
            for (int kw = 1; kw < KW; ++kw)
                res = P_OP(res, *(const float16_u*)(w + kw));
        } else if (SW == 2) {
            res = (float16)(P_PAD);
            for (int kw = 0; kw < KW; ++kw) {
                const float16 lo = *(const float16_u*)(w + kw);
                const float16 hi = *(const float16_u*)(w + kw + 16);
                res = P_OP(res, (float16)(lo.even, hi.even));
            }
        } else {
            float o[16] __attribute__((aligned(64)));
#pragma unroll
            for (int c = 0; c < 16; ++c) {
                float m = P_PAD;
                for (int kw = 0; kw < KW; ++kw)
                    m = P_OP(m, w[c * SW + kw]);
                o[c] = m;
            }
            res = *(const float16*)o;
        }
#ifdef POOL_AVG
        const float16 w0 = (lanef + (float)o0) * (float)SW - (float)PW;
        float16 lo = w0 < (float)c_lo ? (float16)((float)c_lo) : w0;
        float16 hi = w0 + (float)KW;
        hi = hi > (float)c_hi ? (float16)((float)c_hi) : hi;
        const float16 cnt = (hi - lo) * rows_in;
        res = cnt > 0.0f ? res / cnt : (float16)0.0f;
#endif
        if (o0 + 16 <= OW) {
            ST_STV(YH, 16, yr + o0, res);
        } else {
            const float* o = (const float*)&res;
            for (int c = 0; c < OW - o0; ++c)
                ST_ST(YH, yr, o0 + c, o[c]);
        }
    }
}

#if XH
/* A half plane's max or sum in float: 16 lanes converted at a time, then the tail. */
inline float half_plane(__global const half* restrict xc, const int len) {
#ifdef POOL_MAX
    float16 a = (float16)(-INFINITY);
#define HP_OP(a, b) fmax((a), (b))
#else
    float16 a = (float16)(0.0f);
#define HP_OP(a, b) ((a) + (b))
#endif
    int j = 0;
    for (; j + 16 <= len; j += 16)
        a = HP_OP(a, ST_LDV(1, 16, xc + j));
    float8 b = HP_OP(a.lo, a.hi);
    float4 c = HP_OP(b.lo, b.hi);
    float2 d = HP_OP(c.lo, c.hi);
    float r = HP_OP(d.lo, d.hi);
    for (; j < len; ++j)
        r = HP_OP(r, ST_LD(1, xc, j));
    return r;
}
#endif

/* Global pooling: one work-item per (n, c) plane of `len` elements. */
__kernel void global_pool(__global const XT* restrict x, __global YT* restrict y, const int nc, const int len) {
    const int i = get_global_id(0);
    if (i >= nc) return;
    __global const XT* restrict xc = x + (long)i * len;
#if XH
    const float r = half_plane(xc, len);
#elif defined(POOL_MAX)
    const T r = lanes_max(xc, len);
#else
    const T r = lanes_sum(xc, len);
#endif
#ifdef POOL_MAX
    ST_ST(YH, y, i, r);
#else
    ST_ST(YH, y, i, r / (float)len);
#endif
}
