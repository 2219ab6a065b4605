/* dot reference: sum_i x[i] * y[i] in float64 (exact for the task's integer-valued inputs). */
#include <stdint.h>

void reference(const double *x, const double *y, double *result, int n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    result[0] = s;
}
