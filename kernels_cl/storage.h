/* Storage types of global tensors: float (H = 0) or half (H = 1). Half storage is read and
 * written through vload_half / vstore_half_rte, which are core OpenCL 1.2 on every device (also
 * without cl_khr_fp16: pocl, Oclgrind); the values are floats in registers, so the arithmetic
 * and every accumulator stay fp32. A kernel gains half storage with a mechanical edit: each
 * operand gets a 0/1 define (e.g. -DA_HALF=1, default 0), its pointers are declared with
 * ST_T(A_HALF) and its global loads and stores go through the macros below, which expand to the
 * plain float loads and stores (the same code as before) for H = 0.
 *
 *   ST_T(H)              the element type for a __global pointer: float or half
 *   ST_LD(H, p, i)       p[i] as a float
 *   ST_ST(H, p, i, x)    p[i] = x (half: rounded to nearest even)
 *   ST_LDV(H, N, p)      N lanes at p as a floatN (4-byte aligned for float, 2 for half)
 *   ST_LDVA(H, N, p)     the same where p is aligned to the float vector (panels)
 *   ST_STV(H, N, p, v)   N lanes of the floatN v to p
 * N is 1, 2, 4, 8 or 16 (a macro that expands to one of them is fine).
 *
 * The half <-> float conversions are inline integer arithmetic (exact: round to nearest even,
 * subnormals, infinities, NaN kept): pocl calls vload_halfN / vstore_halfN_rte out of line, one
 * call per k step of a GEMM (measured 7-18x the float32 kernel time of whole models). With
 * -DST_BUILTIN_HALF the builtins are used instead (drivers that inline them: a GPU converts
 * in hardware).
 */
#ifndef CLGLOW_STORAGE_H
#define CLGLOW_STORAGE_H

/* A prefetch hint for the kernels that include this header (gemm.cl), or nothing where the
 * device's compiler cannot create a kernel that calls __builtin_prefetch (-DCLG_NO_PREFETCH,
 * from Target.prefetch, probed by runtime/capabilities.py: Oclgrind has no llvm.prefetch). */
#ifdef CLG_NO_PREFETCH
#define CLG_PREFETCH(p) ((void)(p))
#else
#define CLG_PREFETCH(p) __builtin_prefetch(p)
#endif

/* The storage flags most kernels share (XH/YH: a kernel's input and output; A/B/C/Z/BIAS_HALF:
 * the GEMM operands), 0 (float) unless a -D define says half. Kernel-specific flags (QH, KH, VH,
 * X_HALF) default in their own files. */
#ifndef XH
#define XH 0
#endif
#ifndef YH
#define YH 0
#endif
#ifndef A_HALF
#define A_HALF 0
#endif
#ifndef B_HALF
#define B_HALF 0
#endif
#ifndef C_HALF
#define C_HALF 0
#endif
#ifndef Z_HALF
#define Z_HALF 0
#endif
#ifndef BIAS_HALF
#define BIAS_HALF 0
#endif

#define ST_CAT_(a, b) a##b
#define ST_CAT(a, b) ST_CAT_(a, b)

#define ST_T(H) ST_CAT(ST_T_, H)
#define ST_T_0 float
#define ST_T_1 half

/* Float vectors of 1..16 lanes, 4-byte aligned (moves without vloadN, which pocl does not
 * inline) and naturally aligned. */
typedef float st_fu1;
typedef float2 st_fu2 __attribute__((aligned(4)));
typedef float4 st_fu4 __attribute__((aligned(4)));
typedef float8 st_fu8 __attribute__((aligned(4)));
typedef float16 st_fu16 __attribute__((aligned(4)));
typedef float st_fa1;
typedef float2 st_fa2;
typedef float4 st_fa4;
typedef float8 st_fa8;
typedef float16 st_fa16;

#ifdef ST_BUILTIN_HALF
#define st_vlh1(o, p) vload_half((o), (p))
#define st_vlh2(o, p) vload_half2((o), (p))
#define st_vlh4(o, p) vload_half4((o), (p))
#define st_vlh8(o, p) vload_half8((o), (p))
#define st_vlh16(o, p) vload_half16((o), (p))
#define st_vsh1(v, o, p) vstore_half_rte((v), (o), (p))
#define st_vsh2(v, o, p) vstore_half2_rte((v), (o), (p))
#define st_vsh4(v, o, p) vstore_half4_rte((v), (o), (p))
#define st_vsh8(v, o, p) vstore_half8_rte((v), (o), (p))
#define st_vsh16(v, o, p) vstore_half16_rte((v), (o), (p))
#else
/* Half bits as unsigned shorts, 2-byte aligned, and the conversions lane by lane (integer
 * ops and selects, vectorised with the vector types; Fabian Giesen's half_to_float and
 * float_to_half_fast3_rtne). */
typedef ushort st_us1;
typedef ushort2 st_us2 __attribute__((aligned(2)));
typedef ushort4 st_us4 __attribute__((aligned(2)));
typedef ushort8 st_us8 __attribute__((aligned(2)));
typedef ushort16 st_us16 __attribute__((aligned(2)));
typedef uint st_ui1;
typedef uint2 st_ui2;
typedef uint4 st_ui4;
typedef uint8 st_ui8;
typedef uint16 st_ui16;

