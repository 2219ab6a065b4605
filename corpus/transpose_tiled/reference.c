/* transpose_tiled reference: out (width x height) = in (height x width) transposed. */
#include <stdint.h>

void reference(const double *in, double *out, int height, int width)
{
    for (int64_t r = 0; r < height; r++)
        for (int64_t c = 0; c < width; c++) out[c * height + r] = in[r * width + c];
}
