// test: apply smem-tile@gemm_nt:17 | remove smem-tile@gemm_nt:19
// idiom (own): a naive NT GEMM indexed through function-like macros, the tile a template parameter bound at the launch (read through the canonical form)
// sizes template parameters bound at the launch, one output per thread on a 2-D grid.
#include <cuda_runtime.h>

#define A_AT(i, k) a[(i) * lda + (k)]
#define B_AT(j, k) b[(j) * ldb + (k)]
#define C_AT(i, j) c[(i) * ldc + (j)]

template <int TILE>
__global__ void gemm_nt(const float *a, const float *b, float *c, int m, int n, int kdim, int lda, int ldb, int ldc)
{
    const int j = blockIdx.x * TILE + threadIdx.x;
    const int i = blockIdx.y * TILE + threadIdx.y;
    if (i >= m || j >= n) return;
    float sum = 0.f;
    for (int k = 0; k < kdim; ++k) sum += A_AT(i, k) * B_AT(j, k);
    C_AT(i, j) = sum;
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    gemm_nt<16><<<grid, block, 0, stream>>>(A, B, C, M, N, K, K, K, N);
}
