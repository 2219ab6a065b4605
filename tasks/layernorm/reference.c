/* layernorm reference: per row, mean and biased variance (two passes), eps = 1e-5,
 * then y = (x - mean) / sqrt(var + eps) * gamma + beta; all in float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *x, const double *gamma, const double *beta, double *y, int rows, int cols)
{
    const double eps = 1e-5;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double *yr = y + r * cols;
        double mean = 0.0;
        for (int64_t c = 0; c < cols; c++) mean += xr[c];
        mean /= cols;
        double var = 0.0;
        for (int64_t c = 0; c < cols; c++) var += (xr[c] - mean) * (xr[c] - mean);
        var /= cols;
        const double rstd = 1.0 / sqrt(var + eps);
        for (int64_t c = 0; c < cols; c++) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    }
}
