/* A fused chain of float32 elementwise ops (clglow.FusedElementwise): y = EXPR(X0, ..., X3)
 * evaluated per output element, each input broadcast to the output shape.
 *
 * Defines:
 *   EXPR   the expression, nested macro calls over X0..X{NIN-1}, e.g. MUL(X0,SIGMOID(X0))
 *   NIN    number of inputs (1..4); scalar constants are literals LIT(bits) of EXPR
 *   H0..H3, HY  1: that input / the output is stored as half (storage.h), computed as float
 * fused_flat: every input has the output's shape or is a single value (Sk = 1: input k is
 *   read at 0, e.g. GELU's constants), so there is no index arithmetic.
 * fused_rows: the row layout of bcast_index.h (row offsets from the host, no division per element).
 * fused_bcast: anything else (a short last dim, many rows): bcast_offsets per element, RANK =
 *   rank of the collapsed index space, meta as in elementwise.cl.
 * Plain arithmetic only where pocl would call out of line (see erf.h).
 */
#include "bcast_index.h"
#include "fe_ops.h"

#ifndef NIN
#define NIN 1
#endif
#ifndef RANK
#define RANK 1
#endif
#ifndef S0
#define S0 0
#endif
#ifndef S1
#define S1 0
#endif
#ifndef S2
#define S2 0
#endif
#ifndef S3
#define S3 0
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
#ifndef H3
#define H3 0
#endif
#ifndef HY
#define HY 0
#endif
#include "storage.h"
/* Typed expressions (TYPED defined: fused_bcast only): T0..T3, TY the value types of the inputs and output
 * (long, int, uchar for bool, float), e.g. an attention mask's int64 -> bool -> Where chain; a
 * float stored as half keeps Hk = 1 with Tk = float. Absent, every value is float. */
#ifndef T0
#define T0 float
#endif
#ifndef T1
#define T1 float
#endif
#ifndef T2
#define T2 float
#endif
#ifndef T3
#define T3 float
#endif
#ifndef TY
#define TY float
#endif
#define FE_ST(H, T) ST_CAT(FE_ST_, H)(T)
#define FE_ST_0(T) T
#define FE_ST_1(T) half
#define X0T FE_ST(H0, T0)
#define X1T FE_ST(H1, T1)
#define X2T FE_ST(H2, T2)
#define X3T FE_ST(H3, T3)
#define YT FE_ST(HY, TY)


#ifndef TYPED  /* the float kernels: a typed EXPR need not compile over float16 vectors */
/* 16 elements per work-item as float16 vectors (a partial last run through private arrays).
 * Measured on pocl (AVX-512): x * Sigmoid(x) over 128x40x40 124 -> 43 us, an erf Gelu over
 * 256x3072 776 -> 157 us (one element per work-item before; onnxruntime 38 and 182 us). */
__kernel void fused_flat(__global const X0T* restrict x0, __global const X1T* restrict x1,
                         __global const X2T* restrict x2, __global const X3T* restrict x3,
                         __global YT* restrict y, const int n) {
    const int i0 = get_global_id(0) * 16;
    if (i0 >= n) return;
    if (i0 + 16 <= n) {
        const float16 X0 = S0 ? (float16)ST_LD(H0, x0, 0) : ST_LDV(H0, 16, x0 + i0);
#if NIN > 1
        const float16 X1 = S1 ? (float16)ST_LD(H1, x1, 0) : ST_LDV(H1, 16, x1 + i0);
#endif
#if NIN > 2
        const float16 X2 = S2 ? (float16)ST_LD(H2, x2, 0) : ST_LDV(H2, 16, x2 + i0);
#endif
#if NIN > 3
        const float16 X3 = S3 ? (float16)ST_LD(H3, x3, 0) : ST_LDV(H3, 16, x3 + i0);
#endif
        const float16 y_ = EXPR;
        ST_STV(HY, 16, y + i0, y_);
        return;
    }
    const int nj = n - i0;
    float t[4][16] __attribute__((aligned(64)));
    for (int j = 0; j < 16; ++j) {
        const int i = j < nj ? i0 + j : i0;
        t[0][j] = ST_LD(H0, x0, S0 ? 0 : i);
#if NIN > 1
        t[1][j] = ST_LD(H1, x1, S1 ? 0 : i);
#endif
#if NIN > 2
        t[2][j] = ST_LD(H2, x2, S2 ? 0 : i);
#endif
#if NIN > 3
        t[3][j] = ST_LD(H3, x3, S3 ? 0 : i);
#endif
    }
    const float16 X0 = *(const float16*)t[0];
#if NIN > 1
    const float16 X1 = *(const float16*)t[1];
#endif
#if NIN > 2
    const float16 X2 = *(const float16*)t[2];
#endif
#if NIN > 3
    const float16 X3 = *(const float16*)t[3];
#endif
    *(float16*)t[0] = EXPR;
    for (int j = 0; j < nj; ++j)
        ST_ST(HY, y, i0 + j, t[0][j]);
}

