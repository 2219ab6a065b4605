/* rmsnorm reference: per row, ms = mean of the squares, y = x / sqrt(ms + 1e-6) * weight; float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *x, const double *weight, double *y, int tokens, int hidden)
{
    for (int64_t t = 0; t < tokens; t++) {
        const double *xr = x + t * hidden;
        double *yr = y + t * hidden;
        double ss = 0.0;
        for (int64_t i = 0; i < hidden; i++) ss += xr[i] * xr[i];
        const double scale = 1.0 / sqrt(ss / hidden + 1e-6);
        for (int64_t i = 0; i < hidden; i++) yr[i] = xr[i] * scale * weight[i];
    }
}
