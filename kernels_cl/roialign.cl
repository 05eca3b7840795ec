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

__kernel void roi_align(__global const T* x, __global const T* rois, __global const TI* bidx, __global T* y,
                        const int n_out, const int C, const int H, const int W, const int PH, const int PW,
                        const int sampling, const float scale, const int N) {
    const int i = get_global_id(0);
    if (i >= n_out) return;
    const int pw = i % PW;
    const int ph = (i / PW) % PH;
    const int c = (i / (PW * PH)) % C;
    const int r = i / (PW * PH * C);
    __global const T* roi = rois + (long)r * 4;
#ifdef HALF
    const T off = (T)0.5f;
#else
    const T off = (T)0;
#endif
    const T sw = (T)roi[0] * scale - off, sh = (T)roi[1] * scale - off;
    T rw = (T)roi[2] * scale - off - sw, rh = (T)roi[3] * scale - off - sh;
#ifndef HALF
    rw = fmax(rw, (T)1);
    rh = fmax(rh, (T)1);
#endif
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
            T v1 = (T)0, v2 = (T)0, v3 = (T)0, v4 = (T)0, w1 = (T)0, w2 = (T)0, w3 = (T)0, w4 = (T)0;
            if (!(yy < (T)(-1) || yy > H || xx < (T)(-1) || xx > W)) {
                T py = fmax(yy, (T)0), px = fmax(xx, (T)0);
                int y0 = (int)py, x0 = (int)px, y1, x1;
                if (y0 >= H - 1) {
                    y1 = y0 = H - 1;
                    py = y0;
                } else {
                    y1 = y0 + 1;
                }
                if (x0 >= W - 1) {
                    x1 = x0 = W - 1;
                    px = x0;
                } else {
                    x1 = x0 + 1;
                }
                const T ly = py - y0, lx = px - x0, hy = (T)1 - ly, hx = (T)1 - lx;
                w1 = hy * hx;
                w2 = hy * lx;
                w3 = ly * hx;
                w4 = ly * lx;
                v1 = (T)xp[y0 * W + x0];
                v2 = (T)xp[y0 * W + x1];
                v3 = (T)xp[y1 * W + x0];
                v4 = (T)xp[y1 * W + x1];
            }
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
