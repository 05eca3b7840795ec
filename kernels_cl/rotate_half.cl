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
 */
__kernel void rotate_half(__global const float* restrict x, __global const float* restrict cosv,
                          __global const float* restrict sinv, __global float* restrict y, const int HALF,
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
        const float a = x[xb + j], b = x[xb + j + HALF];
        y[xb + j] = a * cosv[cb + (long)j * cd] - b * sinv[sb + (long)j * sd];
        y[xb + j + HALF] = b * cosv[cb + (long)(j + HALF) * cd] + a * sinv[sb + (long)(j + HALF) * sd];
    }
}
