/* Pooling over up to 3 spatial dims (1-D and 2-D are padded with unit dims).
 *   T               element type (float)
 *   POOL_MAX / POOL_AVG
 *   COUNT_INCLUDE_PAD   AveragePool divides by the window clipped to the padded extent
 *   WITH_INDICES    MaxPool also writes the flat (row-major, whole tensor) argmax as long
 * The window geometry comes as by-value arguments (uniform across work-items, so pocl keeps the
 * window loops scalar and vectorises across output columns); padded taps read a clamped, valid
 * address and are masked with a select, no branches.
 * gsize = (round_up(OW, lsize0), OH, N*C*OD): one output element per work-item.
 */
#ifndef T
#define T float
#endif

#define POOL_GEOM int ID, int IH, int IW, int OD, int OH, int OW, int KD, int KH, int KW, \
                  int SD, int SH, int SW, int PD, int PH, int PW, int ED, int EH, int EW,   \
                  int DD, int DH, int DW

__kernel void pool(__global const T* restrict x, __global T* restrict y,
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
    __global const T* xc = x + (long)nc * plane;
#ifdef POOL_MAX
    T best = -INFINITY;
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
                const T v = xc[off];
#ifdef POOL_MAX
#ifdef WITH_INDICES
                const bool take = inside && (v > best || arg < 0);
                arg = take ? off : arg;
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
    y[i] = best;
#ifdef WITH_INDICES
    ind[i] = arg < 0 ? 0 : (long)nc * plane + arg;
#endif
#else
    y[i] = cnt > 0 ? acc / (float)cnt : 0.0f;
#endif
}

/* 2-D MaxPool fast path (no dilation, no Indices, 15*SW + KW <= 48): one work-item per output row,
 * 16 outputs at a time. The KH input rows are max-reduced first with float16
 * loads over the 48 input columns the 16 windows span (columns outside the image are -inf),
 * then each output takes the max of its KW columns. gsize = (OH, N*C). */
typedef float16 float16_u __attribute__((aligned(4)));

__kernel void maxpool2d(__global const float* restrict x, __global float* restrict y,
                        int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW, int PH, int PW) {
    const int oh = get_global_id(0);
    const int z = get_global_id(1);
    if (oh >= OH)
        return;
    const int h0 = oh * SH - PH;
    const int nchunk = (15 * SW + KW + 15) / 16;
    __global const float* xc = x + (long)z * IH * IW;
    for (int ow0 = 0; ow0 < OW; ow0 += 16) {
    const int cw0 = ow0 * SW - PW;
    float16 v[3];
#pragma unroll
    for (int j = 0; j < 3; ++j)
        v[j] = (float16)(-INFINITY);
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh;
        if (ih < 0 || ih >= IH)
            continue;
        __global const float* row = xc + ih * IW;
#pragma unroll
        for (int j = 0; j < 3; ++j) {
            const int c = cw0 + 16 * j;
            float16 t;
            if (c >= 0 && c + 16 <= IW) {
                t = *(const __global float16_u*)(row + c);
            } else if (c == -1 && IW >= 16) {  /* the usual left pad of 1: shift one lane in */
                const float16 u = *(const __global float16_u*)row;
                t = (float16)(-INFINITY, u.s0123, u.s4567, u.s89ab, u.scde);
            } else if (c >= IW) {  /* wholly right of the image */
                t = (float16)(-INFINITY);
            } else {
                float tt[16] __attribute__((aligned(64)));
#pragma unroll
                for (int e = 0; e < 16; ++e) {
                    const int cc = c + e;
                    const float val = row[clamp(cc, 0, IW - 1)];
                    tt[e] = (cc >= 0 && cc < IW) ? val : -INFINITY;
                }
                t = *(const float16*)tt;
            }
            v[j] = t > v[j] ? t : v[j];
            if (j + 1 >= nchunk)
                break;
        }
    }
    float16 res;
    if (SW == 2 && KW == 3) {
        /* The ResNet/VGG-style 3x3 stride-2 window in vector shuffles: output c takes columns
         * 2c, 2c+1, 2c+2, i.e. max(even[c], odd[c], even[c+1]). */
        const float16 ev = (float16)(v[0].even, v[1].even);
        const float16 od = (float16)(v[0].odd, v[1].odd);
        const float16 e1 = (float16)(ev.s1234, ev.s5678, ev.s9abc, ev.sdef, v[2].s0);
        res = od > ev ? od : ev;
        res = e1 > res ? e1 : res;
    } else {
        const float* vm = (const float*)v;
        float o[16] __attribute__((aligned(64)));
#pragma unroll
        for (int c = 0; c < 16; ++c) {
            float m = -INFINITY;
            for (int kw = 0; kw < KW; ++kw) {
                const float t = vm[c * SW + kw];
                m = t > m ? t : m;
            }
            o[c] = m;
        }
        res = *(const float16*)o;
    }
    __global float* yr = y + ((long)z * OH + oh) * OW + ow0;
    if (ow0 + 16 <= OW) {
        *(__global float16_u*)yr = res;
    } else {
        const float* o = (const float*)&res;
        for (int c = 0; c < OW - ow0; ++c)
            yr[c] = o[c];
    }
    }
}

/* Global pooling: one work-item per (n, c) plane of `len` elements. */
__kernel void global_pool(__global const T* x, __global T* y, const int nc, const int len) {
    const int i = get_global_id(0);
    if (i >= nc) return;
    __global const T* xc = x + (long)i * len;
#ifdef POOL_MAX
    T best = -INFINITY;
    for (int k = 0; k < len; ++k) best = xc[k] > best ? xc[k] : best;
    y[i] = best;
#else
    float acc = 0.0f;
    for (int k = 0; k < len; ++k) acc += xc[k];
    y[i] = acc / (float)len;
#endif
}
