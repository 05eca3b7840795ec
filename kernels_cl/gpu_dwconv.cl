/* Depthwise 2-D convolution with the input halo staged in local memory (the GPU family), with
 * gemm.cl's epilogue: Y = ACT(conv + bias + Z). 1-D convs pass H = KH = 1.
 *
 * A work-group of WX x WY work-items computes a TW x TH tile of output pixels of one (image,
 * output channel) plane: it first copies the tile's input window, IH x IW floats with the
 * padding as zeros (bounds, no padded copy of X), into __local memory (consecutive work-items
 * take consecutive columns: coalesced), waits at one barrier, and each work-item then computes
 * RX x RY = (TW / WX) x (TH / WY) outputs from local memory, strided by the group's shape
 * (output x = lx + i*WX, y = ly + j*WY: neighbouring work-items store neighbouring pixels).
 * The KH x KW taps are in registers, every loop unrolled.
 *
 * -D parameters: TW, TH, WX, WY (the tuner's space, lower/gpu_dwconv.py); the taps KH, KW,
 * strides SH, SW and dilations DH, DW (the loops' bounds). Shapes, pads and the depth
 * multiplier (MULT = Cout / Cin: output channel co reads input channel co / MULT) are run-time
 * arguments. flags: 1 = bias, 2 = residual Z. gsize = (ceil(OW/TW)*WX, ceil(OH/TH)*WY,
 * images*Cout), lsize (WX, WY, 1). OpenCL 1.2, no extension.
 * Storage (kernels_cl/storage.h): XH = 1 reads X as half, YH = 1 writes Y and reads Z as half
 * (the local tile, taps, bias and sums are float).
 */
#pragma OPENCL FP_CONTRACT ON

#ifndef TW
#define TW 32
#endif
#ifndef TH
#define TH 8
#endif
#ifndef WX
#define WX 32
#endif
#ifndef WY
#define WY 8
#endif
#ifndef KH
#define KH 3
#endif
#ifndef KW
#define KW 3
#endif
#ifndef SH
#define SH 1
#endif
#ifndef SW
#define SW 1
#endif
#ifndef DH
#define DH 1
#endif
#ifndef DW
#define DW 1
#endif
#if TW % WX || TH % WY
#error "the output tile must be whole work-group shapes"
#endif

#include "storage.h"

#define RX (TW / WX)
#define RY (TH / WY)
#define IW ((TW - 1) * SW + (KW - 1) * DW + 1) /* the tile's input window */
#define IH ((TH - 1) * SH + (KH - 1) * DH + 1)
#define FLAG_BIAS 1
#define FLAG_RES 2

#include "activation.h"
DEFINE_ACT(act_s, float)

__kernel __attribute__((reqd_work_group_size(WX, WY, 1)))
void dw_tile(__global const ST_T(XH)* restrict X, __global const float* restrict Wt, __global ST_T(YH)* Y,
             __global const float* restrict bias, __global const ST_T(YH)* Z, int C, int H, int W, int Cout,
             int OH, int OW, int PH, int PW, int MULT, int flags, float act_a, float act_b, float act_c)
{
    __local float tile[IH * IW];

    const int lx = get_local_id(0), ly = get_local_id(1);
    const int ox0 = get_group_id(0) * TW, oy0 = get_group_id(1) * TH;
    /* False only in the no-op launch (OH = OW = 0): nothing is read then, every output is skipped.
     * Not an early return: pocl 3.1 corrupted its heap with one before the barrier here. */
    const bool live = ox0 < OW && oy0 < OH;
    const int z = get_group_id(2);
    const int n = z / Cout, co = z - n * Cout;
    const __global ST_T(XH)* xp = X + (size_t)(n * C + co / MULT) * H * W;
    const int iy0 = oy0 * SH - PH, ix0 = ox0 * SW - PW;
    for (int e = ly * WX + lx; e < IH * IW; e += WX * WY) {
        const int r = e / IW, q = e - r * IW;
        const int iy = iy0 + r, ix = ix0 + q;
        tile[e] = live && iy >= 0 && iy < H && ix >= 0 && ix < W ? ST_LD(XH, xp, iy * W + ix) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float w[KH * KW];
#pragma unroll
    for (int t = 0; t < KH * KW; ++t)
        w[t] = live ? Wt[co * (KH * KW) + t] : 0.0f;

    float acc[RY][RX];
#pragma unroll
    for (int j = 0; j < RY; ++j)
#pragma unroll
        for (int i = 0; i < RX; ++i)
            acc[j][i] = 0.0f;
#pragma unroll
    for (int ky = 0; ky < KH; ++ky)
#pragma unroll
        for (int kx = 0; kx < KW; ++kx)
#pragma unroll
            for (int j = 0; j < RY; ++j)
#pragma unroll
                for (int i = 0; i < RX; ++i)
                    acc[j][i] += w[ky * KW + kx] * tile[((ly + j * WY) * SH + ky * DH) * IW
                                                        + (lx + i * WX) * SW + kx * DW];

    const float b = live && (flags & FLAG_BIAS) ? bias[co] : 0.0f;
    const size_t plane = (size_t)z * OH * OW;
#pragma unroll
    for (int j = 0; j < RY; ++j) {
        const int oy = oy0 + ly + j * WY;
        if (oy >= OH)
            continue;
#pragma unroll
        for (int i = 0; i < RX; ++i) {
            const int ox = ox0 + lx + i * WX;
            if (ox >= OW)
                continue;
            const size_t o = plane + oy * OW + ox;
            float v = acc[j][i] + b;
            if (flags & FLAG_RES)
                v += ST_LD(YH, Z, o);
            ST_ST(YH, Y, o, act_s(v, act_a, act_b, act_c));
        }
    }
}
