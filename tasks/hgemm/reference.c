/* hgemm reference: C = A*B in float64 on the bf16-rounded inputs, row-major. The kernel
 * rounds its f32 accumulator to bf16 at the end; the tolerance covers that rounding.
 * i-k-j loop order so the inner loop streams a row of B and a row of C. */
#include <math.h>
#include <stdint.h>

void reference(const double *A, const double *B, double *C, int M, int N, int K)
{
    for (int64_t i = 0; i < M; i++) {
        double *c = C + i * N;
        for (int64_t j = 0; j < N; j++) c[j] = 0.0;
        for (int64_t p = 0; p < K; p++) {
            const double a = A[i * K + p];
            const double *b = B + p * N;
            for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}
