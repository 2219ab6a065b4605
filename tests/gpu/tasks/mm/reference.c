/* C = A B in float64, the plain triple loop (i, k, j: rows of B read in order). */
void reference(const double *A, const double *B, double *C, int M, int N, int K)
{
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}
