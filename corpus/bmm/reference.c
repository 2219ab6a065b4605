/* bmm reference: C[b] = A[b] * B[b] in float64, batches contiguous, row-major. */
#include <stdint.h>

void reference(const double *A, const double *B, double *C, int batch, int M, int N, int K)
{
    for (int64_t b = 0; b < batch; b++) {
        const double *a = A + b * M * K, *bb = B + b * K * N;
        double *c = C + b * M * N;
        for (int64_t i = 0; i < M; i++) {
            double *ci = c + i * N;
            for (int64_t j = 0; j < N; j++) ci[j] = 0.0;
            for (int64_t p = 0; p < K; p++) {
                const double av = a[i * K + p];
                const double *bp = bb + p * N;
                for (int64_t j = 0; j < N; j++) ci[j] += av * bp[j];
            }
        }
    }
}
