// test: remove register-tile@gemm_locals:15 | apply register-tile@gemm_locals:16 TM=2 TN=8
// tiled sgemm with ty/tx locals, size_t rows and columns and a constexpr tile
#include <cuda_runtime.h>

constexpr int TILE = 16;

__global__ void gemm_locals(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int ty = threadIdx.y;
    const int tx = threadIdx.x;
    const size_t row = (size_t)blockIdx.y * TILE + ty;
    const size_t col = (size_t)blockIdx.x * TILE + tx;
    float sum = 0;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < (size_t)M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < (size_t)N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) {
            sum += As[ty][kk] * Bs[kk][tx];
        }
        __syncthreads();
    }
    if (row < (size_t)M && col < (size_t)N) {
        C[row * N + col] = sum;
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    const dim3 block(TILE, TILE);
    const dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    gemm_locals<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
