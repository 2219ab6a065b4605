// test: apply smem-tile@gemm_walk:16 | remove smem-tile@gemm_walk:18
// a naive GEMM walking its operands with pointers: a row pointer bumped by one, a column pointer
// bumped by the leading dimension, once per iteration (read through the canonical form)
#include <cuda_runtime.h>

#define TS 16

__global__ void gemm_walk(const float *a, const float *b, float *c, int m, int n, int kdim, int lda, int ldb, int ldc)
{
    int i = blockIdx.y * TS + threadIdx.y;
    int j = blockIdx.x * TS + threadIdx.x;
    if (i < m && j < n) {
        const float *arow = a + (size_t)i * lda;
        const float *bcol = &b[j];
        float acc = 0.0f;
        for (int p = 0; p < kdim; p++) {
            acc += arow[0] * bcol[0];
            arow++;
            bcol += ldb;
        }
        c[(size_t)i * ldc + j] = acc;
    }
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    gemm_walk<<<dim3((N + TS - 1) / TS, (M + TS - 1) / TS), dim3(TS, TS), 0, stream>>>(A, B, C, M, N, K, K, N, N);
}
