/* gemm_nt reference: c[i][j] = sum_p a[i][p] * b[j][p] in float64 (a: m x k, b: n x k, both
 * row-major, so each output is the dot product of a row of a and a row of b). */
#include <stdint.h>

void reference(const double *a, const double *b, double *c, int m, int n, int k)
{
    for (int64_t i = 0; i < m; i++) {
        const double *ai = a + i * k;
        for (int64_t j = 0; j < n; j++) {
            const double *bj = b + j * k;
            double s = 0.0;
            for (int64_t p = 0; p < k; p++) s += ai[p] * bj[p];
            c[i * n + j] = s;
        }
    }
}
