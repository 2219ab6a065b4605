/* matmul reference: c = a * b in float64, row-major; i-p-j order so the inner loop streams a
 * row of b and a row of c. */
#include <stdint.h>

void reference(const double *a, const double *b, double *c, int m, int n, int k)
{
    for (int64_t i = 0; i < m; i++) {
        double *ci = c + i * n;
        for (int64_t j = 0; j < n; j++) ci[j] = 0.0;
        for (int64_t p = 0; p < k; p++) {
            const double av = a[i * k + p];
            const double *bp = b + p * n;
            for (int64_t j = 0; j < n; j++) ci[j] += av * bp[j];
        }
    }
}
