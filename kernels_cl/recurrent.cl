/* The recurrent part of ONNX RNN, GRU and LSTM: every time step of a sequence in one launch.
 *
 * The input projections X_t @ W^T of all steps are one GEMM before this kernel (gemm.cl), read
 * here as xw: row (t, b) holds N = num_directions * G * hidden floats, gate g of direction d at
 * column (d * G + g) * hidden + j. This kernel adds the biases and h_{t-1} @ R^T, applies the
 * gates and carries the state: one work-group per (BB batch rows, direction), its work-items
 * over the hidden units (unit j = lid, lid + ls, ...), the state h (and c) in local memory with
 * a barrier between steps. The batch rows and the directions of a sequence are independent, so
 * no launch per step is needed (fewer launches: each costs more than a small step's GEMV).
 *
 * Defines (they change the code):
 *   CELL   1 RNN, 3 GRU, 4 LSTM (= G, the gates: LSTM i o f c, GRU z r h, RNN one)
 *   HP     capacity of the local state rows (>= hidden, a multiple of VK)
 *   BB     batch rows per work-group (they share each load of R)
 *   R_T    0: R rows [d][G * hidden][kp] (a work-item's dot products walk k in VK-float vectors:
 *          a CPU driver's work-item loop); 1: R^T [d][hidden][G * hidden] (consecutive
 *          work-items read consecutive units: a GPU's coalesced loads)
 *   VK     the k vector width of R_T = 0 (1, 4, 8 or 16); kp = hidden rounded up to it
 *   LBR    GRU linear_before_reset; INPUT_FORGET (LSTM: f = 1 - i); CLIP (clip the gates'
 *          pre-activations to [-clip, clip])
 *   ACT_F0 ACT_G0 ACT_H0 (direction 0) and ACT_F1 ACT_G1 ACT_H1 (direction 1): activation codes
 *          (see act below), their alpha/beta run-time arguments
 * flags (run time): 1 bias, 2 sequence_lens, 4 initial_h, 8 initial_c, 16 peepholes, 32 Y,
 *   64 Y_h, 128 Y_c, 256 direction "reverse" (direction 0 runs backwards)
 * Steps past a row's sequence length leave its state alone and write zeros to Y; Y_h / Y_c are
 * its last valid step (zeros for a length of 0, as onnxruntime).
 *
 * The unit loops run the same trip count in every work-item, the tail guarded inside
 * (for (u = 0; u < n; u += ls) { j = u + lid; ... }): pocl 3.1 ran the body of the usual
 * for (j = lid; j < n; j += ls) for ids past n too (hidden 16 in a 32-item group wrote
 * Y_h[16..31]: out of bounds). */
#include "vmath.h"

#ifndef BB
#define BB 1
#endif
#ifndef VK
#define VK 1
#endif
#ifndef R_T
#define R_T 0
#endif
#ifndef LBR
#define LBR 0
#endif
#ifndef INPUT_FORGET
#define INPUT_FORGET 0
#endif
#ifndef CLIP
#define CLIP 0
#endif
#ifndef ACT_F1
#define ACT_F1 ACT_F0
#endif
#ifndef ACT_G1
#define ACT_G1 ACT_G0
#endif
#ifndef ACT_H1
#define ACT_H1 ACT_H0
#endif
#ifndef ACT_G0
#define ACT_G0 1
#endif
#ifndef ACT_H0
#define ACT_H0 1
#endif
#define G CELL

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VK == 1
typedef float floatv;
#define VLOAD(p) (*(p))
#define HSUM(v) (v)
#else
typedef CAT(float, VK) floatv;
#define VLOAD(p) CAT(vload, VK)(0, p)
#if VK == 4
#define HSUM(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3)
#elif VK == 8
#define HSUM(v) (((v).s0 + (v).s4) + ((v).s1 + (v).s5) + ((v).s2 + (v).s6) + ((v).s3 + (v).s7))
#else
#define HSUM(v) hsum16(v)
inline float hsum16(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    return (b.s0 + b.s2) + (b.s1 + b.s3);
}
#endif
#endif

