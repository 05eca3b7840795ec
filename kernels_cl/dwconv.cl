/* Direct depthwise 2-D convolution (groups == input channels; 1-D convs pass H = KH = 1)
 * with the same fused epilogue as gemm.cl: Y = ACT(conv + bias + Z).
 *
 * Output channel oc reads input channel oc / MULT (MULT = Cout / Cin, the depth multiplier).
 * dwconv: any kernel size, stride, dilation and padding; each work-item computes DW_T
 * consecutive outputs of one row (taps in registers, a branch-free path for interior segments).
 * gsize = (ceil(OW / DW_T), OH, images*Cout).
 * dwconv_rows (below, built with DW_S defined): KxK (3, 5, 7) stride-1/2, DW_RT rows per work-item.
 * XH / YH: X / Y and its residual Z stored as half (storage.h; the taps, weights and sums stay
 * float; 0: the plain loads and stores).
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_RES
#define HAS_RES 0
#endif
#include "activation.h"
DEFINE_ACT(act_s, float)
DEFINE_ACT(act_v16, float16)
typedef float16 float16_u __attribute__((aligned(4)));
#include "storage.h"
#define XT ST_T(XH)
#define YT ST_T(YH)
#define DW_GLD(p) ST_LDV(XH, 16, p)              /* 16 inputs of X */
#define DW_PLD(p) (*(const float16_u*)(p))       /* 16 floats of the private segment */

/* Inputs b, b+1, .., b+15 of a row of W (b == -1 or b == W - 15: the padding lane is 0). */
inline float16 taps_s1(const __global XT* xr, int b, int W) {
    if (b < 0) {
        const float16 u = DW_GLD(xr);
        return (float16)(0.0f, u.s0123, u.s4567, u.s89ab, u.scde);
    }
    if (b + 16 > W) {
        const float16 u = DW_GLD(xr + W - 16);
        return (float16)(u.s123, u.s4567, u.s89ab, u.scdef, 0.0f);
    }
    return DW_GLD(xr + b);
}

/* Inputs b, b+2, .., b+30 (b == -1: the padding lane is 0). */
inline float16 taps_s2(const __global XT* xr, int b) {
    if (b < 0) {
        const float16 u0 = DW_GLD(xr);
        const float16 u1 = DW_GLD(xr + 16);
        const float16 od = (float16)(u0.odd, u1.odd);
        return (float16)(0.0f, od.s0123, od.s4567, od.s89ab, od.scde);
    }
    const float16 lo = DW_GLD(xr + b);
    const float16 hi = DW_GLD(xr + b + 16);
    return (float16)(lo.even, hi.even);
}

#ifndef DW_T
#define DW_T 16
#endif

/* The arguments of both kernels (the host passes the same list to either). */
#if HAS_BIAS
#define DW_BIAS_ARG __global const float* restrict bias,
#else
#define DW_BIAS_ARG
#endif
#if HAS_RES
#define DW_RES_ARG __global const YT* restrict Z,
#else
#define DW_RES_ARG
#endif
#define DW_PARAMS(NAME)                                                                        \
    __kernel void NAME(__global const XT* restrict X, __global const float* restrict Wt,        \
                       DW_BIAS_ARG DW_RES_ARG __global YT* restrict Y,                         \
                       int Cin, int H, int W, int Cout, int OH, int OW, int KH, int KW,        \
                       int sh, int sw, int ph, int pw, int dh, int dw, int mult,               \
                       float act_a, float act_b, float act_c)

