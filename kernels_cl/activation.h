/* Fused activations shared by the GEMM and depthwise-convolution epilogues.
 *
 * ACT (a define) picks the code; ACT = 0, the default, is a piecewise-linear activation whose
 * parameters (a, b, c) are run-time arguments, so identity, Relu, LeakyRelu and Clip share one
 * compiled kernel (fewer programs for the driver to generate: a cold start cost):
 *     v = v < 0 ? v * a : v;   v = v < b ? b : v;   v = v > c ? c : v
 *   identity (1, -inf, inf), Relu (1, 0, inf), LeakyRelu(alpha) (alpha, -inf, inf),
 *   Clip(lo, hi) (1, lo, hi). Every comparison is false for NaN, so NaN passes through.
 * ACT = 4 Sigmoid, 5 HardSigmoid(alpha = a, beta = b), 6 Tanh, 7 Gelu (exact: erf, see erf.h),
 * 8 Swish (v * sigmoid(a v): SiLU with a = 1, CLIP's quick-GELU with a = 1.702), 9 HardSwish (v * HardSigmoid(v) with a = 1/6, b = 1/2).
 *
 * DEFINE_ACT(name, T) defines `T name(T v, float a, float b, float c)` for a scalar or vector T.
 */
#include "vmath.h"

#ifndef ACT
#define ACT 0
#endif

#if ACT == 0
#define DEFINE_ACT(NAME, T)                                       \
    inline T NAME(T v, float a, float b, float c) {              \
        v = v < (T)0.0f ? v * a : v;                              \
        v = v < (T)b ? (T)b : v;                                  \
        return v > (T)c ? (T)c : v;                               \
    }
#elif ACT == 4
#define DEFINE_ACT(NAME, T)                                       \
    inline T NAME(T v, float a, float b, float c) {              \
        return (T)1.0f / ((T)1.0f + clg_exp(-v));                 \
    }
#elif ACT == 5
#define DEFINE_ACT(NAME, T)                                       \
    inline T NAME(T v, float a, float b, float c) {              \
        v = v * a + b;                                            \
        v = v < (T)0.0f ? (T)0.0f : v;                            \
        return v > (T)1.0f ? (T)1.0f : v;                         \
    }
#elif ACT == 6
#define DEFINE_ACT(NAME, T)                                       \
    inline T NAME(T v, float a, float b, float c) {              \
        return clg_tanh(v);                                       \
    }
#elif ACT == 7
#include "erf.h"
#define DEFINE_ACT(NAME, T)                                                      \
    DEFINE_ERF(NAME##_erf, T)                                                    \
    inline T NAME(T v, float a, float b, float c) {                              \
        return (T)0.5f * v * ((T)1.0f + NAME##_erf(v * (T)0.70710678118654752f)); \
    }
#elif ACT == 8
#define DEFINE_ACT(NAME, T)                                       \
    inline T NAME(T v, float a, float b, float c) {              \
        return v / ((T)1.0f + clg_exp(v * -a));                   \
    }
#elif ACT == 9
#define DEFINE_ACT(NAME, T)                                       \
    inline T NAME(T v, float a, float b, float c) {              \
        T h = v * a + b;                                          \
        h = h < (T)0.0f ? (T)0.0f : h;                            \
        return v * (h > (T)1.0f ? (T)1.0f : h);                   \
    }
#else
#error "ACT must be 0 (piecewise linear) or 4 to 9"
#endif
