/* softmax_warp reference: row-wise softmax, max-subtracted, float64. */
#include <math.h>
#include <stdint.h>

void reference(const double *src, double *dst, int num_rows, int row_len)
{
    for (int64_t r = 0; r < num_rows; r++) {
        const double *s = src + r * row_len;
        double *d = dst + r * row_len;
        double mx = -INFINITY;
        for (int64_t c = 0; c < row_len; c++) mx = s[c] > mx ? s[c] : mx;
        double sum = 0.0;
        for (int64_t c = 0; c < row_len; c++) sum += exp(s[c] - mx);
        for (int64_t c = 0; c < row_len; c++) d[c] = exp(s[c] - mx) / sum;
    }
}
