/* axpb_rows reference: y[i][j] = scale[i] * x[i][j] + shift[j], float64. */
#include <stdint.h>

void reference(const double *x, const double *scale, const double *shift, double *y, int m, int n)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) y[i * n + j] = scale[i] * x[i * n + j] + shift[j];
}
