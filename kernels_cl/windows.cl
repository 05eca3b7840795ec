/* Window functions and the mel filter bank: one work-item per output element.
 *   T     output float type (float, or double with USE_FP64)
 *   KIND  0 Hann, 1 Hamming, 2 Blackman
 * window: y[i] for i < size over the period N1 (size when periodic, size - 1 when symmetric).
 * mel: y[j, m] for j < dft_length / 2 + 1 spectrogram bins, m < M mel bins; edges[M + 2] are
 *      the integer spectrogram bins of the mel band edges (low, centre, high of band m at
 *      m, m + 1, m + 2): a triangle rising from low to 1 at centre and falling to 0 at high.
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define PI 3.141592653589793
#else
#define PI 3.14159265f
#endif
#ifndef T
#define T float
#endif
#ifndef KIND
#define KIND 0
#endif

__kernel void window(__global T* y, const int size, const int n1) {
    const int i = get_global_id(0);
    if (i >= size) return;
    const T a = (T)PI * (T)i / (T)n1; /* half the phase 2 pi i / N1 */
#if KIND == 0
    const T s = sin(a);
    y[i] = s * s;
#elif KIND == 1
    const T alpha = (T)25 / (T)46;
    y[i] = alpha - ((T)1 - alpha) * cos(2 * a);
#else
    y[i] = (T)0.42 - (T)0.5 * cos(2 * a) + (T)0.08 * cos(4 * a);
#endif
}

__kernel void mel(__global T* y, const int n_out, const int M, __global const int* restrict edges) {
    const int g = get_global_id(0);
    if (g >= n_out) return;
    const int m = g % M;
    const int j = g / M;
    const int lo = edges[m], c = edges[m + 1], hi = edges[m + 2];
    T v = 0;
    if (j == c) {
        v = 1;
    } else if (j > lo && j < c) {
        v = (T)(j - lo) / (T)(c - lo);
    } else if (j > c && j < hi) {
        v = (T)(hi - j) / (T)(hi - c);
    }
    y[g] = v;
}
