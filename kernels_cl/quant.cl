/* QuantizeLinear / DequantizeLinear over integer types, one work-item per element.
 *   TX input type, TY output type, TS scale type (float or double), HAS_ZP zero point given (type of the
 *   quantized side).  Scale/zero-point index by `mode`: 0 per tensor, 1 per axis (1-D of length L),
 *   2 blocked (same rank as x, axis dim ceil(L / blk)); x is seen as (outer, L, inner).
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef TS
#define TS float
#endif

inline long qindex(const int i, const int mode, const int L, const int inner, const int blk, const int SL) {
    if (mode == 0) return 0;
    const int r = i % inner;
    const int t = i / inner;
    const int c = t % L;
    if (mode == 1) return c;
    const int o = t / L;
    return ((long)o * SL + c / blk) * inner + r;
}

__kernel void quantize(__global const TX* x, __global const TS* scale,
#ifdef HAS_ZP
                       __global const TY* zp,
#endif
                       __global TY* y, const int n, const int mode, const int L, const int inner, const int blk,
                       const int SL, const TS qmin, const TS qmax) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const long k = qindex(i, mode, L, inner, blk, SL);
    TS v = rint((TS)x[i] / scale[k]);
#ifdef HAS_ZP
    v += (TS)zp[k];
#endif
    y[i] = (TY)clamp(v, qmin, qmax);
}

__kernel void dequantize(__global const TX* x, __global const TS* scale,
#ifdef HAS_ZP
                         __global const TX* zp,
#endif
                         __global TY* y, const int n, const int mode, const int L, const int inner, const int blk,
                         const int SL) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const long k = qindex(i, mode, L, inner, blk, SL);
#ifdef HAS_ZP
    y[i] = (TY)(((TS)x[i] - (TS)zp[k]) * scale[k]);
#else
    y[i] = (TY)((TS)x[i] * scale[k]);
#endif
}

/* DynamicQuantizeLinear's parameters (one work-item): scale = (max(0, max x) - min(0, min x)) / 255,
 * zero point = rint(clamp(-min / scale, 0, 255)). */
__kernel void dyn_qparams(__global const float* x, __global float* scale, __global uchar* zp, const int n) {
    if (get_global_id(0) != 0) return;
    float mx = 0.0f, mn = 0.0f;
    for (int i = 0; i < n; ++i) {
        mx = fmax(mx, x[i]);
        mn = fmin(mn, x[i]);
    }
    const float s = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    scale[0] = s;
    zp[0] = (uchar)rint(clamp(0.0f - mn / s, 0.0f, 255.0f));
}

/* Per-tensor with constant scale and zero point (the common case: every QDQ model's activations):
 * the parameters as scalar arguments, not buffers read per element (pocl reloads those per
 * work-item: 10.6 -> 1 ms for 800K floats). Round half to even and saturate with
 * convert_int_sat_rte, then clamp so that adding the zero point cannot leave the type's range
 * (some drivers keep rint() scalar; the conversion builtin vectorises). */
__kernel void quantize_scalar(__global const TX* restrict x, __global TY* restrict y, const int n,
                              const TS scale, const int zp, const int qmin, const int qmax) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int r = convert_int_sat_rte((TS)x[i] / scale);
    y[i] = (TY)(clamp(r, qmin - zp, qmax - zp) + zp);
}

__kernel void dequantize_scalar(__global const TX* restrict x, __global TY* restrict y, const int n,
                                const TS scale, const TS zp) {
    const int i = get_global_id(0);
    if (i >= n) return;
    y[i] = (TY)(((TS)x[i] - zp) * scale);
}
