/* reduce_sum reference: the sum of n values in float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *x, double *out, int n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    out[0] = s;
}
