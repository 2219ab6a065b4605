/* softmax reference: row-wise, max-subtracted, in float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *x, double *y, int rows, int cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double *yr = y + r * cols;
        double mx = -INFINITY;
        for (int64_t c = 0; c < cols; c++) mx = xr[c] > mx ? xr[c] : mx;
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            yr[c] = exp(xr[c] - mx);
            sum += yr[c];
        }
        for (int64_t c = 0; c < cols; c++) yr[c] /= sum;
    }
}
