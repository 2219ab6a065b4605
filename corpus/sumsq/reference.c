/* sumsq reference: sum_i x[i]^2 in float64 (exact for the task's integer-valued inputs). */
#include <stdint.h>

void reference(const double *x, double *out, int n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    out[0] = s;
}
