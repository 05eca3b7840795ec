/* Matrix-vector product with a packed constant matrix and a fused epilogue (one row of a GEMM):
 *
 *   y[n] = ACT(alpha * sum_k x[k] * W[k][n] + bias[n] + z[n])
 *
 * A decode step's projections and vocabulary head are GEMVs: every weight is used once per
 * run, so the kernel is bound by how fast it streams W, not by its multiply-adds. gemm.cl's
 * register tiles pad the single row to MR rows and walk K once per column tile with MR
 * broadcasts per step; here W is packed at plan time in panels of VW columns,
 * W[(p*K + k)*VW + c] (zero padded; gemm_kernel.pack_b with NR = VW), and work-item p reads
 * its panel front to back as one contiguous stream of VW-float vectors, KU independent
 * accumulators deep (a chain of dependent adds would wait on each add's latency). With PP > 1 a
 * work-item reads PP adjacent panels in lockstep (PP streams; each x element loaded, and with
 * LN_PRO normalised, once for all of them); a panel past the last is read as the last one and not
 * stored (the packed matrix holds whole panels only). VW, KU, PP and the work-group size are the
 * tunable family "gemv" (lower/gemv.py).
 *
 * flags: 1 = bias (beta * bias[n * bias_sn], bias_sn 0 or 1), 2 = residual z (y's shape). x, bias and z are read in place
 * at any alignment; y may be z (a residual updated in place: each output read, then written,
 * by one work-item).
 * LN_PRO: x is first normalised as LayerNormalization over its k elements does (norm.cl's
 * arithmetic), ln_scale and ln_bias of k elements (passes/fuse_norm_matmul.py), once per
 * work-group into local memory (LN_KMAX floats, at least k): the first work-item takes the
 * statistics, all of them the normalised elements. Each work-item normalising x inside its
 * own k loop cost as much as the launch it saved (3 loads and 2 FMAs per k next to one vector
 * load, for each of the 500 panels of a vocabulary head).
 * EPI_EXPR: a FusedElementwise expression of X0 (the output above; fe_ops.h's macros) applied
 * before the store: GPT-2's tanh GELU after its c_fc projection.
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef VW
#define VW 16
#endif
#ifndef KU
#define KU 4
#endif
#ifndef PP
#define PP 1
#endif

#include "floatv.h"

/* fe_ops.h (and erf.h through it) unconditionally, before activation.h: runtime/sources.py splices
 * each header once, where it is first named, even inside an #if that is off */
#include "fe_ops.h"
#include "lanes.h"
#include "activation.h"
DEFINE_ACT(act_s, float)

#define FLAG_BIAS 1
#define FLAG_RES 2

__kernel void gemv(const __global float* restrict x, const int x_off,
                   const __global floatv* restrict w,
                   __global float* y, const int y_off,
                   const __global float* restrict bias, const int bias_off, const int bias_sn,
                   const float beta,
                   const __global float* z, const int z_off,
                   const int n, const int k, const float alpha, const int flags,
                   const float act_a, const float act_b, const float act_c
#ifdef LN_PRO
                   , const __global float* restrict ln_scale, const __global float* restrict ln_bias,
                   const float ln_eps
#endif
                   ) {
    if (n <= 0)
        return;  /* the no-op launch (dummy buffers): the whole group returns, before any read */
    const int p0 = get_global_id(0) * PP;
    const __global float* xp = x + x_off;
#ifdef LN_PRO
    __local float xn[LN_KMAX];
    __local float ln_stats[2];
    const int lid = get_local_id(0), lsz = get_local_size(0);
    if (lid == 0) {
        const float m = lanes_sum(xp, k) / (float)k;
        ln_stats[0] = m;
        ln_stats[1] = 1.0f / sqrt(lanes_sqdev(xp, k, m) / (float)k + ln_eps);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    {
        const float m = ln_stats[0], inv = ln_stats[1];
        for (int i = lid; i < k; i += lsz)
            xn[i] = (xp[i] - m) * inv * ln_scale[i] + ln_bias[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#define XK(i) xn[i]
#else
#define XK(i) xp[i]
#endif
    if (p0 * VW >= n)
        return;  /* after the prologue's barriers, which every work-item of the group reaches */
    const int last = (n + VW - 1) / VW - 1;
    const __global floatv* wp[PP];
#pragma unroll
    for (int j = 0; j < PP; ++j)
        wp[j] = w + (long)min(p0 + j, last) * k;
    floatv acc[PP][KU];
#pragma unroll
    for (int j = 0; j < PP; ++j)
        for (int u = 0; u < KU; ++u)
            acc[j][u] = (floatv)0.0f;
    int kk = 0;
    for (; kk + KU <= k; kk += KU) {
#pragma unroll
        for (int u = 0; u < KU; ++u) {
            const float xv = XK(kk + u);
#pragma unroll
            for (int j = 0; j < PP; ++j)
                acc[j][u] += xv * wp[j][kk + u];
        }
    }
    for (; kk < k; ++kk) {
        const float xv = XK(kk);
#pragma unroll
        for (int j = 0; j < PP; ++j)
            acc[j][0] += xv * wp[j][kk];
    }
#pragma unroll
    for (int j = 0; j < PP; ++j) {
        for (int u = 1; u < KU; ++u)
            acc[j][0] += acc[j][u];
        const float* s = (const float*)&acc[j][0];
        const int c0 = (p0 + j) * VW;
        const int nc = min(VW, n - c0);
        for (int c = 0; c < nc; ++c) {
            float v = alpha * s[c];
            if (flags & FLAG_BIAS)
                v += beta * bias[bias_off + (c0 + c) * bias_sn];
            if (flags & FLAG_RES)
                v += z[z_off + c0 + c];
#ifdef EPI_EXPR
            const float X0 = act_s(v, act_a, act_b, act_c);
            y[y_off + c0 + c] = EPI_EXPR;
#else
            y[y_off + c0 + c] = act_s(v, act_a, act_b, act_c);
#endif
        }
    }
}