DW_PARAMS(dwconv)
{
    const int ow0 = get_global_id(0) * DW_T;
    const int oh = get_global_id(1);
    const int z = get_global_id(2);
    if (ow0 >= OW || oh >= OH)
        return;
    const int img = z / Cout;
    const int oc = z - img * Cout;
    const int ci = oc / mult;
    const __global XT* x = X + (img * Cin + ci) * H * W;
    const __global float* w = Wt + oc * KH * KW;
    float acc[DW_T] __attribute__((aligned(64)));
#pragma unroll
    for (int j = 0; j < DW_T; ++j)
        acc[j] = 0.0f;
    const int ih0 = oh * sh - ph;
    const int iw0 = ow0 * sw - pw;
    /* Interior segments (every tap in bounds) take the branch-free path. */
    const bool inner = iw0 >= 0 && iw0 + (DW_T - 1) * sw + (KW - 1) * dw < W && ow0 + DW_T <= OW;
#if DW_T == 16
    /* A whole tile of 16 outputs as vector loads, when its taps reach at most one column past
     * the left of the row (pad 1) and, with stride 1, one past the right: stride 1, one 16-float
     * load per tap, a padding column shifted in as a zero lane; stride 2, 32 consecutive inputs
     * per tap keeping the even ones (a left pad: the odd ones after a zero lane). The scalar
     * path below loads element by element (the stride is a run-time value). */
    const int span = (KW - 1) * dw;
    if (ow0 + DW_T <= OW && iw0 >= -1
            && ((sw == 1 && W > DW_T && iw0 + span + DW_T <= W + 1) || (sw == 2 && iw0 + span + 2 * DW_T <= W))) {
        float16 accv = (float16)0.0f;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = ih0 + kh * dh;
            if (ih < 0 || ih >= H)
                continue;
            const __global XT* xr = x + ih * W;
            for (int kw = 0; kw < KW; ++kw) {
                const int b = iw0 + kw * dw;
                accv += (sw == 1 ? taps_s1(xr, b, W) : taps_s2(xr, b)) * w[kh * KW + kw];
            }
        }
        const int o = (z * OH + oh) * OW + ow0;
#if HAS_BIAS
        accv += bias[oc];
#endif
#if HAS_RES
        accv += ST_LDV(YH, 16, Z + o);
#endif
        ST_STV(YH, 16, Y + o, act_v16(accv, act_a, act_b, act_c));
        return;
    }
#endif
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = ih0 + kh * dh;
        if (ih < 0 || ih >= H)
            continue;
        const __global XT* xr = x + ih * W;
        for (int kw = 0; kw < KW; ++kw) {
            const float wv = w[kh * KW + kw];
            const int base = iw0 + kw * dw;
            if (inner) {
#pragma unroll
                for (int j = 0; j < DW_T; ++j)
                    acc[j] += ST_LD(XH, xr, base + j * sw) * wv;
            } else {
#pragma unroll
                for (int j = 0; j < DW_T; ++j) {
                    const int iw = base + j * sw;
                    if (iw >= 0 && iw < W)
                        acc[j] += ST_LD(XH, xr, iw) * wv;
                }
            }
        }
    }
    const int nj = min(DW_T, OW - ow0);
    const int o = (z * OH + oh) * OW + ow0;
#if DW_T == 16
    /* The epilogue on all 16 lanes as one vector (a Swish or Sigmoid then costs one vector exp,
     * not 16 scalar calls: rows narrower than 16, e.g. 14x14 layers, always come this way),
     * then the valid lanes stored. */
#if HAS_RES
    for (int j = 0; j < nj; ++j)
        acc[j] += ST_LD(YH, Z, o + j);
#endif
    float16 accv = *(const float16*)acc;
#if HAS_BIAS
    accv += bias[oc];
#endif
    *(float16*)acc = act_v16(accv, act_a, act_b, act_c);
    for (int j = 0; j < nj; ++j)
        ST_ST(YH, Y, o + j, acc[j]);
#else
    for (int j = 0; j < nj; ++j) {
        float v = acc[j];
#if HAS_BIAS
        v += bias[oc];
#endif
#if HAS_RES
        v += ST_LD(YH, Z, o + j);
#endif
        ST_ST(YH, Y, o + j, act_s(v, act_a, act_b, act_c));
    }
#endif
}

/* A KxK depthwise convolution (K = DW_K: 3, 5 or 7; dilation DW_D both ways; stride DW_S = 1 or 2
 * both ways; any padding), DW_RT output rows x 16 columns per work-item: each input row is loaded once as
 * its K tap vectors and serves every output row whose window covers it ((DW_RT - 1) * DW_S + K
 * input rows for DW_RT outputs, K*K loads per output vector in dwconv), the weights stay in
 * registers, and a tile at a row edge or in a row narrower than 16 (MobileNet's 14x14 and
 * 28x28 layers) reads its inputs through a zero-filled private segment instead of element by
 * element. gsize = (ceil(OW / 16), ceil(OH / DW_RT), images * Cout). Same arguments as dwconv. */
#ifdef DW_S
#ifndef DW_K
#define DW_K 3
#endif
#ifndef DW_D
#define DW_D 1
#endif
/* Input columns a 16-output tile loads: 16 + (K-1)*D at stride 1; at stride 2, 32 + (K-1)*D
 * (dilation 1: the taps in pairs from two 16-float loads, even and odd lanes); the private
 * segment rounded up to whole 16-float vectors (the host keeps it at most 64). */
