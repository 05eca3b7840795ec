/* onnxruntime's quantized contrib ops (com.microsoft QLinear*) on 8-bit tensors, as its CPU kernels
 * compute them: dequantize in float, the float op, requantise with rint (round half to even) and
 * saturation to T's range.  T is the 8-bit type (uchar or char).  Scales and zero points are
 * constants of the model, passed as scalar arguments (the ratios computed on the host in float32, as
 * onnxruntime does): read from buffers, pocl reloads them per element and the kernel runs ~40x slower.
 *
 * FP_CONTRACT is off: a*b+c must round twice as onnxruntime's (and numpy's) float code does, or a
 * value near a half step could round the other way.
 */
#pragma OPENCL FP_CONTRACT OFF
#include "bcast_index.h"

#ifndef T
#define T uchar
#endif
#ifndef QMIN
#define QMIN 0
#endif
#ifndef QMAX
#define QMAX 255
#endif
#ifndef RANK
#define RANK 1
#endif

/* Round half to even and saturate to T in one conversion: PyPI's pocl 3.0 (LLVM 14) keeps rint()
 * and convert_int_rte() scalar (QLinearAdd [1,256,56,56]: 9 ms), convert_<T>_sat_rte vectorises
 * (0.6 ms) on both pocls. */
#define QCAT3(a, b, c) a##b##c
#define QXCAT3(a, b, c) QCAT3(a, b, c)
#define QCONVERT QXCAT3(convert_, T, _sat_rte)

inline T qsat(const float v) {
    return QCONVERT(v);
}

/* rint(v) for |v| < 2^22 by the float adder (1.5 * 2^23 moves the fraction out; round to nearest
 * even, FP_CONTRACT off keeps the two additions); larger values stay beyond T's range, so
 * saturation gives the same result. */
inline float qround(const float v) {
    return (v + 12582912.0f) - 12582912.0f;
}

inline T qbin(const T a, const T b, const float ra, const float rb, const int za, const int zb, const float zc) {
    const int va = (int)a - za;
    const int vb = (int)b - zb;
#ifdef OP_MUL
    const float v = (float)(va * vb) * ra;
#else
    const float v = (float)va * ra + (float)vb * rb;
#endif
    return qsat(v + zc);
}

/* QLinearAdd (OP_MUL undefined): v = (a - za) * ra + (b - zb) * rb, ra = as / cs, rb = bs / cs;
 * QLinearMul (OP_MUL): v = (a - za) * (b - zb) * ra, ra = as * bs / cs; c = sat(v + zc).
 * Multidirectional broadcast: meta as in bcast_index.h (RANK dims, then a's and b's strides);
 * FLAT: both operands have c's shape, or one of them (SCALAR_A / SCALAR_B) is a single element
 * (BERT's GELU adds 1 to a [128, 1024] tensor: 2.2 ms through bcast_offsets' divisions). */
__kernel void qbinary(__global const T* restrict a, __global const T* restrict b, __global T* restrict c,
                      const int n, __global const int* restrict meta, const float ra, const float rb,
                      const int za, const int zb, const float zc) {
    const int i = get_global_id(0);
    if (i >= n) return;
#if defined(FLAT) && defined(SCALAR_A)
    const int oa = 0, ob = i;
#elif defined(FLAT) && defined(SCALAR_B)
    const int oa = i, ob = 0;
#elif defined(FLAT)
    const int oa = i, ob = i;
#else
    int o[2];
    bcast_offsets(i, meta, RANK, 2, o);
    const int oa = o[0], ob = o[1];
#endif
    c[i] = qbin(a[oa], b[ob], ra, rb, za, zb, zc);
}

/* The same over the rows of bcast_index.h's row layout (lower/index_space.row_layout: row offsets
 * from the host, each operand's stride along the row as ROW_S<k> or last[k]), one element per
 * work-item in a 1-D range. Work-groups each lie in one row where the row length is a multiple of
 * the group size: no division per element, and pocl vectorises the group as in the flat case
 * (measured on pocl, 16-float vectors, [1, 256, 56, 56] x [1, 256, 1, 1] uchar: 0.39 ms; a 2-D range of
 * (row, column) items or ROW_VEC runs per item: 2-3.5 ms); else (ROW_DIV) one division per
 * element finds the row (1.2-1.8 ms; bcast_offsets' per-dim divisions: 13 ms). */
__kernel void qbinary_rows(__global const T* restrict a, __global const T* restrict b, __global T* restrict c,
                           const int n, const int inner, __global const int* restrict rowoff,
                           __global const int* restrict last, const float ra, const float rb, const int za,
                           const int zb, const float zc) {
    const int i = get_global_id(0);
#ifdef ROW_DIV
    if (i >= n) return;
    const int row = i / inner;
#else
    const int row = (int)(get_group_id(0) * get_local_size(0)) / inner;
#endif
    const int j = i - row * inner;
    c[i] = qbin(a[rowoff[2 * row] + ROW_STEP(0, j)], b[rowoff[2 * row + 1] + ROW_STEP(1, j)], ra, rb, za, zb, zc);
}

/* y = table[byte of x]: QLinearSigmoid, QLinearLeakyRelu (the table holds the whole op). */
__kernel void qlut(__global const T* restrict x, __constant T* table, __global T* restrict y, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    y[i] = table[(uchar)x[i]];
}

/* One QLinearConcat input [outer, len_in, inner] into its slice of y [outer, len_out, inner] at
 * `offset` along the axis, requantised by a table (HAS_TABLE) or copied (same scale and zero point). */
__kernel void qconcat_part(__global const T* restrict x, __constant T* table, __global T* restrict y, const int n,
                           const int len_in, const int len_out, const int offset, const int inner) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int run = len_in * inner;
    const int o = i / run;
    const int r = i - o * run;
