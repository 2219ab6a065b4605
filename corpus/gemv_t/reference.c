/* gemv_t reference: out[j] = sum_i weight[i][j] * v[i] in float64 (weight: K x N, row-major). */
#include <stdint.h>

void reference(const double *weight, const double *v, double *out, int K, int N)
{
    for (int64_t j = 0; j < N; j++) out[j] = 0.0;
    for (int64_t i = 0; i < K; i++) {
        const double *wi = weight + i * N;
        for (int64_t j = 0; j < N; j++) out[j] += wi[j] * v[i];
    }
}
