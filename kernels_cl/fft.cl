/* Mixed-radix Stockham FFT (autosorting: no bit reversal) over a batch of complex rows
 * [batch, n] (re, im interleaved), one launch per radix R of n's factorisation (2..16), one
 * work-item per R-point butterfly; the load and store kernels move the ONNX layouts in and out.
 *   T        float type (float, or double with USE_FP64)
 *   INVERSE  e^{+i...} twiddles (the table holds e^{-2 pi i q / n}; its sines are negated)
 *   CIN      values per input element: 1 real, 2 complex
 *   IRFFT    fft_load extends a one-sided spectrum to its Hermitian full length
 *   COUT     values per output element of fft_store: 2 complex, 1 the real part (irfft)
 *   R        the radix of one fft_pass launch (2..16)
 * Pass (Govindaraju et al., "High performance discrete Fourier transforms on graphics
 * processors", 2008): item j of n / R reads src[j + r n / R], twiddles them by
 * e^{-2 pi i (j mod Ns) r / (Ns R)}, takes their R-point DFT and writes dst[expand(j) + k Ns],
 * expand(j) = (j / Ns) Ns R + j mod Ns; Ns is the product of the radices before.
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef CIN
#define CIN 1
#endif
#ifndef COUT
#define COUT 2
#endif

#ifdef INVERSE
#define TW_IM(tw, q) (-(tw)[2 * (q) + 1])
#else
#define TW_IM(tw, q) ((tw)[2 * (q) + 1])
#endif

/* R (the radix) is a define, so the butterfly's loops unroll and its values stay in registers */
#ifndef R
#define R 2
#endif

/* multiply by -i (forward) or +i (inverse) */
#ifdef INVERSE
#define ROT(re, im, or_, oi) { or_ = -(im); oi = (re); }
#define SIGN (T)1
#else
#define ROT(re, im, or_, oi) { or_ = (im); oi = -(re); }
#define SIGN (T)-1
#endif

/* the R-point DFT of v into y: radix 2, 4 and 8 as fixed butterflies (no table, few
 * multiplies), other radices as the direct sum over the table's e^{-2 pi i r k / R} = tw[rk per] */
inline void butterfly(const T* vr, const T* vi, T* yr, T* yi, __global const T* restrict tw, const int per) {
#if R == 2
    yr[0] = vr[0] + vr[1]; yi[0] = vi[0] + vi[1];
    yr[1] = vr[0] - vr[1]; yi[1] = vi[0] - vi[1];
#elif R == 4 || R == 8
    /* the 4-point DFTs of the even and (R == 8) odd samples */
    const int S = R / 4;
    T er[4], ei[4], orr[4], oi[4];
    for (int h = 0; h < S; ++h) {
        const T t0r = vr[h] + vr[h + 2 * S], t0i = vi[h] + vi[h + 2 * S];
        const T t1r = vr[h] - vr[h + 2 * S], t1i = vi[h] - vi[h + 2 * S];
        const T t2r = vr[h + S] + vr[h + 3 * S], t2i = vi[h + S] + vi[h + 3 * S];
        T t3r, t3i;
        ROT(vr[h + S] - vr[h + 3 * S], vi[h + S] - vi[h + 3 * S], t3r, t3i);
        T* fr = h == 0 ? er : orr;
        T* fi = h == 0 ? ei : oi;
        fr[0] = t0r + t2r; fi[0] = t0i + t2i;
        fr[1] = t1r + t3r; fi[1] = t1i + t3i;
        fr[2] = t0r - t2r; fi[2] = t0i - t2i;
        fr[3] = t1r - t3r; fi[3] = t1i - t3i;
    }
#if R == 4
    for (int k = 0; k < 4; ++k) { yr[k] = er[k]; yi[k] = ei[k]; }
#else
    /* y[k] = E[k] + W^k O[k], y[k + 4] = E[k] - W^k O[k], W = e^{-+ i pi / 4} */
    const T h = (T)0.70710678118654752440;
    T wr[4], wi[4];
    wr[0] = orr[0]; wi[0] = oi[0];
    wr[1] = h * (orr[1] - SIGN * oi[1]); wi[1] = h * (oi[1] + SIGN * orr[1]);
    ROT(orr[2], oi[2], wr[2], wi[2]);
    wr[3] = h * (-orr[3] - SIGN * oi[3]); wi[3] = h * (-oi[3] + SIGN * orr[3]);
    for (int k = 0; k < 4; ++k) {
        yr[k] = er[k] + wr[k]; yi[k] = ei[k] + wi[k];
        yr[k + 4] = er[k] - wr[k]; yi[k + 4] = ei[k] - wi[k];
    }
#endif
#else
    for (int k = 0; k < R; ++k) {
        T ar = 0, ai = 0;
        int m = 0; /* (r * k) mod R */
        for (int r = 0; r < R; ++r) {
            const int q = m * per;
            const T c = tw[2 * q], s = TW_IM(tw, q);
            ar += vr[r] * c - vi[r] * s;
            ai += vr[r] * s + vi[r] * c;
            m += k;
            if (m >= R) m -= R;
        }
        yr[k] = ar;
        yi[k] = ai;
    }
#endif
}

