#include <cuda_pipeline.h>
// test: apply double-buffer@sgemm_tiled:13 via=cp.async | remove double-buffer@sgemm_tiled:20
#include <cuda_runtime.h>

#define TILE 16

__global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[2][TILE][TILE];
    __shared__ float Bs[2][TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    {
        const int k0 = 0;
        __pipeline_memcpy_async(&As[0][threadIdx.y][threadIdx.x], (row < M && k0 + threadIdx.x < K) ? &A[row * K + k0 + threadIdx.x] : A, sizeof(float), (row < M && k0 + threadIdx.x < K) ? 0 : sizeof(float));
        __pipeline_memcpy_async(&Bs[0][threadIdx.y][threadIdx.x], (k0 + threadIdx.y < K && col < N) ? &B[(k0 + threadIdx.y) * N + col] : B, sizeof(float), (k0 + threadIdx.y < K && col < N) ? 0 : sizeof(float));
    }
    __pipeline_commit();
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int kl_cur = (k0 / TILE) & 1;
        __pipeline_wait_prior(0);
        __syncthreads();
        if ((k0 + TILE) < K) {
            __pipeline_memcpy_async(&As[kl_cur ^ 1][threadIdx.y][threadIdx.x], (row < M && (k0 + TILE) + threadIdx.x < K) ? &A[row * K + (k0 + TILE) + threadIdx.x] : A, sizeof(float), (row < M && (k0 + TILE) + threadIdx.x < K) ? 0 : sizeof(float));
            __pipeline_memcpy_async(&Bs[kl_cur ^ 1][threadIdx.y][threadIdx.x], ((k0 + TILE) + threadIdx.y < K && col < N) ? &B[((k0 + TILE) + threadIdx.y) * N + col] : B, sizeof(float), ((k0 + TILE) + threadIdx.y < K && col < N) ? 0 : sizeof(float));
        }
        __pipeline_commit();
        for (int kk = 0; kk < TILE; kk++) {
            acc += As[kl_cur][threadIdx.y][kk] * Bs[kl_cur][kk][threadIdx.x];
        }
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    sgemm_tiled<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
