/* gather in float64: integer inputs arrive as int32_t and uint8_t. */
#include <stdint.h>

void reference(const double *x, const int32_t *idx, const uint8_t *mask, double *y, int n, int m)
{
    for (int i = 0; i < n; i++) y[i] = (mask[i] && idx[i] >= 0 && idx[i] < m) ? x[idx[i]] : 0.0;
}
