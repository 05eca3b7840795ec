/* Elementwise kernels: unary, binary and ternary ops with numpy broadcasting.
 *
 * Specialised with -D defines (code-changing things only):
 *   T0, T1, T2   storage types of inputs 0..2 (bool is uchar)
 *   TO           storage type of the output
 *   OP_<NAME>    which operation (exactly one)
 *   RANK         rank of the (collapsed) broadcast index space, for the *_bcast kernels
 *   IS_INT       inputs are integers (guards division by zero, no NaN handling)
 *   H0, H1, H2, HO  1: that operand is stored as half (storage.h; its T is then float, the type
 *                the values are computed in), 0 (default): stored as its T
 * Shapes and strides are run-time arguments: `meta` holds dims[RANK] then one
 * stride row per input (0 where the input is broadcast), all int32.
 * Plain a*b+c is used rather than fma()/mad(), and no vloadN/vstoreN, because
 * pocl does not inline those builtins.
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T0
#define T0 float
#endif
#ifndef T1
#define T1 T0
#endif
#ifndef T2
#define T2 T0
#endif
#ifndef TO
#define TO T0
#endif
#ifndef RANK
#define RANK 1
#endif
#ifndef H0
#define H0 0
#endif
#ifndef H1
#define H1 0
#endif
#ifndef H2
#define H2 0
#endif
#ifndef HO
#define HO 0
#endif

#include "storage.h"
/* Global element types: T<k> itself, or half storage of its float values. */
#define S0T ST_CAT(S0T_, H0)
#define S0T_0 T0
#define S0T_1 half
#define S1T ST_CAT(S1T_, H1)
#define S1T_0 T1
#define S1T_1 half
#define S2T ST_CAT(S2T_, H2)
#define S2T_0 T2
#define S2T_1 half
#define SOT ST_CAT(SOT_, HO)
#define SOT_0 TO
#define SOT_1 half

#include "bcast_index.h"
#include "erf.h"
#ifdef USE_FP64
#define ERF(x) erf(x)
#else
#define ERF(x) clg_erf(x)
#endif

/* ---- unary: y = UN(x) with float params alpha, beta ----------------------------------------- */
#if defined(OP_RELU)
#define UN(x) ((x) < (T0)0 ? (T0)0 : (x))  /* NaN passes through, as in numpy */
#elif defined(OP_SIGMOID)
#define UN(x) (1.0f / (1.0f + exp(-(x))))
#elif defined(OP_TANH)
#define UN(x) tanh(x)
#elif defined(OP_LEAKYRELU)
#define UN(x) ((x) >= 0.0f ? (x) : (x) * alpha)
#elif defined(OP_EXP)
#define UN(x) exp(x)
#elif defined(OP_LOG)
#define UN(x) log(x)
#elif defined(OP_SQRT)
#define UN(x) sqrt(x)
#elif defined(OP_NEG)
#define UN(x) (-(x))
#elif defined(OP_ABS)
#define UN(x) ((x) < (T0)0 ? -(x) : (x))
#elif defined(OP_RECIPROCAL)
#define UN(x) (1.0f / (x))
#elif defined(OP_ERF)
#define UN(x) ERF(x)
#elif defined(OP_FLOOR)
#define UN(x) floor(x)
#elif defined(OP_CEIL)
#define UN(x) ceil(x)
#elif defined(OP_ROUND)
#define UN(x) rint(x)
#elif defined(OP_SIN)
#define UN(x) sin(x)
#elif defined(OP_COS)
#define UN(x) cos(x)
#elif defined(OP_SIGN)
#define UN(x) ((x) > (T0)0 ? (T0)1 : ((x) < (T0)0 ? (T0)-1 : (T0)0))
#elif defined(OP_ELU)
#define UN(x) ((x) >= 0.0f ? (x) : alpha * (exp(x) - 1.0f))
#elif defined(OP_SELU)
#define UN(x) ((x) > 0.0f ? beta * (x) : beta * (alpha * exp(x) - alpha))
#elif defined(OP_HARDSIGMOID)
#define UN(x) clamp(alpha * (x) + beta, 0.0f, 1.0f)
#elif defined(OP_HARDSWISH)
#define UN(x) ((x) * clamp((x) * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f))
#elif defined(OP_SOFTPLUS)
#define UN(x) ((x) > 20.0f ? (x) : log1p(exp(x)))
#elif defined(OP_SOFTSIGN)
#define UN(x) ((x) / (1.0f + fabs(x)))
#elif defined(OP_TAN)
#define UN(x) tan(x)
#elif defined(OP_ASIN)
#define UN(x) asin(x)
#elif defined(OP_ACOS)
#define UN(x) acos(x)
#elif defined(OP_ATAN)
#define UN(x) atan(x)
#elif defined(OP_SINH)
#define UN(x) sinh(x)
#elif defined(OP_COSH)
#define UN(x) cosh(x)
#elif defined(OP_ASINH)
#define UN(x) asinh(x)
#elif defined(OP_ACOSH)
#define UN(x) acosh(x)
#elif defined(OP_ATANH)
#define UN(x) atanh(x)
#elif defined(OP_GELU)
#define UN(x) (0.5f * (x) * (1.0f + ERF((x) * 0.7071067811865476f)))
#elif defined(OP_GELU_TANH)
#define UN(x) (0.5f * (x) * (1.0f + tanh(0.7978845608028654f * ((x) + 0.044715f * (x) * (x) * (x)))))
#elif defined(OP_MISH)
#define UN(x) ((x) * tanh((x) > 20.0f ? (x) : log1p(exp(x))))
#elif defined(OP_CELU)
#define UN(x) (max((T0)0, (x)) + min((T0)0, (T0)(alpha * (exp((x) / alpha) - 1.0f))))
#elif defined(OP_THRESHRELU)
#define UN(x) ((x) > alpha ? (x) : (T0)0)
#elif defined(OP_SHRINK)
#define UN(x) ((x) < -beta ? (T0)((x) + alpha) : ((x) > beta ? (T0)((x) - alpha) : (T0)0))
#elif defined(OP_SWISH)
#define UN(x) ((x) / (1.0f + exp(-alpha * (x))))
#elif defined(OP_ISNAN)
#define UN(x) ((x) != (x))
#elif defined(OP_ISINF)
#define UN(x) (isinf(x) && (((x) > 0 && ihi) || ((x) < 0 && ilo)))
#elif defined(OP_BITNOT)
#define UN(x) (~(x))
#elif defined(OP_NOT)
#define UN(x) ((x) == (T0)0)
#elif defined(OP_CLIP)
/* alpha/beta carry the bounds for float; lo/hi ints for integer types */
#ifdef IS_INT
/* max first, then min: with lo > hi every element becomes hi (numpy.clip, onnx.reference) */
#define CLIPLH(x, lo, hi) (((x) < (lo) ? (lo) : (x)) > (hi) ? (hi) : ((x) < (lo) ? (lo) : (x)))
#define UN(x) CLIPLH(x, (T0)ilo, (T0)ihi)
#else
#define CLIPLH(x, lo, hi) (((x) < (lo) ? (lo) : (x)) > (hi) ? (hi) : ((x) < (lo) ? (lo) : (x)))
#define UN(x) CLIPLH(x, (T0)alpha, (T0)beta)
#endif
#elif defined(OP_SCALE)
#define UN(x) ((x) * alpha)
#elif defined(OP_CAST_BOOL)
#define UN(x) ((x) != (T0)0)
#else /* OP_COPY, OP_CAST: conversion by the store */
#define UN(x) (x)
#endif

