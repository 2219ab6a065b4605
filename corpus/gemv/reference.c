/* gemv reference: res[r] = sum_c mat[r][c] * vec[c] in float64. */
#include <stdint.h>

void reference(const double *mat, const double *vec, double *res, int nrows, int ncols)
{
    for (int64_t r = 0; r < nrows; r++) {
        const double *row = mat + r * ncols;
        double s = 0.0;
        for (int64_t c = 0; c < ncols; c++) s += row[c] * vec[c];
        res[r] = s;
    }
}
