/* The operations of a fused elementwise expression (clglow.FusedElementwise's EXPR, a GEMV's
 * epilogue expression): macros over float and float16 (fused_flat evaluates 16 elements at once:
 * one vector exp instead of 16 scalar calls); RELU and ERF through overloads. */
#ifndef CLG_FE_OPS_H
#define CLG_FE_OPS_H
#include "erf.h"
#include "vmath.h"

DEFINE_ERF(clg_erf16, float16)
inline float __attribute__((overloadable)) fe_relu(const float x) { return x < 0.0f ? 0.0f : x; }
inline float16 __attribute__((overloadable)) fe_relu(const float16 x) { return x < 0.0f ? (float16)0.0f : x; }
inline float __attribute__((overloadable)) fe_erf(const float x) { return clg_erf(x); }
inline float16 __attribute__((overloadable)) fe_erf(const float16 x) { return clg_erf16(x); }

#define RELU(x) fe_relu(x)  /* NaN passes through */
#define SIGMOID(x) (1.0f / (1.0f + clg_exp(-(x))))
#define TANH(x) clg_tanh(x)
#define EXP(x) clg_exp(x)
#define LOG(x) clg_log(x)
#define ABS(x) clg_fabs(x)
#define NEG(x) (-(x))
#define SQRT(x) clg_sqrt(x)
#define RECIP(x) (1.0f / (x))
#define ERF(x) fe_erf(x)
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))
#define SQUARE(x) ((x) * (x))
#define CUBE(x) ((x) * (x) * (x))
/* Typed operations (fused_bcast with T0..T3, TY: int64 / int32 / bool / float values; a bool
 * is 0 or 1, any comparison's int result included). Casts as ONNX's: to bool is `!= 0` (NaN is
 * true), float to integer truncates toward zero, integer to integer wraps. */
#define CAST_F(x) ((float)(x))
#define CAST_L(x) ((long)(x))
#define CAST_I(x) ((int)(x))
#define CAST_B(x) ((x) != 0)
#define EQ(a, b) ((a) == (b))
#define LT(a, b) ((a) < (b))
#define GT(a, b) ((a) > (b))
#define NOT(x) (!(x))
#define AND(a, b) ((a) && (b))
#define OR(a, b) ((a) || (b))
#define WHERE(c, a, b) ((c) ? (a) : (b))
/* integer constants by value (decimal): int64 and int32 */
#define LITL(v) ((long)(v))
#define LITI(v) ((int)(v))
/* a float32 constant by its bit pattern (8 hex digits): exact, and valid in a -D define */
#define LIT(h) as_float(0x##h##u)
#endif
