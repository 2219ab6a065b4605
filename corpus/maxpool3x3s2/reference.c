/* maxpool3x3s2 reference: window rows 2i-1..2i+1 and columns 2j-1..2j+1, the parts outside the
 * image ignored (every window holds its centre (2i, 2j), which is inside). */
#include <stdint.h>

void reference(const double *in, double *out, int planes, int h, int w)
{
    const int64_t oh = (h - 1) / 2 + 1, ow = (w - 1) / 2 + 1;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                const double *plane = in + p * h * w;
                double m = plane[2 * i * w + 2 * j];
                for (int64_t y = 2 * i - 1; y <= 2 * i + 1; y++)
                    for (int64_t x = 2 * j - 1; x <= 2 * j + 1; x++)
                        if (y >= 0 && y < h && x >= 0 && x < w && plane[y * w + x] > m) m = plane[y * w + x];
                out[(p * oh + i) * ow + j] = m;
            }
}
