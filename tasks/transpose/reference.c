/* transpose reference: y (cols x rows) = x (rows x cols) transposed, row-major. */
#include <math.h>
#include <stdint.h>

void reference(const double *x, double *y, int rows, int cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
}
