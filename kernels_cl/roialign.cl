/* RoiAlign: one work-item per output element (roi, c, ph, pw), as onnx.reference (and
 * onnxruntime) compute it: roi_bin_grid samples per bin, each bilinear over 4 pixels (a sample
 * beyond one pixel outside the map counts 0); avg sums them, max takes the largest weighted tap.
 *   T  float type;  MAXMODE  max instead of avg;  HALF  half_pixel (else output_half_pixel)
 * args: X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] (TI). */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef TI
#define TI long
#endif

/* A roi's start (sw, sh) and size (rw, rh) on the feature map: half_pixel shifts by half a
 * pixel, output_half_pixel (the legacy mode) instead clamps the size to at least one pixel. */
inline void roi_window(__global const T* roi, const float scale, T* sw, T* sh, T* rw, T* rh) {
#ifdef HALF
    const T off = (T)0.5f;
#else
    const T off = (T)0;
#endif
    *sw = (T)roi[0] * scale - off;
    *sh = (T)roi[1] * scale - off;
    *rw = (T)roi[2] * scale - off - *sw;
    *rh = (T)roi[3] * scale - off - *sh;
#ifndef HALF
    *rw = fmax(*rw, (T)1);
    *rh = fmax(*rh, (T)1);
#endif
}

__kernel void roi_align(__global const T* x, __global const T* rois, __global const TI* bidx, __global T* y,
                        const int R, const int C, const int H, const int W, const int PH, const int PW,
                        const int sampling, const float scale, const int N) {
    /* gsize = (PH * PW, C, R): a work-group's items share their roi and channel (loops of one
     * trip count) and sample neighbouring bins of one plane (their taps share cache lines; items
     * over channels read a plane apart each: 2.4x onnxruntime's time at 256 channels, 7 x 7) */
    const int bin = get_global_id(0), c = get_global_id(1), r = get_global_id(2);
    if (c >= C || bin >= PH * PW || r >= R) return;
    const int ph = bin / PW, pw = bin - ph * PW;
    const int i = ((r * C + c) * PH + ph) * PW + pw;
    T sw, sh, rw, rh;
    roi_window(rois + (long)r * 4, scale, &sw, &sh, &rw, &rh);
    const T bh = rh / PH, bw = rw / PW;
    const int gh = sampling > 0 ? sampling : (int)ceil(rh / PH);
    const int gw = sampling > 0 ? sampling : (int)ceil(rw / PW);
    const long b = (long)bidx[r];
    if (b < 0 || b >= N) {
        y[i] = (T)0;
        return;
    }
    __global const T* xp = x + (b * C + c) * (long)H * W;
    T acc = (T)0;
#ifdef MAXMODE
    int first = 1;
#endif
    for (int iy = 0; iy < gh; ++iy) {
        const T yy = sh + ph * bh + (iy + (T)0.5f) * bh / gh;
        for (int ix = 0; ix < gw; ++ix) {
            const T xx = sw + pw * bw + (ix + (T)0.5f) * bw / gw;
            /* branch-free (vectorisable across work-items): clamped into the map, as the
             * reference's y_low >= H - 1 rule does; a sample beyond one pixel outside reads 0 */
            const int inside = !(yy < (T)(-1) || yy > H || xx < (T)(-1) || xx > W);
            const T py = clamp(yy, (T)0, (T)(H - 1)), px = clamp(xx, (T)0, (T)(W - 1));
            const int y0 = (int)py, x0 = (int)px, y1 = min(y0 + 1, H - 1), x1 = min(x0 + 1, W - 1);
            const T ly = py - y0, lx = px - x0, hy = (T)1 - ly, hx = (T)1 - lx;
            const T w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
            const T v1 = inside ? (T)xp[y0 * W + x0] : (T)0, v2 = inside ? (T)xp[y0 * W + x1] : (T)0;
            const T v3 = inside ? (T)xp[y1 * W + x0] : (T)0, v4 = inside ? (T)xp[y1 * W + x1] : (T)0;
#ifdef MAXMODE
            const T v = fmax(fmax(w1 * v1, w2 * v2), fmax(w3 * v3, w4 * v4));
            acc = first ? v : fmax(acc, v);
            first = 0;
#else
            acc += w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4;
#endif
        }
    }
#ifndef MAXMODE
    acc /= (T)max(gh * gw, 1);
#endif
    y[i] = (T)acc;
}

/* MaxRoiPool: one work-item per output element (roi, c, ph, pw), as onnxruntime (Caffe's ROI
 * pooling) computes it: the roi's corners rounded (half away from zero) after spatial_scale, at
 * least 1 x 1; bin [floor(p * size / P), ceil((p + 1) * size / P)) clipped to the map; the max
 * over it, 0 for an empty bin.
 * args: X [N, C, H, W], rois [R, 5] (batch index, x1, y1, x2, y2) */