/* ---- binary: c = BIN(a, b) -------------------------------------------------------------------- */
#ifdef IS_INT
#define DIV(a, b) ((b) == (T1)0 ? (T0)0 : ((b) == (T1)-1 ? -(a) : (a) / (b)))
#define ISNAN(a) 0
#else
#define DIV(a, b) ((a) / (b))
#define ISNAN(a) ((a) != (a))
#endif
#if defined(OP_MOD) || defined(OP_FMOD)
inline T0 mod_op(T0 a, T1 b) {
#ifdef IS_INT
    if (b == (T1)0) return (T0)0;
    T0 r = (T0)(a % b);
#else
    T0 r = fmod(a, (T0)b);
#endif
#ifdef OP_MOD
    if (r != (T0)0 && ((r < (T0)0) != (b < (T1)0))) r += b;
#endif
    return r;
}
#endif
#if defined(OP_ADD)
#define BIN(a, b) ((a) + (b))
#elif defined(OP_MOD) || defined(OP_FMOD)
#define BIN(a, b) mod_op(a, b)
#elif defined(OP_SHL)
#define BIN(a, b) (((b) < (T1)0 || (b) >= (T1)(8 * sizeof(T0))) ? (T0)0 : (T0)(((ulong)(a)) << (b)))
#elif defined(OP_SHR)
#define BIN(a, b) (((b) < (T1)0 || (b) >= (T1)(8 * sizeof(T0))) ? ((a) < (T0)0 ? (T0)-1 : (T0)0) : (T0)((a) >> (b)))
#elif defined(OP_BITAND)
#define BIN(a, b) ((a) & (b))
#elif defined(OP_BITOR)
#define BIN(a, b) ((a) | (b))
#elif defined(OP_BITXOR)
#define BIN(a, b) ((a) ^ (b))
#elif defined(OP_SUB)
#define BIN(a, b) ((a) - (b))
#elif defined(OP_MUL)
#define BIN(a, b) ((a) * (b))
#elif defined(OP_DIV)
#define BIN(a, b) DIV(a, b)
#elif defined(OP_POW)
#ifdef USE_FP64
#define BIN(a, b) pow((double)(a), (double)(b))
#else
#define BIN(a, b) pow((float)(a), (float)(b))
#endif
#elif defined(OP_MAX)
#define BIN(a, b) (((a) > (b) || ISNAN(a)) ? (a) : (b))
#elif defined(OP_MIN)
#define BIN(a, b) (((a) < (b) || ISNAN(a)) ? (a) : (b))
#elif defined(OP_EQUAL)
#define BIN(a, b) ((a) == (b))
#elif defined(OP_LESS)
#define BIN(a, b) ((a) < (b))
#elif defined(OP_GREATER)
#define BIN(a, b) ((a) > (b))
#elif defined(OP_LESSOREQUAL)
#define BIN(a, b) ((a) <= (b))
#elif defined(OP_GREATEROREQUAL)
#define BIN(a, b) ((a) >= (b))
#elif defined(OP_AND)
#define BIN(a, b) ((a) && (b))
#elif defined(OP_OR)
#define BIN(a, b) ((a) || (b))
#elif defined(OP_XOR)
#define BIN(a, b) (((a) != 0) != ((b) != 0))
#elif defined(OP_PRELU)
#define BIN(a, b) ((a) < (T0)0 ? (a) * (b) : (a))
#else
#define BIN(a, b) (a)
#endif

