/* col_mean reference: the mean of each column, float64. */
#include <stdint.h>

void reference(const double *x, double *mean, int nrows, int ncols)
{
    for (int64_t c = 0; c < ncols; c++) mean[c] = 0.0;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t c = 0; c < ncols; c++) mean[c] += x[r * ncols + c];
    for (int64_t c = 0; c < ncols; c++) mean[c] /= nrows;
}
