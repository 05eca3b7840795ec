/* Resize, one launch per resized axis (separable): x seen as (outer, L_in, inner) -> (outer, L_out, inner);
 * each output coordinate j reads K taps idx[j, k] (clamped on the host) with weights w[j, k], or the
 * extrapolation value where ext[j] (tf_crop_and_resize).
 *   T  float type (float or double) */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif

__kernel void resize_axis(__global const T* x, __global T* y, const int n, const int L_in, const int L_out,
                          const int inner, const int K, __global const int* restrict idx,
                          __global const T* restrict w, __global const uchar* restrict ext, const T ev) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int r = i % inner;
    const int t = i / inner;
    const int j = t % L_out;
    const int o = t / L_out;
    if (ext[j]) {
        y[i] = ev;
        return;
    }
    __global const T* xr = x + (long)o * L_in * inner + r;
    T acc = 0;
    for (int k = 0; k < K; ++k) acc += w[j * K + k] * xr[(long)idx[j * K + k] * inner];
    y[i] = acc;
}

/* The usual image resize (float32): the last two axes at once, x seen as (planes, IH, IW) ->
 * (planes, OH, OW); output (oy, ox) = sum over the row taps ky and column taps kx of
 * wy[oy, ky] * wxt[kx, ox] * x[iy[oy, ky], ixt[kx, ox]] (taps and weights tabulated on the host
 * as for resize_axis; the column tables transposed and padded by 16 so that 16 outputs' taps
 * are vector loads; ey/ext per axis for tf_crop_and_resize). 16 outputs of a row per work-item
 * as one vector, no division per element, one pass instead of two with a scratch tensor between
 * them. RS_KX (a define) = the column taps: 1 nearest, 2 linear, 4 cubic. Measured on pocl
 * (AVX-512), A/B in one process: a 2x nearest upsampling of 128x40x40 2.40 -> 1.04 ms, 2x linear
 * of 64x56x56 2.67 -> 1.25 ms (onnxruntime: 0.26 and 0.47 ms).
 * gsize = (ceil(OW / 16), OH, planes). */
#ifdef RS_KX
typedef float16 rs_f16u __attribute__((aligned(4)));
typedef int16 rs_i16u __attribute__((aligned(4)));
typedef uchar16 rs_u16u __attribute__((aligned(1)));
typedef float8 float8_rs __attribute__((aligned(4)));

/* Output row oy of a 16-output tile starting at column ox0 by gathers: every tap's 16 inputs
 * through a private array (any taps). */
inline float16 rs_gather_row(__global const float* xp, const int IW, const int KY, const int oy, const int ox0,
                             const int pitch, __global const int* restrict iy, __global const float* restrict wy,
                             __global const int* restrict ixt, __global const float* restrict wxt) {
    float16 acc = (float16)0.0f;
    float g[16] __attribute__((aligned(64)));
    for (int ky = 0; ky < KY; ++ky) {
        const float wyk = wy[oy * KY + ky];
        __global const float* xr = xp + (long)iy[oy * KY + ky] * IW;
#pragma unroll
        for (int kx = 0; kx < RS_KX; ++kx) {
            const int16 iv = *(const __global rs_i16u*)(ixt + kx * pitch + ox0);
            const float16 wv = *(const __global rs_f16u*)(wxt + kx * pitch + ox0);
            const int* il = (const int*)&iv;
#pragma unroll
            for (int j = 0; j < 16; ++j)
                g[j] = xr[il[j]];
            acc += (wyk * wv) * *(const float16*)g;
        }
    }
    return acc;
}

/* The tile's nj (<= 16) outputs of row oy, the extrapolation value where ext/ey say. */
inline void rs_store(__global float* y, const int OH, const int OW, const int z, const int oy, const int ox0,
                     const int nj, __global const uchar* restrict ey, __global const uchar* restrict ext,
                     const float ev, float16 acc) {
    const int16 e = convert_int16(*(const __global rs_u16u*)(ext + ox0));
    acc = (e != 0 || ey[oy]) ? (float16)ev : acc;
    __global float* yr = y + ((long)z * OH + oy) * OW + ox0;
    if (nj == 16) {
        *(__global rs_f16u*)yr = acc;
    } else {
        float g[16] __attribute__((aligned(64)));
        *(float16*)g = acc;
        for (int j = 0; j < nj; ++j) yr[j] = g[j];
    }
}

#define RS_ARGS                                                                                                   \
    __global const float* restrict x, __global float* restrict y, const int IH, const int IW, const int OH,       \
    const int OW, const int KY, __global const int* restrict iy, __global const float* restrict wy,               \
    __global const uchar* restrict ey, __global const int* restrict ixt, __global const float* restrict wxt,      \
    __global const uchar* restrict ext, const float ev, __global const int* restrict bx

