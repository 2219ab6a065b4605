// test: apply double-buffer@sgemm_tiled:12 | remove double-buffer@sgemm_tiled:18
#include <cuda_runtime.h>

__global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    constexpr int TILE = 16;  // the tile's step: a constant local to the kernel
    __shared__ float As[2][TILE][TILE];
    __shared__ float Bs[2][TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    {
        const int k0 = 0;
        As[0][threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[0][threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
    }
    __syncthreads();
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int kl_cur = (k0 / TILE) & 1;
        float kl_r0;
        float kl_r1;
        if ((k0 + TILE) < K) {
            kl_r0 = (row < M && (k0 + TILE) + threadIdx.x < K) ? A[row * K + (k0 + TILE) + threadIdx.x] : 0.0f;
            kl_r1 = ((k0 + TILE) + threadIdx.y < K && col < N) ? B[((k0 + TILE) + threadIdx.y) * N + col] : 0.0f;
        }
        for (int kk = 0; kk < TILE; kk++) {
            acc += As[kl_cur][threadIdx.y][kk] * Bs[kl_cur][kk][threadIdx.x];
        }
        if ((k0 + TILE) < K) {
            As[kl_cur ^ 1][threadIdx.y][threadIdx.x] = kl_r0;
            Bs[kl_cur ^ 1][threadIdx.y][threadIdx.x] = kl_r1;
        }
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    constexpr int TILE = 16;
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    sgemm_tiled<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
