/* SwiGLU (opset 28): y = a * sigmoid(alpha * a) * b, elementwise over equal shapes.
 *   T     float type (float, or double with USE_FP64); HALF: float16 storage read and written
 *         with vload_half / vstore_half (core OpenCL, no cl_khr_fp16), computed in float and
 *         rounded to float16 after each step as onnx's float16 arithmetic does (its reference
 *         and onnxruntime both round per operation), so results agree to the last bit or so.
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif

#ifdef HALF
#define S ushort
#define C float
inline float rh(float v) {
    ushort h;
    vstore_half(v, 0, (__private half*)&h);
    return vload_half(0, (__private const half*)&h);
}
#define LOAD(p, i) vload_half((i), (__global const half*)(p))
#define STORE(v, p, i) vstore_half((v), (i), (__global half*)(p))
#else
#define S T
#define C T
#define rh(v) (v)
#define LOAD(p, i) (p)[i]
#define STORE(v, p, i) ((p)[i] = (v))
#endif

__kernel void swiglu(__global const S* a, __global const S* b, __global S* y, const int n, const float alpha) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const C x = LOAD(a, i);
    const C e = rh(exp(rh(rh((C)-alpha) * x)));
    const C s = rh((C)1 / rh((C)1 + e));
    STORE(rh(rh(x * s) * LOAD(b, i)), y, i);
}
