/* gemm_tn reference: out[i][j] = sum_p lhs[p][i] * rhs[p][j] in float64 (lhs: K x M, rhs: K x N,
 * row-major). p-i-j order: the inner loop streams a row of rhs and a row of out. */
#include <stdint.h>

void reference(const double *lhs, const double *rhs, double *out, int M, int N, int K)
{
    for (int64_t t = 0; t < (int64_t)M * N; t++) out[t] = 0.0;
    for (int64_t p = 0; p < K; p++) {
        const double *lp = lhs + p * M, *rp = rhs + p * N;
        for (int64_t i = 0; i < M; i++) {
            const double l = lp[i];
            double *oi = out + i * N;
            for (int64_t j = 0; j < N; j++) oi[j] += l * rp[j];
        }
    }
}
