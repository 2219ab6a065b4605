/* bf16_gemm_nt reference: C[i][j] = sum_p A[i][p] * B[j][p] in float64 on the bf16-rounded
 * inputs (A: M x K, B: N x K, row-major). */
#include <stdint.h>

void reference(const double *A, const double *B, double *C, int M, int N, int K)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t p = 0; p < K; p++) s += A[i * K + p] * B[j * K + p];
            C[i * N + j] = s;
        }
}
