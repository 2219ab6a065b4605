/* maxpool2x2 reference: y[c][i][j] = max of x[c][2i..2i+1][2j..2j+1]; the output is
 * (height/2) x (width/2) per channel (floor). */
#include <stdint.h>

void reference(const double *x, double *y, int channels, int height, int width)
{
    const int64_t oh = height / 2, ow = width / 2;
    for (int64_t c = 0; c < channels; c++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                const double *p = x + (c * height + 2 * i) * width + 2 * j;
                double m = p[0];
                if (p[1] > m) m = p[1];
                if (p[width] > m) m = p[width];
                if (p[width + 1] > m) m = p[width + 1];
                y[(c * oh + i) * ow + j] = m;
            }
}