#define DW_SEG ((DW_S == 1 ? 16 : 32) + (DW_K - 1) * DW_D)
#define DW_SEGV ((DW_SEG + 15) / 16)

/* The K tap vectors t[0 .. K) of an input row for 16 outputs: t[kw] lane j = r[kw*DW_D + DW_S*j]
 * (columns r[0 .. DW_SEG) read through LD: DW_GLD for X, DW_PLD for the private segment). */
#define DW_TAPS(r, LD, t) do {                                                            \
        if (DW_S == 1) {                                                                  \
            _Pragma("unroll") for (int kw_ = 0; kw_ < DW_K; ++kw_)                        \
                t[kw_] = LD((r) + kw_ * DW_D);                                            \
        } else if (DW_D > 1) {                                                            \
            _Pragma("unroll") for (int kw_ = 0; kw_ < DW_K; ++kw_) {                      \
                const float16 lo_ = LD((r) + kw_ * DW_D);                                 \
                const float16 hi_ = LD((r) + kw_ * DW_D + 16);                            \
                t[kw_] = (float16)(lo_.even, hi_.even);                                   \
            }                                                                             \
        } else {                                                                          \
            _Pragma("unroll") for (int kw_ = 0; kw_ < DW_K; kw_ += 2) {                   \
                const float16 lo_ = LD((r) + kw_);                                        \
                const float16 hi_ = LD((r) + kw_ + 16);                                   \
                t[kw_] = (float16)(lo_.even, hi_.even);                                   \
                if (kw_ + 1 < DW_K)                                                       \
                    t[kw_ + 1] = (float16)(lo_.odd, hi_.odd);                             \
            }                                                                             \
        }                                                                                 \
    } while (0)

#if DW_K == 3 && DW_D == 1
/* The same for a 3x3 tile whose first input column is -1 (a left padding of 1), from loads of
 * the row's columns 0 .. DW_SEG - 2: the padding shifted in as a zero lane. */
#define DW_TAPS_L1(r, t) do {                                                             \
        if (DW_S == 1) {                                                                  \
            const float16 u_ = DW_GLD(r);                                                 \
            t[0] = (float16)(0.0f, u_.s0123, u_.s4567, u_.s89ab, u_.scde);                \
            t[1] = u_;                                                                    \
            t[2] = DW_GLD((r) + 1);                                                       \
        } else {                                                                          \
            const float16 lo_ = DW_GLD(r), hi_ = DW_GLD((r) + 16);                        \
            const float8 ho_ = hi_.odd;                                                   \
            t[0] = (float16)(0.0f, lo_.odd, ho_.s0123, ho_.s456);                         \
            t[1] = (float16)(lo_.even, hi_.even);                                         \
            t[2] = (float16)(lo_.odd, hi_.odd);                                           \
        }                                                                                 \
    } while (0)
#endif

