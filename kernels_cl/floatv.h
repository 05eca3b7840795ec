/* floatv: the float vector of VW lanes (4, 8 or 16) a kernel's rows are made of, and floatv_u,
 * the same vector with 4-byte alignment (an unaligned load/store without calling vloadN, which
 * pocl does not inline). Shared by gemm.cl and gemv.cl; VW is defined before the include. */
#ifndef FLOATV_H
#define FLOATV_H

#if VW == 4
typedef float4 floatv;
#elif VW == 8
typedef float8 floatv;
#elif VW == 16
typedef float16 floatv;
#else
#error "VW must be 4, 8 or 16"
#endif
typedef floatv floatv_u __attribute__((aligned(4)));

#endif