/* ---- ternary: out = TER(a, b, c) ---------------------------------------------------------------- */
#if defined(OP_WHERE)
#define TER(a, b, c) ((a) ? (b) : (c))
#elif defined(OP_CLIP3)
#define TER(a, b, c) ((((a) < (b) ? (b) : (a)) > (c)) ? (c) : ((a) < (b) ? (b) : (a)))
#else
#define TER(a, b, c) (a)
#endif

__kernel void unary(__global const S0T* x, __global SOT* y, const int n,
                    const float alpha, const float beta, const long ilo, const long ihi) {
    const int i = get_global_id(0);
    if (i < n) {
        const T0 v = ST_LD(H0, x, i);
        ST_ST(HO, y, i, (TO)(UN(v)));
    }
}

/* Equal shapes: no index math, one element per work-item (pocl vectorises across work-items). */
__kernel void binary_flat(__global const S0T* a, __global const S1T* b, __global SOT* c, const int n) {
    const int i = get_global_id(0);
    if (i < n) {
        const T0 va = ST_LD(H0, a, i);
        const T1 vb = ST_LD(H1, b, i);
        ST_ST(HO, c, i, (TO)(BIN(va, vb)));
    }
}

/* Broadcast, one division per dim per element (bcast_index.h); meta = dims, strides of a, of b. */
__kernel void binary_bcast(__global const S0T* a, __global const S1T* b, __global SOT* c, const int n,
                           __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int o[2];
    bcast_offsets(i, meta, RANK, 2, o);
    const T0 va = ST_LD(H0, a, o[0]);
    const T1 vb = ST_LD(H1, b, o[1]);
    ST_ST(HO, c, i, (TO)(BIN(va, vb)));
}

/* Broadcast by rows of the last dim (the row layout of bcast_index.h): no division per element,
 * ROW_VEC elements of one row per work-item. */
__kernel void binary_bcast_rows(__global const S0T* restrict a, __global const S1T* restrict b,
                                __global SOT* restrict c, const int inner, const int rows,
                                __global const int* restrict rowoff, __global const int* restrict last) {
    const int j0 = get_global_id(0) * ROW_VEC;
    const int row = get_global_id(1);
    if (j0 >= inner || row >= rows) return;
    const __global S0T* restrict pa = a + rowoff[2 * row];
    const __global S1T* restrict pb = b + rowoff[2 * row + 1];
    __global SOT* restrict pc = c + (long)row * inner;
    ROW_LOOP(j0, inner, ST_ST(HO, pc, j, (TO)(BIN((T0)ST_LD(H0, pa, ROW_STEP(0, j)), (T1)ST_LD(H1, pb, ROW_STEP(1, j))))));
}

__kernel void ternary_bcast(__global const S0T* a, __global const S1T* b, __global const S2T* c,
                            __global SOT* out, const int n, __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int o[3];
    bcast_offsets(i, meta, RANK, 3, o);
    const T0 va = ST_LD(H0, a, o[0]);
    const T1 vb = ST_LD(H1, b, o[1]);
    const T2 vc = ST_LD(H2, c, o[2]);
    ST_ST(HO, out, i, (TO)(TER(va, vb, vc)));
}

/* Casts from/to float16 storage (half arithmetic is optional in OpenCL: storage.h's conversions). */
__kernel void cast_from_half(__global const half* x, __global TO* y, const int n) {
    const int i = get_global_id(0);
    if (i < n) {
        const float v = ST_LD(1, x, i);
#ifdef OP_CAST_BOOL
        y[i] = (TO)(v != 0.0f);
#else
        y[i] = (TO)v;
#endif
    }
}

__kernel void cast_to_half(__global const T0* x, __global half* y, const int n) {
    const int i = get_global_id(0);
    if (i < n) ST_ST(1, y, i, (float)x[i]);
}