__kernel void resize_2d(RS_ARGS) {
    const int ox0 = get_global_id(0) * 16;
    const int oy = get_global_id(1);
    const int z = get_global_id(2);
    if (ox0 >= OW || oy >= OH) return;
    const int nj = min(16, OW - ox0);
    const int pitch = OW + 16;
    __global const float* xp = x + (long)z * IH * IW;
#ifdef RS_DUP2
    /* nearest 2x along the row (the host checked ix[ox] = ox / 2, weight 1): 16 outputs are 8
     * inputs each twice, one vector load and a shuffle instead of 16 gathers (YOLO's 2x
     * upsampling of 128x40x40: 0.48 -> 0.11 ms; onnxruntime 0.26) */
    if (ox0 + 16 <= OW) {
        float16 acc = (float16)0.0f;
        for (int ky = 0; ky < KY; ++ky) {
            const float8 a = *(const __global float8_rs*)(xp + (long)iy[oy * KY + ky] * IW + ox0 / 2);
            acc += wy[oy * KY + ky] * (float16)(a.s0, a.s0, a.s1, a.s1, a.s2, a.s2, a.s3, a.s3,
                                                a.s4, a.s4, a.s5, a.s5, a.s6, a.s6, a.s7, a.s7);
        }
        *(__global rs_f16u*)(y + ((long)z * OH + oy) * OW + ox0) = ey[oy] ? (float16)ev : acc;
        return;
    }
#endif
    rs_store(y, OH, OW, z, oy, ox0, nj, ey, ext, ev, rs_gather_row(xp, IW, KY, oy, ox0, pitch, iy, wy, ixt, wxt));
}

/* Upsampling (most tiles' column taps inside input columns [b, b + 16) of the row, b = bx[tile]
 * from the host, -1 where not): RS_R output rows of a tile per work-item, each input row's
 * horizontal interpolation (one vector load, a shuffle and a multiply-add per column tap) computed
 * once and kept for the following output rows that read it (a ring of 4: every row tap of the
 * current output row, RS_KY <= 4); tiles with b = -1 gather row by row. Instead of 16 gathers
 * per tap through a private array that the vector load then waits on, per output row.
 * A/B against the gathers on pocl under load: DeepLabV3's 16x bilinear upsampling of 21x20x20 to
 * 320x320 3.1 -> 1.35 ms, 2x linear of 64x56x56 0.86 -> 0.39 ms, 3x cubic of 16x30x30 0.57 -> 0.22
 * ms. gsize = (ceil(OW / 16), ceil(OH / RS_R), planes). */
#ifndef RS_R
#define RS_R 8
#endif
__kernel void resize_2d_win(RS_ARGS) {
    const int ox0 = get_global_id(0) * 16;
    const int oy0 = get_global_id(1) * RS_R;
    const int z = get_global_id(2);
    if (ox0 >= OW || oy0 >= OH) return;
    const int nj = min(16, OW - ox0);
    const int pitch = OW + 16;
    __global const float* xp = x + (long)z * IH * IW;
    const int b = bx[get_global_id(0)];
    const int rn = min(RS_R, OH - oy0);
    if (b < 0) {
        for (int r = 0; r < rn; ++r)
            rs_store(y, OH, OW, z, oy0 + r, ox0, nj, ey, ext, ev,
                     rs_gather_row(xp, IW, KY, oy0 + r, ox0, pitch, iy, wy, ixt, wxt));
        return;
    }
    uint16 sel[RS_KX];
    float16 wv[RS_KX];
#pragma unroll
    for (int kx = 0; kx < RS_KX; ++kx) {
        sel[kx] = as_uint16(*(const __global rs_i16u*)(ixt + kx * pitch + ox0) - (int16)b);
        wv[kx] = *(const __global rs_f16u*)(wxt + kx * pitch + ox0);
    }
    float16 hrow[4];
    int hidx[4] = {-1, -1, -1, -1};
    int next = 0;
    for (int r = 0; r < rn; ++r) {
        const int oy = oy0 + r;
        float16 acc = (float16)0.0f;
        for (int ky = 0; ky < KY; ++ky) {
            const int row = iy[oy * KY + ky];
            int slot = -1;
            for (int i = 0; i < 4; ++i)
                if (hidx[i] == row) slot = i;
            if (slot < 0) {
                const float16 v = vload16(0, xp + (long)row * IW + b);
                float16 h = (float16)0.0f;
#pragma unroll
                for (int kx = 0; kx < RS_KX; ++kx)
                    h += wv[kx] * shuffle(v, sel[kx]);
                slot = next;
                next = (next + 1) & 3;
                hidx[slot] = row;
                hrow[slot] = h;
            }
            acc += wy[oy * KY + ky] * hrow[slot];
        }
        rs_store(y, OH, OW, z, oy, ox0, nj, ey, ext, ev, acc);
    }
}
#endif
