/* ShuffleNet's channel shuffle of two groups (clglow.ChannelShuffle, passes/fuse_channel_shuffle.py):
 * output channel s of [N, 2C, H, W] is channel s / 2 of input s % 2 (a or b, each [N, C, H, W]),
 * written whole (y0, PIECES 1) or as its halves [0, C) -> y0 and [C, 2C) -> y1 (PIECES 2).
 * A work-item copies one HW plane, 8-element vectors then the tail element by element:
 * gsize (2C, N). Kernels move bits: T is an unsigned type of the element's size. */
#ifndef T
#define T uint
#endif
#ifndef PIECES
#define PIECES 1
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

__kernel void channel_shuffle(__global const T* restrict a, __global const T* restrict b, __global T* restrict y0,
                              __global T* restrict y1, const int C, const int HW) {
    const int s = get_global_id(0), n = get_global_id(1);
    if (s >= 2 * C) return;
    const __global T* src = ((s & 1) ? b : a) + ((size_t)n * C + (s >> 1)) * HW;
#if PIECES == 2
    __global T* dst = (s < C ? y0 + ((size_t)n * C + s) * HW : y1 + ((size_t)n * C + s - C) * HW);
#else
    __global T* dst = y0 + ((size_t)n * 2 * C + s) * HW;
#endif
    int j = 0;
    for (; j + 8 <= HW; j += 8)
        vstore8(vload8(0, src + j), 0, dst + j);
    for (; j < HW; ++j)
        dst[j] = src[j];
}