/* 0 Relu, 1 Tanh, 2 Sigmoid, 3 Affine, 4 LeakyRelu, 5 ThresholdedRelu, 6 ScaledTanh,
 * 7 HardSigmoid, 8 Elu, 9 Softsign, 10 Softplus (code is a define at every call: folded) */
inline float act(const int code, const float x, const float a, const float b) {
    switch (code) {
    case 0: return fmax(x, 0.0f);
    case 1: return clg_tanh(x);
    case 2: return 1.0f / (1.0f + clg_exp(-x));
    case 3: return a * x + b;
    case 4: return x < 0.0f ? a * x : x;
    case 5: return x > a ? x : 0.0f;
    case 6: return a * clg_tanh(b * x);
    case 7: return fmin(fmax(a * x + b, 0.0f), 1.0f);
    case 8: return x < 0.0f ? a * (clg_exp(x) - 1.0f) : x;
    case 9: return x / (1.0f + fabs(x));
    default: return x > 0.0f ? x + clg_log(1.0f + clg_exp(-x)) : clg_log(1.0f + clg_exp(x));
    }
}

#if ACT_F0 == ACT_F1
#define ACT_F(x) act(ACT_F0, (x), af, bf)
#else
#define ACT_F(x) (d ? act(ACT_F1, (x), af, bf) : act(ACT_F0, (x), af, bf))
#endif
#if ACT_G0 == ACT_G1
#define ACT_G(x) act(ACT_G0, (x), ag, bg)
#else
#define ACT_G(x) (d ? act(ACT_G1, (x), ag, bg) : act(ACT_G0, (x), ag, bg))
#endif
#if ACT_H0 == ACT_H1
#define ACT_H(x) act(ACT_H0, (x), ah, bh)
#else
#define ACT_H(x) (d ? act(ACT_H1, (x), ah, bh) : act(ACT_H0, (x), ah, bh))
#endif
#if CLIP
#define CLAMP(x) clamp((x), -clip, clip)
#else
#define CLAMP(x) (x)
#endif

/* acc[gi * BB + bb] = sum_k hv[bb * HP + k] * R[d][(g0 + gi) * hidden + j][k] for ng gates */
inline void gate_dots(const __global float* restrict rw, const __local float* hv, const int d,
                      const int j, const int hidden, const int kp, const int g0, const int ng,
                      float* acc) {
#if R_T
    for (int i = 0; i < ng * BB; ++i) acc[i] = 0.0f;
    const __global float* rt = rw + (size_t)d * hidden * (G * hidden) + g0 * hidden + j;
    for (int k = 0; k < hidden; ++k) {
        const __global float* rk = rt + (size_t)k * (G * hidden);
        for (int gi = 0; gi < ng; ++gi) {
            const float w = rk[gi * hidden];
            for (int bb = 0; bb < BB; ++bb) acc[gi * BB + bb] = mad(w, hv[bb * HP + k], acc[gi * BB + bb]);
        }
    }
#else
    floatv a[4 * BB];
    for (int i = 0; i < ng * BB; ++i) a[i] = (floatv)0.0f;
    const __global float* rr = rw + ((size_t)(d * G + g0) * hidden + j) * kp;
    for (int k = 0; k < kp; k += VK) {
        floatv h[BB];
        for (int bb = 0; bb < BB; ++bb) h[bb] = VLOAD(hv + bb * HP + k);
        for (int gi = 0; gi < ng; ++gi) {
            const floatv w = VLOAD(rr + (size_t)gi * hidden * kp + k);
            for (int bb = 0; bb < BB; ++bb) a[gi * BB + bb] = mad(w, h[bb], a[gi * BB + bb]);
        }
    }
    for (int i = 0; i < ng * BB; ++i) acc[i] = HSUM(a[i]);
#endif
}

