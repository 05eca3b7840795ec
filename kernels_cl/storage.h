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
 * N is 1, 2, 3, 4, 8 or 16 (a macro that expands to one of them is fine).
 */
#ifndef CLGLOW_STORAGE_H
#define CLGLOW_STORAGE_H

#define ST_CAT_(a, b) a##b
#define ST_CAT(a, b) ST_CAT_(a, b)

#define ST_T(H) ST_CAT(ST_T_, H)
#define ST_T_0 float
#define ST_T_1 half

/* Float vectors of 1..16 lanes, 4-byte aligned (moves without vloadN, which pocl does not
 * inline) and naturally aligned. */
typedef float st_fu1;
typedef float2 st_fu2 __attribute__((aligned(4)));
typedef float3 st_fu3 __attribute__((aligned(4)));
typedef float4 st_fu4 __attribute__((aligned(4)));
typedef float8 st_fu8 __attribute__((aligned(4)));
typedef float16 st_fu16 __attribute__((aligned(4)));
typedef float st_fa1;
typedef float2 st_fa2;
typedef float3 st_fa3;
typedef float4 st_fa4;
typedef float8 st_fa8;
typedef float16 st_fa16;

#define st_vlh1(o, p) vload_half((o), (p))
#define st_vlh2(o, p) vload_half2((o), (p))
#define st_vlh3(o, p) vload_half3((o), (p))
#define st_vlh4(o, p) vload_half4((o), (p))
#define st_vlh8(o, p) vload_half8((o), (p))
#define st_vlh16(o, p) vload_half16((o), (p))
#define st_vsh1(v, o, p) vstore_half_rte((v), (o), (p))
#define st_vsh2(v, o, p) vstore_half2_rte((v), (o), (p))
#define st_vsh3(v, o, p) vstore_half3_rte((v), (o), (p))
#define st_vsh4(v, o, p) vstore_half4_rte((v), (o), (p))
#define st_vsh8(v, o, p) vstore_half8_rte((v), (o), (p))
#define st_vsh16(v, o, p) vstore_half16_rte((v), (o), (p))

#define ST_LD(H, p, i) ST_CAT(ST_LD_, H)(p, i)
#define ST_LD_0(p, i) ((p)[i])
#define ST_LD_1(p, i) vload_half((i), (p))

#define ST_ST(H, p, i, x) ST_CAT(ST_ST_, H)(p, i, x)
#define ST_ST_0(p, i, x) ((p)[i] = (x))
#define ST_ST_1(p, i, x) vstore_half_rte((x), (i), (p))

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
