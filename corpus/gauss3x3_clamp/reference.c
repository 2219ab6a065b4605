/* gauss3x3_clamp reference: dst[y][x] = sum_{dy,dx in -1..1} w(dy) w(dx) src[clamp(y+dy)][clamp(x+dx)] / 16,
 * with w(0) = 2 and w(+-1) = 1, indices clamped into the image; float64. */
#include <stdint.h>

static int64_t clamp_to(int64_t v, int64_t n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }

void reference(const double *src, double *dst, int height, int width)
{
    static const double w[3] = {1.0, 2.0, 1.0};
    for (int64_t y = 0; y < height; y++)
        for (int64_t x = 0; x < width; x++) {
            double s = 0.0;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++)
                    s += w[dy + 1] * w[dx + 1] * src[clamp_to(y + dy, height) * width + clamp_to(x + dx, width)];
            dst[y * width + x] = s / 16.0;
        }
}