DW_PARAMS(dwconv_rows)
{
    const int ow0 = get_global_id(0) * 16;
    const int oh0 = get_global_id(1) * DW_RT;
    const int z = get_global_id(2);
    if (ow0 >= OW || oh0 >= OH)
        return;
    const int img = z / Cout;
    const int oc = z - img * Cout;
    const __global XT* x = X + (img * Cin + oc / mult) * H * W;
    float wk[DW_K * DW_K];
#pragma unroll
    for (int i = 0; i < DW_K * DW_K; ++i)
        wk[i] = Wt[oc * (DW_K * DW_K) + i];
    const int iw0 = ow0 * DW_S - pw;
    const int nj = min(16, OW - ow0);
    /* Vector loads straight from the row when every column a stored output reads is in it
     * (lanes past nj may read on into the next row: computed, never stored), or, 3x3 with a
     * left padding of 1, from column 0 with the zero shifted in; both only while the loads stay
     * inside X (checked per row). Else the tile's columns through the private segment. */
    const int last_col = DW_S * (nj - 1) + (DW_K - 1) * DW_D;  /* of the tile's stored outputs, from iw0 */
    const bool direct = iw0 >= 0 && iw0 + last_col < W;
    const bool left1 = DW_K == 3 && DW_D == 1 && iw0 == -1 && last_col - 1 < W;
    float16 acc[DW_RT];
#pragma unroll
    for (int r = 0; r < DW_RT; ++r)
        acc[r] = (float16)0.0f;
    /* Edge tiles: the in-row columns [lo, hi) of the segment are copied per input row, the
     * rest stays zero: 16-float chunks (the last one ending at hi); fewer than 16 columns as one
     * vector with the lanes past hi zeroed, when those 16 floats are inside X (its last row
     * element by element). */
    float seg[16 * DW_SEGV + 16] __attribute__((aligned(64)));  /* + 16: a vector stored at seg + lo */
#pragma unroll
    for (int v = 0; v <= DW_SEGV; ++v)
        *(float16*)(seg + 16 * v) = (float16)0.0f;
    const int lo = max(0, -iw0), hi = min(DW_SEG, W - iw0);
    const int x_end = (get_global_size(2) / Cout) * Cin * H * W - (int)(x - X);  /* floats of X from x on */
    const int x_beg = -(int)(x - X);  /* the first float of X, from x */
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* Edge tiles whose loads stay inside X: the taps loaded straight from the row (reaching into
     * the neighbouring rows' floats) and the lanes outside the row zeroed, tap kw's lane j being
     * column iw0 + kw*DW_D + DW_S*j. Faster than the private segment, whose 16-float store then
     * unaligned tap loads stall on store-to-load forwarding: a 5x5 layer on a 28x28 map (every
     * tile an edge tile), 240 channels, A/B under load on pocl: 275 -> 127 us. */
    int16 inrow[DW_K];
#pragma unroll
    for (int kw = 0; kw < DW_K; ++kw) {
        const int16 col = (int16)(iw0 + kw * DW_D) + (int16)DW_S * lane;
        inrow[kw] = col >= (int16)0 && col < (int16)W;
    }
#pragma unroll
    for (int i = 0; i < (DW_RT - 1) * DW_S + (DW_K - 1) * DW_D + 1; ++i) {
        const int ih = oh0 * DW_S - ph + i;
        if (ih < 0 || ih >= H)
            continue;
        const __global XT* xr = x + ih * W;
        float16 t[DW_K];
        if (direct && ih * W + iw0 + DW_SEG <= x_end) {
            DW_TAPS(xr + iw0, DW_GLD, t);
#if DW_K == 3 && DW_D == 1
        } else if (left1 && ih * W + DW_SEG - 1 <= x_end) {
            DW_TAPS_L1(xr, t);
#endif
        } else if (ih * W + iw0 >= x_beg && ih * W + iw0 + DW_SEG <= x_end) {
            DW_TAPS(xr + iw0, DW_GLD, t);
#pragma unroll
            for (int kw = 0; kw < DW_K; ++kw)
                t[kw] = select((float16)0.0f, t[kw], inrow[kw]);
        } else {
            const __global XT* src = xr + iw0;
            if (hi - lo >= 16) {
#pragma unroll 1
                for (int c = lo; c < hi; c += 16) {
                    const int c0 = min(c, hi - 16);
                    *(float16_u*)(seg + c0) = DW_GLD(src + c0);
                }
            } else if (ih * W + iw0 + lo + 16 <= x_end) {
                const float16 v = DW_GLD(src + lo);
                *(float16_u*)(seg + lo) = lane < (int16)(hi - lo) ? v : (float16)0.0f;
            } else {
#pragma unroll 1
                for (int c = lo; c < hi; ++c)
                    seg[c] = ST_LD(XH, src, c);
            }
            DW_TAPS(seg, DW_PLD, t);
        }
        /* Input row i is kernel row (i - r * DW_S) / DW_D of output row r (when it divides). */
#pragma unroll
        for (int r = 0; r < DW_RT; ++r) {
            const int dk = i - r * DW_S, kh = dk / DW_D;
            if (dk >= 0 && dk % DW_D == 0 && kh < DW_K) {
#pragma unroll
                for (int kw = 0; kw < DW_K; ++kw)
                    acc[r] += t[kw] * wk[kh * DW_K + kw];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < DW_RT; ++r) {
        if (oh0 + r >= OH)
            continue;
        const int o = (z * OH + oh0 + r) * OW + ow0;
        float16 v = acc[r];
#if HAS_BIAS
        v += bias[oc];
#endif
        if (nj == 16) {
#if HAS_RES
            v += ST_LDV(YH, 16, Z + o);
#endif
            ST_STV(YH, 16, Y + o, act_v16(v, act_a, act_b, act_c));
        } else {
#if HAS_RES
#pragma unroll 1
            for (int j = 0; j < nj; ++j)
                seg[j] = ST_LD(YH, Z, o + j);
            v += *(const float16*)seg;
#endif
            *(float16*)seg = act_v16(v, act_a, act_b, act_c);
#pragma unroll 1
            for (int j = 0; j < nj; ++j)
                ST_ST(YH, Y, o + j, seg[j]);
        }
    }
}
#endif