#define ST_DEFINE_CONV(N, F, UI, US, CVT_UI, CVT_US, AS_F, AS_UI)                          \
    inline F st_h2f_##N(const US h) {                                                    \
        const UI u = CVT_UI(h);                                                          \
        UI o = (u & 0x7fffu) << 13;                                                      \
        const UI e = o & 0x0f800000u;                                                    \
        o += 0x38000000u;                                    /* exponent 15 -> 127 */    \
        o = e == 0x0f800000u ? o + 0x38000000u : o;          /* inf, NaN */              \
        F f = AS_F(e == 0u ? o + 0x00800000u : o);                                       \
        f = e == 0u ? f - 6.103515625e-05f : f;              /* subnormal: minus 2^-14 */ \
        return AS_F(AS_UI(f) | ((u & 0x8000u) << 16));                                   \
    }                                                                                    \
    inline US st_f2h_##N(const F v) {                                                    \
        UI x = AS_UI(v);                                                                 \
        const UI sign = x & 0x80000000u;                                                 \
        x ^= sign;                                                                       \
        const UI big = x > 0x7f800000u ? (UI)0x7e00u : (UI)0x7c00u;  /* NaN, inf */      \
        const UI sub = AS_UI(AS_F(x) + 0.5f) - 0x3f000000u;  /* below 2^-14 */           \
        const UI nrm = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;                       \
        const UI o = x >= 0x47800000u ? big : x < 0x38800000u ? sub : nrm;               \
        return CVT_US(o | (sign >> 16));                                                 \
    }
ST_DEFINE_CONV(1, float, uint, ushort, convert_uint, convert_ushort, as_float, as_uint)
ST_DEFINE_CONV(2, float2, uint2, ushort2, convert_uint2, convert_ushort2, as_float2, as_uint2)
ST_DEFINE_CONV(4, float4, uint4, ushort4, convert_uint4, convert_ushort4, as_float4, as_uint4)
ST_DEFINE_CONV(8, float8, uint8, ushort8, convert_uint8, convert_ushort8, as_float8, as_uint8)
ST_DEFINE_CONV(16, float16, uint16, ushort16, convert_uint16, convert_ushort16, as_float16, as_uint16)

#define st_vlh1(o, p) st_h2f_1(*((const __global st_us1*)(p) + (o)))
#define st_vlh2(o, p) st_h2f_2(*(const __global st_us2*)((const __global ushort*)(p) + 2 * (o)))
#define st_vlh4(o, p) st_h2f_4(*(const __global st_us4*)((const __global ushort*)(p) + 4 * (o)))
#define st_vlh8(o, p) st_h2f_8(*(const __global st_us8*)((const __global ushort*)(p) + 8 * (o)))
#define st_vlh16(o, p) st_h2f_16(*(const __global st_us16*)((const __global ushort*)(p) + 16 * (o)))
#define st_vsh1(v, o, p) (*((__global st_us1*)(p) + (o)) = st_f2h_1(v))
#define st_vsh2(v, o, p) (*(__global st_us2*)((__global ushort*)(p) + 2 * (o)) = st_f2h_2(v))
#define st_vsh4(v, o, p) (*(__global st_us4*)((__global ushort*)(p) + 4 * (o)) = st_f2h_4(v))
#define st_vsh8(v, o, p) (*(__global st_us8*)((__global ushort*)(p) + 8 * (o)) = st_f2h_8(v))
#define st_vsh16(v, o, p) (*(__global st_us16*)((__global ushort*)(p) + 16 * (o)) = st_f2h_16(v))
#endif

#define ST_LD(H, p, i) ST_CAT(ST_LD_, H)(p, i)
#define ST_LD_0(p, i) ((p)[i])
#define ST_LD_1(p, i) st_vlh1((i), (p))

#define ST_ST(H, p, i, x) ST_CAT(ST_ST_, H)(p, i, x)
#define ST_ST_0(p, i, x) ((p)[i] = (x))
#define ST_ST_1(p, i, x) st_vsh1((x), (i), (p))

#define ST_LDV(H, N, p) ST_CAT(ST_LDV_, H)(N, p)
#define ST_LDV_0(N, p) (*(const __global ST_CAT(st_fu, N)*)(p))
#define ST_LDV_1(N, p) ST_CAT(st_vlh, N)(0, (p))

#define ST_LDVA(H, N, p) ST_CAT(ST_LDVA_, H)(N, p)
#define ST_LDVA_0(N, p) (*(const __global ST_CAT(st_fa, N)*)(p))
#define ST_LDVA_1(N, p) ST_CAT(st_vlh, N)(0, (p))

#define ST_STV(H, N, p, v) ST_CAT(ST_STV_, H)(N, p, v)
#define ST_STV_0(N, p, v) (*(__global ST_CAT(st_fu, N)*)(p) = (v))
#define ST_STV_1(N, p, v) ST_CAT(st_vsh, N)((v), 0, (p))

#endif
