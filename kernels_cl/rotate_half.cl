/* clglow.RotateHalf (passes/fuse_rotary.py, lower/rotate_half.py): the rotary position embedding
 * as Llama / GPT-NeoX / Mistral exports write it, y = x * cos + rotate_half(x) * sin with
 * rotate_half(x) = concat(-x[..., HALF:], x[..., :HALF]) along the last axis: seven nodes (two
 * Slices, Neg, Concat, two Muls, Add) in one pass over x.
 *
 * x and y are [R0, R1, R2, 2 * HALF] (rank < 4 padded with leading ones), contiguous; cos and sin
 * broadcast to them (numpy rules) and are read through element strides (c0, c1, c2, cd) and
 * (s0, s1, s2, sd), 0 along a broadcast axis. One work-item per pair (j, j + HALF) of a row
 * (i1, i2) for every i0: gsize = (HALF rounded up, R2, R1), no integer division (Oclgrind's
 * uninitialised-value checker stops on the freeze LLVM puts on a div/rem pair). OpenCL 1.2.
 * Storage (storage.h): XH, CH, SH, YH = 1 read x, cos, sin or write y as half (fp32 arithmetic).
 */
#include "storage.h"
#ifndef CH
#define CH 0
#endif
#ifndef SH
#define SH 0
#endif

__kernel void rotate_half(__global const ST_T(XH)* restrict x, __global const ST_T(CH)* restrict cosv,
                          __global const ST_T(SH)* restrict sinv, __global ST_T(YH)* restrict y, const int HALF,
                          const int R0, const int R1, const int R2, const int c0, const int c1, const int c2,
                          const int cd, const int s0, const int s1, const int s2, const int sd)
{
    const int j = get_global_id(0), i2 = get_global_id(1), i1 = get_global_id(2);
    if (j >= HALF || i2 >= R2)
        return;
    for (int i0 = 0; i0 < R0; ++i0) {
        const long xb = (((long)i0 * R1 + i1) * R2 + i2) * (2 * HALF);
        const long cb = (long)i0 * c0 + (long)i1 * c1 + (long)i2 * c2;
        const long sb = (long)i0 * s0 + (long)i1 * s1 + (long)i2 * s2;
        const float a = ST_LD(XH, x, xb + j), b = ST_LD(XH, x, xb + j + HALF);
        const float c0v = ST_LD(CH, cosv, cb + (long)j * cd), c1v = ST_LD(CH, cosv, cb + (long)(j + HALF) * cd);
        const float s0v = ST_LD(SH, sinv, sb + (long)j * sd), s1v = ST_LD(SH, sinv, sb + (long)(j + HALF) * sd);
        ST_ST(YH, y, xb + j, a * c0v - b * s0v);
        ST_ST(YH, y, xb + j + HALF, b * c1v + a * s1v);
    }
}
