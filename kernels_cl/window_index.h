/* Output positions of the window kernels (conv_transpose.cl, lppool.cl): one work-item per
 * output element, SD spatial dims, geo (int32) = in[SD], out[SD], kernel[SD], stride[SD],
 * dilation[SD], pad_begin[SD].
 *
 * window_position: the spatial position o[SD] of flat output element i; returns the rest of
 * the index (batch x channel) and sets *isz and *ksz to the input plane and kernel window sizes.
 * SD must be defined before inclusion. */
#ifndef WINDOW_INDEX_H
#define WINDOW_INDEX_H

inline int window_position(int i, __global const int* restrict geo, int* o, int* isz, int* ksz) {
    int rem = i;
    *isz = 1;
    *ksz = 1;
    for (int k = SD - 1; k >= 0; --k) {
        o[k] = rem % geo[SD + k];
        rem /= geo[SD + k];
        *isz *= geo[k];
        *ksz *= geo[2 * SD + k];
    }
    return rem;
}

#endif