__kernel void fft_pass(__global const T* src, __global T* dst, __global const T* restrict tw, const int n,
                       const int Ns, const int n_items) {
    const int g = get_global_id(0);
    if (g >= n_items) return;
    const int per = n / R;
    const int b = g / per, j = g % per;
    const long row = (long)b * n * 2;
    const int jn = j % Ns;
    const int step = n / (Ns * R);
    T vr[R], vi[R];
    for (int r = 0; r < R; ++r) {
        const long at = row + 2 * (long)(j + r * per);
        const T xr = src[at], xi = src[at + 1];
        const int q = jn * r * step; /* < n */
        const T c = tw[2 * q], s = TW_IM(tw, q);
        vr[r] = xr * c - xi * s;
        vi[r] = xr * s + xi * c;
    }
    const int out0 = (j / Ns) * Ns * R + jn;
    T yr[R], yi[R];
    butterfly(vr, vi, yr, yi, tw, per);
    for (int k = 0; k < R; ++k) {
        const long at = row + 2 * (long)(out0 + k * Ns);
        dst[at] = yr[k];
        dst[at + 1] = yi[k];
    }
}

/* DFT input [outer, L_in, inner, CIN] -> rows [outer * inner, n]: zero padding past lim
 * samples (dims = [L_in, inner, n, lim]); IRFFT: the Hermitian extension of the first lim bins
 * (imaginary parts of bin 0 and bin n / 2 dropped, as numpy's irfft). */
__kernel void fft_load(__global const T* x, __global T* rows, const int n_items, __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n_items) return;
    const int L_in = d[0], inner = d[1], n = d[2], lim = d[3];
    const int t = g % n;
    const int b = g / n;
    const int i = b % inner, o = b / inner;
#ifdef IRFFT
    const int mirrored = 2 * t > n;
    const int k = mirrored ? n - t : t;
    const int edge = k == 0 || 2 * k == n;
#else
    const int k = t, mirrored = 0, edge = 0;
#endif
    T re = 0, im = 0;
    if (k < lim) {
        const long at = ((long)o * L_in + k) * inner + i;
        re = x[at * CIN];
#if CIN == 2
        im = edge ? (T)0 : x[at * CIN + 1];
#endif
    }
    rows[2 * (long)g] = re;
    rows[2 * (long)g + 1] = mirrored ? -im : im;
}

/* STFT frames: rows [B * frames, n] = window[t] * signal[b, f * step + t] (zeros past the end);
 * dims = [L, frames, n, step] */
__kernel void stft_load(__global const T* x, __global const T* win, __global T* rows, const int n_items,
                        __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n_items) return;
    const int L = d[0], frames = d[1], n = d[2], step = d[3];
    const int t = g % n;
    const int r = g / n;
    const int f = r % frames, b = r / frames;
    const int s = f * step + t;
    T re = 0, im = 0;
    if (s < L) {
#ifdef WINDOW
        const T w = win[t];
#else
        const T w = (T)1;
#endif
        const long at = (long)b * L + s;
        re = w * x[at * CIN];
#if CIN == 2
        im = w * x[at * CIN + 1];
#endif
    }
    rows[2 * (long)g] = re;
    rows[2 * (long)g + 1] = im;
}

/* rows [outer * inner, n] -> output [outer, L_out, inner, COUT] (bins k < L_out), times scale;
 * COUT 1 keeps the real part (irfft). dims = [L_out, inner, n] */
__kernel void fft_store(__global const T* rows, __global T* y, const int n_items, const T scale,
                        __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n_items) return;
    const int L_out = d[0], inner = d[1], n = d[2];
    const int i = g % inner;
    const int r = g / inner;
    const int k = r % L_out, o = r / L_out;
    const long at = 2 * (((long)o * inner + i) * n + k);
#if COUT == 1
    y[g] = rows[at] * scale;
#else
    y[2 * (long)g] = rows[at] * scale;
    y[2 * (long)g + 1] = rows[at + 1] * scale;
#endif
}
