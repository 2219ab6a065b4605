// test: remove smem-tile@sgemm_tiled:16 | apply smem-tile@sgemm_tiled:16
// The classic tiled GEMM as it remains when the register tile is gone: both tiles in one
// declaration, a k0 loop, guarded loads, two barriers, the store under a one-line guard.
#include <cuda_runtime.h>

#define TILE 16

__global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
                            int N, int K)
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        C[(size_t)row * N + col] = acc;
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    sgemm_tiled<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
