/* The recurrent part of ONNX RNN, GRU and LSTM: every time step of a sequence in one launch.
 *
 * The input projections X_t @ W^T of all steps are one GEMM before this kernel (gemm.cl), read
 * here as xw: row (t, b) holds N = num_directions * G * hidden floats, gate g of direction d at
 * column (d * G + g) * hidden + j. This kernel adds the biases and h_{t-1} @ R^T, applies the
 * gates and carries the state: one work-group per (BB batch rows, direction), each work-item
 * over VU consecutive hidden units as one vector (units j0 .. j0 + VU - 1), the state h (and c)
 * in local memory with a barrier between steps. The batch rows and the directions of a sequence
 * are independent, so no launch per step is needed (each would cost more than a small step).
 *
 * Defines (they change the code):
 *   CELL   1 RNN, 3 GRU, 4 LSTM (= G, the gates: LSTM i o f c, GRU z r h, RNN one)
 *   HP     capacity of the local state rows (>= hidden rounded up to VU)
 *   BB     batch rows per work-group (they share each load of R)
 *   VU     units per work-item, one float vector (1, 4, 8 or 16): the CPU family's vector
 *          width (its driver runs a group's work-items one after another), 1 on GPUs (a unit per
 *          work-item: consecutive work-items read consecutive units of R^T, coalesced)
 *   R_T    1: R^T packed per direction as [hidden][G][HPU] (HPU = hidden rounded up to VU, zero
 *          padded: whole-vector loads; consecutive work-items on consecutive units); 2: as
 *          [HPU / VU][hidden][G][VU], each work-item's units one contiguous run (streamed by one
 *          thread: the CPU family); 0: R as the node has it, [G * hidden][hidden] (a live R)
 *   KS     multiply-add chains per gate in the k loop of R_T 1 / 2 (1, 2 or 4: k mod KS)
 *   LBR    GRU linear_before_reset; INPUT_FORGET (LSTM: f = 1 - i); CLIP (clip the gates'
 *          pre-activations to [-clip, clip])
 *   ACT_F0 ACT_G0 ACT_H0 (direction 0) and ACT_F1 ACT_G1 ACT_H1 (direction 1): activation codes
 *          (see act below), their alpha/beta run-time arguments
 * flags (run time): 1 bias, 2 sequence_lens, 4 initial_h, 8 initial_c, 16 peepholes, 32 Y,
 *   64 Y_h, 128 Y_c, 256 direction "reverse" (direction 0 runs backwards)
 * Steps past a row's sequence length leave its state alone and write zeros to Y; Y_h / Y_c are
 * its last valid step (zeros for a length of 0, as onnxruntime).
 *
 * Every loop over work-items' blocks runs the same trip count in each work-item, the tail
 * guarded inside (for (u = 0; u < n; u += ls) { blk = u + lid; ... }): pocl 3.1 ran the body of
 * the usual for (j = lid; j < n; j += ls) for ids past n too (out-of-bounds stores). Global
 * memory is read and written through loadv/storev, which touch only the valid units of a
 * partial last vector. */
#include "vmath.h"
#pragma OPENCL FP_CONTRACT ON

#ifndef BB
#define BB 1
#endif
#ifndef VU
#define VU 1
#endif
#ifndef R_T
#define R_T 1
#endif
#ifndef KS
#define KS 1
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
#ifndef ACT_F0
#define ACT_F0 2
#endif
#ifndef ACT_G0
#define ACT_G0 1
#endif
#ifndef ACT_H0
#define ACT_H0 1
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
#define G CELL

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VU == 1
typedef float floatv;
#define VLOAD(p) (*(p))
#define VSTORE(v, p) (*(p) = (v))
#else
typedef CAT(float, VU) floatv;
#define VLOAD(p) CAT(vload, VU)(0, p)
#define VSTORE(v, p) CAT(vstore, VU)(v, 0, p)
#endif

/* VU floats from p, of which the first n (>= 1) are valid: zeros past them, nothing read there */
inline floatv loadv(const __global float* p, const int n) {
#if VU == 1
    return *p;
#else
    if (n >= VU) return VLOAD(p);
    float t[VU];
    for (int i = 0; i < VU; ++i) t[i] = i < n ? p[i] : 0.0f;
    return VLOAD(t);
#endif
}

inline void storev(__global float* p, const int n, const floatv v) {
#if VU == 1
    *p = v;
#else
    if (n >= VU) {
        VSTORE(v, p);
        return;
    }
    float t[VU];
    VSTORE(v, t);
    for (int i = 0; i < n; ++i) p[i] = t[i];
#endif
}

