/* Casts involving the narrow types (float8 variants, float8e8m0, float4e2m1, int4/uint4, int2/uint2,
 * bfloat16) by lookup tables built on the host with onnx.reference's own conversion, and BitCast.
 *   TO   storage type of the output element (uchar / ushort / uint)
 *   MASK float32 -> int4/uint4/int2/uint2: truncate, keep the low bits (numpy/ml_dtypes wrap)
 */
#ifndef TO
#define TO uchar
#endif

__kernel void lut8(__global const uchar* x, __global const TO* t, __global TO* y, const int n) {
    const int i = get_global_id(0);
    if (i < n) y[i] = t[x[i]];
}

__kernel void lut16(__global const ushort* x, __global const TO* t, __global TO* y, const int n) {
    const int i = get_global_id(0);
    if (i < n) y[i] = t[x[i]];
}

/* float32 source: the table holds, per top 16 bits, the result for the exact value (entry k)
 * and for a value strictly between it and the next one (entry 65536 + k): enough for round to
 * nearest even into formats with at most 7 mantissa bits. */
__kernel void lut32(__global const uint* x, __global const TO* t, __global TO* y, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const uint b = x[i];
    y[i] = t[(b >> 16) + ((b & 0xffffu) ? 65536u : 0u)];
}

#ifdef MASK
/* float32 -> int4/uint4/int2/uint2 (one value per byte, the low bits): rounded to nearest even
 * (rnd) or truncated; a result outside [lo, hi] (or NaN) wrapped (oor 0), clamped, NaN as 0
 * (oor 1), or 0 (oor 2): whichever the installed onnx.reference does (lower/castlut.py probes
 * it: numpy with ml_dtypes 0.7 gives 0, earlier versions wrapped). */
__kernel void f32_to_lowint(__global const float* x, __global uchar* y, const int n, const int rnd, const int oor,
                            const float lo, const float hi) {
    const int i = get_global_id(0);
    if (i >= n) return;
    float v = x[i];
    v = rnd ? rint(v) : trunc(v);
    if (oor == 1)
        v = v != v ? 0.0f : v < lo ? lo : v > hi ? hi : v;
    else if (oor == 2 && !(v >= lo && v <= hi))
        v = 0.0f;
    y[i] = (uchar)(((long)v) & MASK);
}
#endif

/* float32 -> bfloat16, round to nearest even (NaN stays a quiet NaN). */
__kernel void f32_to_bf16(__global const uint* x, __global ushort* y, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const uint b = x[i];
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        y[i] = (ushort)((b >> 16) | 0x40u);
        return;
    }
    y[i] = (ushort)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
