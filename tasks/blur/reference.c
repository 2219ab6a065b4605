/* blur reference: k x k cross-correlation with zero padding, same-size output, float64.
 * out[y][x] = sum_{i,j<k} filt[i*k+j] * img[y+i-k/2][x+j-k/2], terms outside the image are 0. */
#include <math.h>
#include <stdint.h>

void reference(const double *img, const double *filt, double *out, int h, int w, int k)
{
    const int r = k / 2;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            double s = 0.0;
            for (int i = 0; i < k; i++) {
                const int yy = y + i - r;
                if (yy < 0 || yy >= h) continue;
                for (int j = 0; j < k; j++) {
                    const int xx = x + j - r;
                    if (xx < 0 || xx >= w) continue;
                    s += filt[i * k + j] * img[(int64_t)yy * w + xx];
                }
            }
            out[(int64_t)y * w + x] = s;
        }
    }
}