__kernel void max_roi_pool(__global const T* x, __global const T* rois, __global T* y, const int R, const int C,
                           const int H, const int W, const int PH, const int PW, const float scale, const int N) {
    const int c = get_global_id(0), bin = get_global_id(1), r = get_global_id(2);
    if (c >= C || bin >= PH * PW || r >= R) return;
    const int ph = bin / PW, pw = bin - ph * PW;
    __global const T* roi = rois + (long)r * 5;
    const int b = (int)roi[0];
    const int sw = (int)round((float)roi[1] * scale), sh = (int)round((float)roi[2] * scale);
    const int ew = (int)round((float)roi[3] * scale), eh = (int)round((float)roi[4] * scale);
    const int rh = max(eh - sh + 1, 1), rw = max(ew - sw + 1, 1);
    const float bh = (float)rh / (float)PH, bw = (float)rw / (float)PW;
    const int h0 = min(max((int)floor((float)ph * bh) + sh, 0), H);
    const int h1 = min(max((int)ceil((float)(ph + 1) * bh) + sh, 0), H);
    const int w0 = min(max((int)floor((float)pw * bw) + sw, 0), W);
    const int w1 = min(max((int)ceil((float)(pw + 1) * bw) + sw, 0), W);
    const long out = (((long)r * C + c) * PH + ph) * PW + pw;
    if (h1 <= h0 || w1 <= w0 || b < 0 || b >= N) {
        y[out] = (T)0;
        return;
    }
    __global const T* xc = x + ((long)b * C + c) * H * W;
    T m = xc[(long)h0 * W + w0];
    for (int hh = h0; hh < h1; ++hh)
        for (int ww = w0; ww < w1; ++ww) m = fmax(m, xc[(long)hh * W + ww]);
    y[out] = m;
}

/* RoiAlign with a fixed sampling_ratio, in two launches: roi_align_taps finds each (roi, bin,
 * sample)'s four taps once (plane offsets, -1 outside the map, and bilinear weights: the
 * arithmetic of roi_align), roi_align_sum then weighs them per channel; every channel of a bin
 * would otherwise find them again (onnxruntime's pre_calc). taps [R, PH * PW, S, 4] (S = SR * SR) */
#ifdef SR
__kernel void roi_align_taps(__global const T* rois, __global int* pos, __global T* wt, const int R, const int H,
                             const int W, const int PH, const int PW, const float scale) {
    const int g = get_global_id(0);
    if (g >= R * PH * PW * SR * SR) return;
    const int s = g % (SR * SR), rb = g / (SR * SR);
    const int r = rb / (PH * PW), bin = rb - r * PH * PW;
    const int ph = bin / PW, pw = bin - ph * PW, iy = s / SR, ix = s - iy * SR;
    T sw, sh, rw, rh;
    roi_window(rois + (long)r * 4, scale, &sw, &sh, &rw, &rh);
    const T bh = rh / PH, bw = rw / PW;
    const int gh = SR, gw = SR;
    const T yy = sh + ph * bh + (iy + (T)0.5f) * bh / gh;
    const T xx = sw + pw * bw + (ix + (T)0.5f) * bw / gw;
    const int inside = !(yy < (T)(-1) || yy > H || xx < (T)(-1) || xx > W);
    const T py = clamp(yy, (T)0, (T)(H - 1)), px = clamp(xx, (T)0, (T)(W - 1));
    const int y0 = (int)py, x0 = (int)px, y1 = min(y0 + 1, H - 1), x1 = min(x0 + 1, W - 1);
    const T ly = py - y0, lx = px - x0, hy = (T)1 - ly, hx = (T)1 - lx;
    __global int* p = pos + (long)g * 4;
    __global T* w = wt + (long)g * 4;
    p[0] = inside ? y0 * W + x0 : -1; p[1] = inside ? y0 * W + x1 : -1;
    p[2] = inside ? y1 * W + x0 : -1; p[3] = inside ? y1 * W + x1 : -1;
    w[0] = hy * hx; w[1] = hy * lx; w[2] = ly * hx; w[3] = ly * lx;
}

__kernel void roi_align_sum(__global const T* x, __global const TI* bidx, __global const int* pos,
                            __global const T* wt, __global T* y, const int R, const int C, const int H, const int W,
                            const int PH, const int PW, const int N) {
    const int bin = get_global_id(0), c = get_global_id(1), r = get_global_id(2);
    if (c >= C || bin >= PH * PW || r >= R) return;
    const int i = (r * C + c) * PH * PW + bin;
    const long b = (long)bidx[r];
    if (b < 0 || b >= N) {
        y[i] = (T)0;
        return;
    }
    __global const T* xp = x + (b * C + c) * (long)H * W;
    __global const int* p = pos + ((long)r * PH * PW + bin) * SR * SR * 4;
    __global const T* w = wt + ((long)r * PH * PW + bin) * SR * SR * 4;
    T acc = (T)0;
    for (int s = 0; s < SR * SR; ++s, p += 4, w += 4) {
        const T v1 = p[0] >= 0 ? (T)xp[p[0]] : (T)0, v2 = p[1] >= 0 ? (T)xp[p[1]] : (T)0;
        const T v3 = p[2] >= 0 ? (T)xp[p[2]] : (T)0, v4 = p[3] >= 0 ? (T)xp[p[3]] : (T)0;
#ifdef MAXMODE
        const T v = fmax(fmax(w[0] * v1, w[1] * v2), fmax(w[2] * v3, w[3] * v4));
        acc = s == 0 ? v : fmax(acc, v);
#else
        acc += w[0] * v1 + w[1] * v2 + w[2] * v3 + w[3] * v4;
#endif
    }
#ifndef MAXMODE
    acc /= (T)(SR * SR);
#endif
    y[i] = (T)acc;
}
#endif
