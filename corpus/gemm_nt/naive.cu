// gemm_nt, naive: C = A * B^T with BLAS-style leading dimensions and accessor macros; one
// thread per element of C on a 2-D grid of 16 x 16 blocks, operands read from global memory.
#include <cuda_runtime.h>

#define TILE 16

#define A_(i, p) a[(i) * lda + (p)]
#define B_(j, p) b[(j) * ldb + (p)]
#define C_(i, j) c[(i) * ldc + (j)]

__global__ void gemm_nt_kernel(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                               int ldc)
{
    const int i = blockIdx.y * TILE + threadIdx.y;
    const int j = blockIdx.x * TILE + threadIdx.x;
    if (i >= m || j >= n) return;
    float sum = 0.0f;
    for (int p = 0; p < k; ++p) sum += A_(i, p) * B_(j, p);
    C_(i, j) = sum;
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    dim3 threads(TILE, TILE);
    dim3 blocks((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
    gemm_nt_kernel<<<blocks, threads, 0, stream>>>(m, n, k, a, k, b, k, c, n);
}
