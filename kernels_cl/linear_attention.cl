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
 * OpenCL 1.2, no extension; accumulation in float (the reference's float32 state). */
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

__kernel void linear_attention(__global const float* restrict q, __global const float* restrict k,
                               __global const float* restrict v, __global const float* restrict past,
                               __global const float* restrict decay, __global const float* restrict beta,
                               __global float* restrict out, __global float* restrict present, const int T,
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
        s[d] = past[sbase + (long)d * DV];
#else
        s[d] = 0.0f;
#endif
    for (int t = 0; t < T; ++t) {
        const long tok = (long)b * T + t;
        const __global float* kt = k + (tok * HKV + h) * DK;
#if GATED
#if DECAY_PER_KEY
        const __global float* gt = decay + (tok * HKV + h) * DK;
#pragma unroll
        for (int d = 0; d < DK; ++d)
            s[d] *= exp(gt[d]);
#else
        const float gexp = exp(decay[tok * HKV + h]);
#pragma unroll
        for (int d = 0; d < DK; ++d)
            s[d] *= gexp;
#endif
#endif
        float vt = v[(tok * HKV + h) * DV + m];
#if DELTA
        float retrieved = 0.0f;
#pragma unroll
        for (int d = 0; d < DK; ++d)
            retrieved = mad(s[d], kt[d], retrieved);
        vt = (BETA_SHARED ? beta[tok] : beta[tok * HKV + h]) * (vt - retrieved);
#endif
#pragma unroll
        for (int d = 0; d < DK; ++d)
            s[d] = mad(kt[d], vt, s[d]);
        for (int i = 0; i < group; ++i) {
            const int qh = h * group + i;
            const __global float* qt = q + (tok * HQ + qh) * DK;
            float o = 0.0f;
#pragma unroll
            for (int d = 0; d < DK; ++d)
                o = mad(qt[d], s[d], o);
            out[(tok * HQ + qh) * DV + m] = scale * o;
        }
    }
#if HAS_PRESENT
#pragma unroll
    for (int d = 0; d < DK; ++d)
        present[sbase + (long)d * DV] = s[d];
#endif
}
