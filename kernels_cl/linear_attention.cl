/* LinearAttention (opset 27: Gated DeltaNet / RetNet / Mamba-2-style recurrent attention;
 * lower/linear_attention.py). Per (image b, KV head h) a state S [DK, d_v] runs over the T tokens:
 *   GATED:  S <- exp(g_t) * S        (g_t per head, or per key row with DECAY_PER_KEY)
 *   DELTA:  v_t <- beta_t * (v_t - S^T k_t)
 *           S <- S + k_t (x) v_t
 *   o_t(q head) = scale * q_t^T S    for the q heads of the group (GQA: q head i reads KV head
 *                                    i / (Hq / Hkv))
 * One work-item per (column m of S, KV head, image): it keeps its column S[:, m] in registers
 * (DK floats: the key size is a compile-time define) and walks the tokens in order, so the
 * recurrence needs no barrier. gsize = (d_v rounded up, Hkv, B). Inputs are the op's packed
 * [B, T, H * D] tensors; past / present state [B, Hkv, DK, d_v].
 *   DK                 key size (d_k)
 *   GATED, DELTA       the update rule (linear: neither; gated; delta; gated_delta: both)
 *   DECAY_PER_KEY      decay [B, T, Hkv * DK] (else [B, T, Hkv])
 *   BETA_SHARED        beta [B, T, 1] (else [B, T, Hkv])
 *   HAS_PAST, HAS_PRESENT
 * Storage (storage.h): TH = 1 reads q, k, v, decay, beta and writes the output as half (a float16
 * model's T, or precision="fp16"), PH / SH the past / present state; the state is float in
 * registers either way.
 * OpenCL 1.2, no extension; accumulation in float (the reference's float32 state). */
#include "storage.h"
#ifndef TH
#define TH 0
#endif
#ifndef PH
#define PH 0
#endif
#ifndef SH
#define SH 0
#endif
#ifndef DK
#error "DK (key size) must be defined"
#endif
#ifndef GATED
#define GATED 0
#endif
#ifndef DELTA
#define DELTA 0
#endif
#ifndef DECAY_PER_KEY
#define DECAY_PER_KEY 0
#endif
#ifndef BETA_SHARED
#define BETA_SHARED 0
#endif
#ifndef HAS_PAST
#define HAS_PAST 0
#endif
#ifndef HAS_PRESENT
#define HAS_PRESENT 0
#endif

__kernel void linear_attention(__global const ST_T(TH)* restrict q, __global const ST_T(TH)* restrict k,
                               __global const ST_T(TH)* restrict v, __global const ST_T(PH)* restrict past,
                               __global const ST_T(TH)* restrict decay, __global const ST_T(TH)* restrict beta,
                               __global ST_T(TH)* restrict out, __global ST_T(SH)* restrict present, const int T,
                               const int HQ, const int HKV, const int DV, const float scale)
{
    const int m = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    if (m >= DV)
        return;
    const int group = HQ / HKV;
    const long sbase = ((long)b * HKV + h) * DK * DV + m; /* S[d][m] at sbase + d * DV */
    float s[DK];
#pragma unroll
    for (int d = 0; d < DK; ++d)
#if HAS_PAST
        s[d] = ST_LD(PH, past, sbase + (long)d * DV);
#else
        s[d] = 0.0f;
#endif
    for (int t = 0; t < T; ++t) {
        const long tok = (long)b * T + t;
        const __global ST_T(TH)* kt = k + (tok * HKV + h) * DK;
#if GATED
#if DECAY_PER_KEY
        const __global ST_T(TH)* gt = decay + (tok * HKV + h) * DK;
#pragma unroll
        for (int d = 0; d < DK; ++d)
            s[d] *= exp(ST_LD(TH, gt, d));
#else
        const float gexp = exp(ST_LD(TH, decay, tok * HKV + h));
#pragma unroll
        for (int d = 0; d < DK; ++d)
            s[d] *= gexp;
#endif
#endif
        float vt = ST_LD(TH, v, (tok * HKV + h) * DV + m);
#if DELTA
        float retrieved = 0.0f;
#pragma unroll
        for (int d = 0; d < DK; ++d)
            retrieved = mad(s[d], ST_LD(TH, kt, d), retrieved);
        vt = ST_LD(TH, beta, BETA_SHARED ? tok : tok * HKV + h) * (vt - retrieved);
#endif
#pragma unroll
        for (int d = 0; d < DK; ++d)
            s[d] = mad(ST_LD(TH, kt, d), vt, s[d]);
        for (int i = 0; i < group; ++i) {
            const int qh = h * group + i;
            const __global ST_T(TH)* qt = q + (tok * HQ + qh) * DK;
            float o = 0.0f;
#pragma unroll
            for (int d = 0; d < DK; ++d)
                o = mad(ST_LD(TH, qt, d), s[d], o);
            ST_ST(TH, out, (tok * HQ + qh) * DV + m, scale * o);
        }
    }
#if HAS_PRESENT
#pragma unroll
    for (int d = 0; d < DK; ++d)
        ST_ST(SH, present, sbase + (long)d * DV, s[d]);
#endif
}
