/* The last step of a conv computed by regions (lower/conv_regions.py): the GEMMs wrote each
 * output region's pixels one after another (region order, row-major inside a region); this puts
 * every pixel at its place in Y: Y[row][pix[n]] = S[row][n], row = image * Cout + channel.
 * gsize = (ceil(NPIX / 16) * 16, rows). YH: Y stored as half (storage.h; S is float). */
#include "storage.h"

__kernel void scatter_pixels(__global const float* restrict S, __global const int* restrict pix,
                             __global ST_T(YH)* restrict Y, const int NPIX, const int ROWS)
{
    const int n = get_global_id(0), row = get_global_id(1);
    if (n >= NPIX || row >= ROWS)
        return;
    ST_ST(YH, Y, (size_t)row * NPIX + pix[n], S[(size_t)row * NPIX + n]);
}