__kernel void recurrent(
    __global const float* restrict xw, const int xw_st, const int xw_sb,
    __global const float* restrict rw, __global const float* restrict bias,
    __global const int* restrict lens, __global const float* restrict h0,
    __global const float* restrict c0, const int s_sd, const int s_sb,
    __global const float* restrict peep,
    __global float* y, const int y_st, const int y_sd, const int y_sb,
    __global float* yh, __global float* yc,
    const int flags, const int seq, const int batch, const int hidden, const int kp, const float clip,
    const float af0, const float bf0, const float ag0, const float bg0, const float ah0, const float bh0,
    const float af1, const float bf1, const float ag1, const float bg1, const float ah1, const float bh1) {
    const int lid = get_local_id(0), ls = get_local_size(0);
    const int b0 = get_group_id(1) * BB, d = get_group_id(2);
    if (b0 >= batch) return;
    const int rev = (flags & 256) ? 1 : d;
    const float af = d ? af1 : af0, bf = d ? bf1 : bf0, ag = d ? ag1 : ag0, bg = d ? bg1 : bg0;
    const float ah = d ? ah1 : ah0, bh = d ? bh1 : bh0;
    __local float hl[2][BB * HP];
#if CELL == 4
    __local float cl[BB * HP];
#endif
#if CELL == 3 && !LBR
    __local float rl[BB * HP];
    __local float zl[BB * HP];
#endif
    int len[BB];
    int maxlen = 0;
    for (int bb = 0; bb < BB; ++bb) {
        const int b = b0 + bb;
        len[bb] = b >= batch ? 0 : (flags & 2) ? clamp(lens[b], 0, seq) : seq;
        maxlen = max(maxlen, len[bb]);
    }
    for (int u = 0; u < HP; u += ls) {
        const int j = u + lid;
        if (j >= HP) break;
        for (int bb = 0; bb < BB; ++bb) {
            const int b = b0 + bb, s = d * s_sd + b * s_sb + j;
            const int live = j < hidden && b < batch;
            hl[0][bb * HP + j] = live && (flags & 4) ? h0[s] : 0.0f;
            hl[1][bb * HP + j] = 0.0f;
#if CELL == 4
            cl[bb * HP + j] = live && (flags & 8) ? c0[s] : 0.0f;
#endif
#if CELL == 3 && !LBR
            rl[bb * HP + j] = 0.0f;
#endif
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int gh = G * hidden;
    const __global float* wb = bias + d * 2 * gh;  /* Wb, then Rb */
    int cur = 0;
    for (int s = 0; s < maxlen; ++s) {
#if CELL == 3 && !LBR
        /* GRU, reset before the linear map: z and r first, r * h for every unit, then h~ */
        for (int u = 0; u < hidden; u += ls) {
            const int j = u + lid;
            if (j >= hidden) break;
            float acc[2 * BB];
            gate_dots(rw, hl[cur], d, j, hidden, kp, 0, 2, acc);
            for (int bb = 0; bb < BB; ++bb) {
                if (s >= len[bb]) continue;
                const int b = b0 + bb, t = rev ? len[bb] - 1 - s : s;
                const __global float* xr = xw + (size_t)t * xw_st + (size_t)b * xw_sb + d * gh;
                float z = xr[j] + acc[bb], r = xr[hidden + j] + acc[BB + bb];
                if (flags & 1) {
                    z += wb[j] + wb[gh + j];
                    r += wb[hidden + j] + wb[gh + hidden + j];
                }
                zl[bb * HP + j] = ACT_F(CLAMP(z));
                rl[bb * HP + j] = ACT_F(CLAMP(r)) * hl[cur][bb * HP + j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        for (int u = 0; u < hidden; u += ls) {
            const int j = u + lid;
            if (j >= hidden) break;
#if CELL == 3 && !LBR
            float acc[BB];
            gate_dots(rw, rl, d, j, hidden, kp, 2, 1, acc);
#else
            float acc[G * BB];
            gate_dots(rw, hl[cur], d, j, hidden, kp, 0, G, acc);
#endif
            for (int bb = 0; bb < BB; ++bb) {
                const float hp = hl[cur][bb * HP + j];
                float hn = hp;
                if (s < len[bb]) {
                    const int b = b0 + bb, t = rev ? len[bb] - 1 - s : s;
                    const __global float* xr = xw + (size_t)t * xw_st + (size_t)b * xw_sb + d * gh;
#if CELL == 1
                    float v = xr[j] + acc[bb];
                    if (flags & 1) v += wb[j] + wb[gh + j];
                    hn = ACT_F(CLAMP(v));
#elif CELL == 3
                    const int hj = 2 * hidden + j;
                    const float bw = (flags & 1) ? wb[hj] : 0.0f, br = (flags & 1) ? wb[gh + hj] : 0.0f;
#if LBR
                    float z = xr[j] + acc[bb], r = xr[hidden + j] + acc[BB + bb];
                    if (flags & 1) {
                        z += wb[j] + wb[gh + j];
                        r += wb[hidden + j] + wb[gh + hidden + j];
                    }
                    z = ACT_F(CLAMP(z));
                    r = ACT_F(CLAMP(r));
                    const float hc = ACT_G(CLAMP(xr[hj] + bw + r * (acc[2 * BB + bb] + br)));
#else
                    const float z = zl[bb * HP + j];
                    const float hc = ACT_G(CLAMP(xr[hj] + acc[bb] + bw + br));
#endif
                    hn = (1.0f - z) * hc + z * hp;
#else  /* LSTM: gates i o f c */
                    float gi = xr[j] + acc[bb], go = xr[hidden + j] + acc[BB + bb];
                    float gf = xr[2 * hidden + j] + acc[2 * BB + bb], gc = xr[3 * hidden + j] + acc[3 * BB + bb];
                    if (flags & 1) {
                        gi += wb[j] + wb[gh + j];
                        go += wb[hidden + j] + wb[gh + hidden + j];
                        gf += wb[2 * hidden + j] + wb[gh + 2 * hidden + j];
                        gc += wb[3 * hidden + j] + wb[gh + 3 * hidden + j];
                    }
                    const float cp = cl[bb * HP + j];
                    const __global float* pp = peep + d * 3 * hidden;
                    if (flags & 16) gi += pp[j] * cp;
                    gi = ACT_F(CLAMP(gi));
#if INPUT_FORGET
                    gf = 1.0f - gi;
#else
                    if (flags & 16) gf += pp[2 * hidden + j] * cp;
                    gf = ACT_F(CLAMP(gf));
#endif
                    const float cn = gf * cp + gi * ACT_G(CLAMP(gc));
                    if (flags & 16) go += pp[hidden + j] * cn;
                    hn = ACT_F(CLAMP(go)) * ACT_H(cn);
                    cl[bb * HP + j] = cn;
#endif
                    if (flags & 32) y[(size_t)t * y_st + d * y_sd + (size_t)b * y_sb + j] = hn;
                }
                hl[cur ^ 1][bb * HP + j] = hn;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }
    for (int u = 0; u < hidden; u += ls) {
        const int j = u + lid;
        if (j >= hidden) break;
        for (int bb = 0; bb < BB; ++bb) {
            const int b = b0 + bb;
            if (b < batch) {
                const int so = d * s_sd + b * s_sb + j;
                if (flags & 64) yh[so] = len[bb] ? hl[cur][bb * HP + j] : 0.0f;
#if CELL == 4
                if (flags & 128) yc[so] = len[bb] ? cl[bb * HP + j] : 0.0f;
#endif
                if (flags & 32)
                    for (int t = len[bb]; t < seq; ++t) y[(size_t)t * y_st + d * y_sd + (size_t)b * y_sb + j] = 0.0f;
            }
        }
    }
}