/* 0 Relu, 1 Tanh, 2 Sigmoid, 3 Affine, 4 LeakyRelu, 5 ThresholdedRelu, 6 ScaledTanh,
 * 7 HardSigmoid, 8 Elu, 9 Softsign, 10 Softplus (code is a define at every call: folded) */
inline floatv act(const int code, const floatv x, const float a, const float b) {
    const floatv zero = (floatv)0.0f, one = (floatv)1.0f;
    switch (code) {
    case 0: return fmax(x, zero);
    case 1: return clg_tanh(x);
    case 2: return one / (one + clg_exp(-x));
    case 3: return a * x + b;
    case 4: return select(x, a * x, x < zero);
    case 5: return select(zero, x, x > (floatv)a);
    case 6: return a * clg_tanh(b * x);
    case 7: return fmin(fmax(a * x + b, zero), one);
    case 8: return select(x, a * (clg_exp(x) - one), x < zero);
    case 9: return x / (one + clg_fabs(x));
    default: return fmax(x, zero) + clg_log(one + clg_exp(-clg_fabs(x)));
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
#define CLAMP(x) clamp((x), (floatv)-clip, (floatv)clip)
#else
#define CLAMP(x) (x)
#endif

/* acc[gi * BB + bb] += rk[gi * gstep ..] * hv[bb * HP + k], gi < ng: one k of gate_dots. Every
 * loop has a bound that is a constant once inlined (ng is a literal at each call) and unrolls, so
 * that the accumulators are registers (a loop left rolled kept them in memory: a load and a store
 * per multiply-add); loads of R are vector-pointer reads (pocl does not inline vloadN). */
inline __attribute__((always_inline)) void r_dots(const __global float* rk, const int gstep,
                                                  const __local float* hv, const int k, const int ng,
                                                  floatv* acc) {
    float h[BB];
#pragma unroll
    for (int bb = 0; bb < BB; ++bb) h[bb] = hv[bb * HP + k];
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
        if (gi < ng) {
            const floatv w = *(const __global floatv*)(rk + gi * gstep);
#pragma unroll
            for (int bb = 0; bb < BB; ++bb) acc[gi * BB + bb] += w * h[bb];
        }
    }
}

/* acc[gi * BB + bb] = sum_k hv[bb * HP + k] * R[d][(g0 + gi) * hidden + j0 + i][k], i < VU, for ng
 * gates (ng a constant at each call: the loops unroll, the accumulators stay in registers) */
inline __attribute__((always_inline)) void gate_dots(const __global float* rw, const __local float* hv,
                                                     const int d, const int j0, const int nv, const int hidden,
                                                     const int hpu, const int g0, const int ng, floatv* acc) {
#if R_T
#if R_T == 2
    /* this work-item's units as one contiguous run: [hidden][G][VU] */
    const __global float* rt = rw + (size_t)d * hidden * G * hpu + (size_t)j0 * hidden * G + g0 * VU;
#define R_KSTEP (G * VU)
#define R_GSTEP VU
#else
    const __global float* rt = rw + (size_t)d * hidden * G * hpu + g0 * hpu + j0;
#define R_KSTEP (G * hpu)
#define R_GSTEP hpu
#endif
    /* k mod KS into KS sets of accumulators (KS 1, 2 or 4): KS multiply-add chains per gate in
     * flight; loop bounds are defines (G * BB, KS), so every loop unrolls whatever ng is */
    floatv accs[KS][G * BB];
#pragma unroll
    for (int c = 0; c < KS; ++c)
#pragma unroll
        for (int i = 0; i < G * BB; ++i) accs[c][i] = (floatv)0.0f;
    int k = 0;
    for (; k + KS - 1 < hidden; k += KS) {
        r_dots(rt + (size_t)k * R_KSTEP, R_GSTEP, hv, k, ng, accs[0]);
#if KS > 1
        r_dots(rt + (size_t)(k + 1) * R_KSTEP, R_GSTEP, hv, k + 1, ng, accs[1]);
#endif
#if KS > 2
        r_dots(rt + (size_t)(k + 2) * R_KSTEP, R_GSTEP, hv, k + 2, ng, accs[2]);
        r_dots(rt + (size_t)(k + 3) * R_KSTEP, R_GSTEP, hv, k + 3, ng, accs[3]);
#endif
    }
    for (; k < hidden; ++k) r_dots(rt + (size_t)k * R_KSTEP, R_GSTEP, hv, k, ng, accs[0]);
#pragma unroll
    for (int i = 0; i < G * BB; ++i) {
        floatv t = accs[0][i];
#pragma unroll
        for (int c = 1; c < KS; ++c) t += accs[c][i];
        if (i < ng * BB) acc[i] = t;
    }
#else
    for (int i = 0; i < ng * BB; ++i) acc[i] = (floatv)0.0f;
    const __global float* rr = rw + ((size_t)(d * G + g0) * hidden + j0) * hidden;
    for (int k = 0; k < hidden; ++k) {
        for (int gi = 0; gi < ng; ++gi) {
            float t[VU];
            for (int i = 0; i < VU; ++i) t[i] = i < nv ? rr[((size_t)gi * hidden + i) * hidden + k] : 0.0f;
#if VU == 1
            const floatv w = t[0];
#else
            const floatv w = VLOAD(t);
#endif
            for (int bb = 0; bb < BB; ++bb) acc[gi * BB + bb] += w * hv[bb * HP + k];
        }
    }
#endif
}

/* The bias of gate g (Wb + Rb; only Wb when `w_only`) for units j0.. of direction d, zero without one */
#define BIAS(g) ((flags & 1) ? loadv(wb + (g) * hidden + j0, nv) + loadv(wb + gh + (g) * hidden + j0, nv) : (floatv)0.0f)
#define BIAS_W(g) ((flags & 1) ? loadv(wb + (g) * hidden + j0, nv) : (floatv)0.0f)
#define BIAS_R(g) ((flags & 1) ? loadv(wb + gh + (g) * hidden + j0, nv) : (floatv)0.0f)

__kernel void recurrent(
    __global const float* restrict xw, const int xw_st, const int xw_sb,
    __global const float* restrict rw, __global const float* restrict bias,
    __global const int* restrict lens, __global const float* restrict h0,
    __global const float* restrict c0, const int s_sd, const int s_sb,
    __global const float* restrict peep,
    __global float* y, const int y_st, const int y_sd, const int y_sb,
    __global float* yh, __global float* yc,
    const int flags, const int seq, const int batch, const int hidden, const int hpu, const float clip,
    const float af0, const float bf0, const float ag0, const float bg0, const float ah0, const float bh0,
    const float af1, const float bf1, const float ag1, const float bg1, const float ah1, const float bh1) {
    const int lid = get_local_id(0), ls = get_local_size(0);
    const int b0 = get_group_id(1) * BB, d = get_group_id(2);
    if (b0 >= batch) return;
    const int rev = (flags & 256) ? 1 : d;
    const float af = d ? af1 : af0, bf = d ? bf1 : bf0, ag = d ? ag1 : ag0, bg = d ? bg1 : bg0;
    const float ah = d ? ah1 : ah0, bh = d ? bh1 : bh0;
    const int nblk = (hidden + VU - 1) / VU, gh = G * hidden;
    const __global float* wb = bias + d * 2 * gh; /* Wb, then Rb */
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
    for (int u = 0; u < nblk; u += ls) {
        const int blk = u + lid, j0 = blk * VU, nv = min(VU, hidden - j0);
        if (blk >= nblk) break;
        for (int bb = 0; bb < BB; ++bb) {
            const int b = min(b0 + bb, batch - 1), so = d * s_sd + b * s_sb + j0;
            VSTORE((flags & 4) ? loadv(h0 + so, nv) : (floatv)0.0f, &hl[0][bb * HP + j0]);
#if CELL == 4
            VSTORE((flags & 8) ? loadv(c0 + so, nv) : (floatv)0.0f, &cl[bb * HP + j0]);
#endif
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int cur = 0;
    for (int s = 0; s < maxlen; ++s) {
#if CELL == 3 && !LBR
        /* GRU, reset before the linear map: z and r first, r * h for every unit, then h~ */
        for (int u = 0; u < nblk; u += ls) {
            const int blk = u + lid, j0 = blk * VU, nv = min(VU, hidden - j0);
            if (blk >= nblk) break;
            floatv acc[2 * BB];
            gate_dots(rw, hl[cur], d, j0, nv, hidden, hpu, 0, 2, acc);
            for (int bb = 0; bb < BB; ++bb) {
                if (s >= len[bb]) continue;
                const int b = b0 + bb, t = rev ? len[bb] - 1 - s : s;
                const __global float* xr = xw + (size_t)t * xw_st + (size_t)b * xw_sb + d * gh + j0;
                const floatv z = ACT_F(CLAMP(loadv(xr, nv) + acc[bb] + BIAS(0)));
                const floatv r = ACT_F(CLAMP(loadv(xr + hidden, nv) + acc[BB + bb] + BIAS(1)));
                VSTORE(z, &zl[bb * HP + j0]);
                VSTORE(r * VLOAD(&hl[cur][bb * HP + j0]), &rl[bb * HP + j0]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        for (int u = 0; u < nblk; u += ls) {
            const int blk = u + lid, j0 = blk * VU, nv = min(VU, hidden - j0);
            if (blk >= nblk) break;
#if CELL == 3 && !LBR
            floatv acc[BB];
            gate_dots(rw, rl, d, j0, nv, hidden, hpu, 2, 1, acc);
#else
            floatv acc[G * BB];
            gate_dots(rw, hl[cur], d, j0, nv, hidden, hpu, 0, G, acc);
#endif
            for (int bb = 0; bb < BB; ++bb) {
                const floatv hp = VLOAD(&hl[cur][bb * HP + j0]);
                floatv hn = hp;
                if (s < len[bb]) {
                    const int b = b0 + bb, t = rev ? len[bb] - 1 - s : s;
                    const __global float* xr = xw + (size_t)t * xw_st + (size_t)b * xw_sb + d * gh + j0;
#if CELL == 1
                    hn = ACT_F(CLAMP(loadv(xr, nv) + acc[bb] + BIAS(0)));
#elif CELL == 3
#if LBR
                    const floatv z = ACT_F(CLAMP(loadv(xr, nv) + acc[bb] + BIAS(0)));
                    const floatv r = ACT_F(CLAMP(loadv(xr + hidden, nv) + acc[BB + bb] + BIAS(1)));
                    const floatv hc = ACT_G(CLAMP(loadv(xr + 2 * hidden, nv) + BIAS_W(2) +
                                                  r * (acc[2 * BB + bb] + BIAS_R(2))));
#else
                    const floatv z = VLOAD(&zl[bb * HP + j0]);
                    const floatv hc = ACT_G(CLAMP(loadv(xr + 2 * hidden, nv) + acc[bb] + BIAS(2)));
#endif
                    hn = ((floatv)1.0f - z) * hc + z * hp;
#else /* LSTM: gates i o f c */
                    const floatv cp = VLOAD(&cl[bb * HP + j0]);
                    const __global float* pp = peep + d * 3 * hidden + j0;
                    floatv gi = loadv(xr, nv) + acc[bb] + BIAS(0);
                    if (flags & 16) gi += loadv(pp, nv) * cp;
                    gi = ACT_F(CLAMP(gi));
#if INPUT_FORGET
                    const floatv gf = (floatv)1.0f - gi;
#else
                    floatv gf = loadv(xr + 2 * hidden, nv) + acc[2 * BB + bb] + BIAS(2);
                    if (flags & 16) gf += loadv(pp + 2 * hidden, nv) * cp;
                    gf = ACT_F(CLAMP(gf));
#endif
                    const floatv cn = gf * cp + gi * ACT_G(CLAMP(loadv(xr + 3 * hidden, nv) + acc[3 * BB + bb] + BIAS(3)));
                    floatv go = loadv(xr + hidden, nv) + acc[BB + bb] + BIAS(1);
                    if (flags & 16) go += loadv(pp + hidden, nv) * cn;
                    hn = ACT_F(CLAMP(go)) * ACT_H(cn);
                    VSTORE(cn, &cl[bb * HP + j0]);
#endif
                    if (flags & 32) storev(y + (size_t)t * y_st + d * y_sd + (size_t)b * y_sb + j0, nv, hn);
                }
                VSTORE(hn, &hl[cur ^ 1][bb * HP + j0]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }
    for (int u = 0; u < nblk; u += ls) {
        const int blk = u + lid, j0 = blk * VU, nv = min(VU, hidden - j0);
        if (blk >= nblk) break;
        for (int bb = 0; bb < BB; ++bb) {
            const int b = b0 + bb;
            if (b >= batch) break;
            const int so = d * s_sd + b * s_sb + j0;
            if (flags & 64) storev(yh + so, nv, len[bb] ? VLOAD(&hl[cur][bb * HP + j0]) : (floatv)0.0f);
#if CELL == 4
            if (flags & 128) storev(yc + so, nv, len[bb] ? VLOAD(&cl[bb * HP + j0]) : (floatv)0.0f);
#endif
            if (flags & 32)
                for (int t = len[bb]; t < seq; ++t)
                    storev(y + (size_t)t * y_st + d * y_sd + (size_t)b * y_sb + j0, nv, (floatv)0.0f);
        }
    }
}
