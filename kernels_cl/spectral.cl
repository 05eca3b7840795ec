/* DFT and STFT as direct sums (lengths the FFT of fft.cl does not take: short, or with a prime
 * factor above 13): one work-item per output bin (or output sample), twiddles read from a table
 * at the exact integer phase (k * t) mod n, so the angle never grows with the length.
 *   T        float type (float or double; USE_FP64 for double)
 *   CIN      values per input element: 1 real, 2 complex (re, im interleaved)
 *   INVERSE  e^{+i...} and a 1/n scale (dft);  WINDOW  stft multiplies each frame by win[]
 * dft  dims = [L_in, inner, L_out, n, lim]: input [outer, L_in, inner, CIN], output
 *      [outer, L_out, inner, 2]; lim = min(L_in, n) input samples enter the sum (zero padding
 *      past L_in, truncation past n).
 * irfft dims = [L_in, inner, L_out, n, lim]: one-sided input [outer, L_in, inner, CIN] (the
 *      first lim = min(L_in, n / 2 + 1) bins used), real output [outer, n, inner, 1].
 * stft dims = [L, frames, K, n, step]: signal [B, L, CIN], output [B, frames, K, 2].
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

/* cos and sin of 2 pi m / n for 0 <= m < n, from the table [n][cos, -sin] (lower/fft.twiddles:
 * float64-computed, quarter and half turns exact, so a real input's Nyquist bin has an
 * imaginary part of exactly 0, as an FFT gives) */
inline T twiddle(__global const T* restrict tw, int m, T* s) {
    *s = -tw[2 * m + 1];
    return tw[2 * m];
}

/* the complex value at element offset `at` (in elements of CIN values) */
inline T load_re(__global const T* x, long at) { return x[at * CIN]; }
inline T load_im(__global const T* x, long at) {
#if CIN == 2
    return x[at * CIN + 1];
#else
    return (T)0;
#endif
}

__kernel void dft(__global const T* x, __global const T* restrict tw, __global T* y, const int n_out,
                  __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n_out) return;
    const int L_in = d[0], inner = d[1], L_out = d[2], n = d[3], lim = d[4];
    const int i = g % inner;
    const int r = g / inner;
    const int k = r % L_out;
    const int o = r / L_out;
    const long base = (long)o * L_in * inner + i;
    T re = 0, im = 0;
    int m = 0; /* (k * t) mod n, stepped by k */
    for (int t = 0; t < lim; ++t) {
        T s;
        const T c = twiddle(tw, m, &s);
        const long at = base + (long)t * inner;
        const T xr = load_re(x, at), xi = load_im(x, at);
#ifdef INVERSE
        re += xr * c - xi * s;
        im += xi * c + xr * s;
#else
        re += xr * c + xi * s;
        im += xi * c - xr * s;
#endif
        m += k;
        if (m >= n) m -= n;
    }
#ifdef INVERSE
    re /= (T)n;
    im /= (T)n;
#endif
    y[2 * (long)g] = re;
    y[2 * (long)g + 1] = im;
}

/* inverse of a one-sided spectrum (Hermitian extension): y[t] = (1/n) sum_k w_k Re(X[k] e^{+i...}),
 * w = 1 for bin 0 and (n even) bin n/2, whose imaginary parts are dropped, else 2. */
__kernel void irfft(__global const T* x, __global const T* restrict tw, __global T* y, const int n_out,
                    __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n_out) return;
    const int L_in = d[0], inner = d[1], n = d[3], lim = d[4];
    const int i = g % inner;
    const int r = g / inner;
    const int t = r % n;
    const int o = r / n;
    const long base = (long)o * L_in * inner + i;
    T acc = 0;
    int m = 0; /* (k * t) mod n, stepped by t */
    for (int k = 0; k < lim; ++k) {
        T s;
        const T c = twiddle(tw, m, &s);
        const long at = base + (long)k * inner;
        const int edge = k == 0 || 2 * k == n;
        const T xr = load_re(x, at), xi = edge ? (T)0 : load_im(x, at);
        acc += (edge ? (T)1 : (T)2) * (xr * c - xi * s);
        m += t;
        if (m >= n) m -= n;
    }
    y[g] = acc / (T)n;
}

__kernel void stft(__global const T* x, __global const T* win, __global const T* restrict tw, __global T* y,
                   const int n_out, __global const int* restrict d) {
    const int g = get_global_id(0);
    if (g >= n_out) return;
    const int L = d[0], frames = d[1], K = d[2], n = d[3], step = d[4];
    const int k = g % K;
    const int r = g / K;
    const int f = r % frames;
    const int b = r / frames;
    const int start = f * step;
    const int lim = min(n, L - start); /* a frame past the signal's end reads zeros */
    const long base = (long)b * L + start;
    T re = 0, im = 0;
    int m = 0;
    for (int t = 0; t < lim; ++t) {
        T s;
        const T c = twiddle(tw, m, &s);
#ifdef WINDOW
        const T w = win[t];
#else
        const T w = (T)1;
#endif
        const T xr = w * load_re(x, base + t), xi = w * load_im(x, base + t);
        re += xr * c + xi * s;
        im += xi * c - xr * s;
        m += k;
        if (m >= n) m -= n;
    }
    y[2 * (long)g] = re;
    y[2 * (long)g + 1] = im;
}
