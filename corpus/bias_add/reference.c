/* bias_add reference: y[r][c] = x[r][c] + bias[c], float64. */
#include <stdint.h>

void reference(const double *x, const double *bias, double *y, int rows, int cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] + bias[c];
}