/* EXPR of one element (inlined; the inputs past NIN are unused). */
inline float fused_at(const float X0, const float X1, const float X2, const float X3) {
    return EXPR;
}

/* EXPR at element j of the rows (X<k> read through p<k>). */
#if NIN == 1
#define FUSED_ROW_EXPR(j) fused_at(ST_LD(H0, p0, ROW_STEP(0, j)), 0.0f, 0.0f, 0.0f)
#elif NIN == 2
#define FUSED_ROW_EXPR(j) fused_at(ST_LD(H0, p0, ROW_STEP(0, j)), ST_LD(H1, p1, ROW_STEP(1, j)), 0.0f, 0.0f)
#elif NIN == 3
#define FUSED_ROW_EXPR(j) fused_at(ST_LD(H0, p0, ROW_STEP(0, j)), ST_LD(H1, p1, ROW_STEP(1, j)), ST_LD(H2, p2, ROW_STEP(2, j)), 0.0f)
#else
#define FUSED_ROW_EXPR(j) fused_at(ST_LD(H0, p0, ROW_STEP(0, j)), ST_LD(H1, p1, ROW_STEP(1, j)), ST_LD(H2, p2, ROW_STEP(2, j)), ST_LD(H3, p3, ROW_STEP(3, j)))
#endif

#define FE_HALF (H0 || H1 || H2 || H3 || HY)
#if FE_HALF
/* Half storage: a whole run of ROW_VEC = 16 outputs as vectors (the per-element conversions of
 * ROW_LOOP do not vectorise: decoder-sized rows 8x slower than float32). Operand k's run is one
 * vector load (row stride 1), one broadcast element (0), or a gather (anything else). */
#define FE_DEFINE_RUN(k)                                                                   \
    inline float16 fe_run_##k(__global const X##k##T* p, const int j0, const int s) {      \
        if (s == 1)                                                                        \
            return ST_LDV(H##k, 16, p + j0);                                               \
        if (s == 0)                                                                        \
            return (float16)ST_LD(H##k, p, 0);                                             \
        float t[16] __attribute__((aligned(64)));                                          \
        for (int c = 0; c < 16; ++c)                                                       \
            t[c] = ST_LD(H##k, p, (j0 + c) * s);                                           \
        return *(const float16*)t;                                                         \
    }
FE_DEFINE_RUN(0)
FE_DEFINE_RUN(1)
FE_DEFINE_RUN(2)
FE_DEFINE_RUN(3)
#endif

__kernel void fused_rows(__global const X0T* restrict x0, __global const X1T* restrict x1,
                         __global const X2T* restrict x2, __global const X3T* restrict x3,
                         __global YT* restrict y, const int inner, const int rows,
                         __global const int* restrict rowoff, __global const int* restrict last) {
    const int j0 = get_global_id(0) * ROW_VEC;
    const int row = get_global_id(1);
    if (j0 >= inner || row >= rows) return;
    const __global int* ro = rowoff + row * NIN;
    const __global X0T* restrict p0 = x0 + ro[0];
#if NIN > 1
    const __global X1T* restrict p1 = x1 + ro[1];
#endif
#if NIN > 2
    const __global X2T* restrict p2 = x2 + ro[2];
#endif
#if NIN > 3
    const __global X3T* restrict p3 = x3 + ro[3];
#endif
    __global YT* restrict py = y + (long)row * inner;
#if FE_HALF
    if (j0 + ROW_VEC <= inner) {
        const float16 X0 = fe_run_0(p0, j0, last[0]);
#if NIN > 1
        const float16 X1 = fe_run_1(p1, j0, last[1]);
#endif
#if NIN > 2
        const float16 X2 = fe_run_2(p2, j0, last[2]);
#endif
#if NIN > 3
        const float16 X3 = fe_run_3(p3, j0, last[3]);
#endif
        const float16 y_ = EXPR;
        ST_STV(HY, 16, py + j0, y_);
        return;
    }
#endif
    ROW_LOOP(j0, inner, ST_ST(HY, py, j, FUSED_ROW_EXPR(j)));
}

#endif /* TYPED */

__kernel void fused_bcast(__global const X0T* x0, __global const X1T* x1, __global const X2T* x2,
                          __global const X3T* x3, __global YT* y, const int n,
                          __global const int* restrict meta) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int o[NIN];
    bcast_offsets(i, meta, RANK, NIN, o);
    const T0 X0 = ST_LD(H0, x0, o[0]);
#if NIN > 1
    const T1 X1 = ST_LD(H1, x1, o[1]);
#endif
#if NIN > 2
    const T2 X2 = ST_LD(H2, x2, o[2]);
#endif
#if NIN > 3
    const T3 X3 = ST_LD(H3, x3, o[3]);
#endif
    ST_ST(HY, y, i, (TY)(EXPR));
}
