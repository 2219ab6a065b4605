/* histogram reference: 256 bins of u8 values. */
#include <math.h>
#include <stdint.h>

void reference(const uint8_t *x, int32_t *bins, int n)
{
    for (int b = 0; b < 256; b++) bins[b] = 0;
    for (int64_t i = 0; i < n; i++) bins[x[i]]++;
}