#ifdef HAS_TABLE
    y[(o * len_out + offset) * inner + r] = table[(uchar)x[i]];
#else
    y[(o * len_out + offset) * inner + r] = x[i];
#endif
}

/* Where (image, channel) i's pixels start: NCHW, one map after another; channels_last, the
 * channel's offset within the image's interleaved pixels (then a stride of `channels`). */
inline int gap_base(const int i, const int hw, const int channels, const int channels_last) {
    if (!channels_last) return i * hw;
    const int img = i / channels;
    return img * hw * channels + (i - img * channels);
}

/* QLinearGlobalAveragePool: one work-item per (image, channel); `hw` pixels `step` apart (1 for
 * NCHW, C for channels_last); an exact int sum, then round((sum - zx * hw) * scale) + zy, scale = xs / (ys * hw). */
__kernel void qgap(__global const T* restrict x, __global T* restrict y, const int nc, const int hw,
                   const int channels, const int channels_last, const float scale, const int zx, const float zy) {
    const int i = get_global_id(0);
    if (i >= nc) return;
    const int step = channels_last ? channels : 1;
    const int base = gap_base(i, hw, channels, channels_last);
    int sum = 0;
    for (int p = 0; p < hw; ++p)
        sum += (int)x[base + p * step];
    y[i] = qsat(qround((float)(sum - zx * hw) * scale) + zy);  /* rounded, then zy added: MlasRequantizeOutput */
}

/* The same with one work-group of GAP_GROUP items per (image, channel): each item sums every
 * GAP_GROUP-th pixel, then a tree in local memory (devices with dedicated local memory: a large
 * map, e.g. 112 x 112, is not left to nc work-items). */
#ifndef GAP_GROUP
#define GAP_GROUP 64
#endif
__kernel __attribute__((reqd_work_group_size(GAP_GROUP, 1, 1)))
void qgap_group(__global const T* restrict x, __global T* restrict y, const int nc, const int hw,
                const int channels, const int channels_last, const float scale, const int zx, const float zy) {
    __local int part[GAP_GROUP];
    const int i = get_group_id(0);
    const int t = get_local_id(0);
    const int step = channels_last ? channels : 1;
    const int base = i < nc ? gap_base(i, hw, channels, channels_last) : 0;
    int sum = 0;
    if (i < nc)
        for (int p = t; p < hw; p += GAP_GROUP)
            sum += (int)x[base + p * step];
    part[t] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = GAP_GROUP / 2; w > 0; w >>= 1) {
        if (t < w)
            part[t] += part[t + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0 && i < nc)
        y[i] = qsat(qround((float)(part[0] - zx * hw) * scale) + zy);
}

/* QLinearAveragePool over 1-D (H = 1) or 2-D windows, one work-item per output element: the
 * dequantized values summed in float in window order, divided by the count (the whole kernel
 * with count_include_pad, else the window clipped to the input), y = rint(avg / ys + zy). */
__kernel void qavgpool(__global const T* restrict x, __global T* restrict y, const float scale, const int zx,
                       const float ys, const float zy, const int n, const int C, const int H, const int W,
                       const int OH, const int OW, const int kh, const int kw, const int sh, const int sw,
                       const int ph, const int pw, const int count_include_pad) {
    const int i = get_global_id(0);
    if (i >= n) return;
#ifdef CHANNELS_LAST
    const int c = i % C;
    int t = i / C;
    const int ow = t % OW;
    t /= OW;
    const int oh = t % OH;
    const int img = t / OH;
    const int wstep = C;
    const __global T* xi = x + (long)img * H * W * C + c;
#else
    const int ow = i % OW;
    const int t = i / OW;
    const int oh = t % OH;
    const int plane = t / OH;  /* image * C + channel */
    const int wstep = 1;
    const __global T* xi = x + (long)plane * H * W;
#endif
    int h0 = oh * sh - ph, w0 = ow * sw - pw;
    const int h1 = min(h0 + kh, H), w1 = min(w0 + kw, W);
    h0 = max(h0, 0);
    w0 = max(w0, 0);
    float sum = 0.0f;
    for (int h = h0; h < h1; ++h) {
        const __global T* row = xi + (h * W) * wstep;
        for (int w = w0; w < w1; ++w)
            sum += (float)((int)row[w * wstep] - zx) * scale;
    }
    const int count = count_include_pad ? kh * kw : max((h1 - h0) * (w1 - w0), 1);
    y[i] = qsat(sum / (float)count / ys + zy);
}

/* QLinearSoftmax, one work-item per row of D elements `inner` apart: e = table[x - max + 255]
 * (onnxruntime's exp table), the sum in float in row order, y = rint(e * ysf / sum) + zy with
 * ysf = floor(1 / y_scale) (rounded before the zero point is added, as onnxruntime does). */
__kernel void qsoftmax(__global const T* restrict x, __global const float* restrict table, __global T* restrict y,
                       const int rows, const int D, const int inner, const float ysf, const float zy) {
    const int r = get_global_id(0);
    if (r >= rows) return;
    const int outer = r / inner;
    const int base = outer * D * inner + (r - outer * inner);
    int mx = (int)x[base];
    for (int j = 1; j < D; ++j)
        mx = max(mx, (int)x[base + j * inner]);
    float sum = 0.0f;
    for (int j = 0; j < D; ++j)
        sum += table[(int)x[base + j * inner] - mx + 255];
    for (int j = 0; j < D; ++j) {
        const float e = table[(int)x[base + j * inner] - mx + 255];
        y[base + j * inner] = qsat(qround((e * ysf) / sum) + zy);
    }
}
