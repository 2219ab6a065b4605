#include <cuda_pipeline.h>
// test: apply double-buffer@sgemm_tiled:20 via=cp.async | remove double-buffer@sgemm_tiled:33
#include <cuda_runtime.h>

#define TILE 16

__global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[2][4 * TILE][TILE];
    __shared__ float Bs[2][TILE][4 * TILE];
    int row = (blockIdx.y * 4) * TILE + threadIdx.y;
    int col = (blockIdx.x * 4) * TILE + threadIdx.x;
    float acc[4][4];
    #pragma unroll
    for (int kl_i = 0; kl_i < 4; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 4; kl_j++) {
            acc[kl_i][kl_j] = 0.0f;
        }
    }
    {
        const int k0 = 0;
        #pragma unroll
        for (int kl_i = 0; kl_i < 4; kl_i++) {
            __pipeline_memcpy_async(&As[0][(threadIdx.y + kl_i * TILE)][threadIdx.x], ((row + kl_i * TILE) < M && k0 + threadIdx.x < K) ? &A[(row + kl_i * TILE) * K + k0 + threadIdx.x] : A, sizeof(float), ((row + kl_i * TILE) < M && k0 + threadIdx.x < K) ? 0 : sizeof(float));
        }
        #pragma unroll
        for (int kl_j = 0; kl_j < 4; kl_j++) {
            __pipeline_memcpy_async(&Bs[0][threadIdx.y][(threadIdx.x + kl_j * TILE)], (k0 + threadIdx.y < K && (col + kl_j * TILE) < N) ? &B[(k0 + threadIdx.y) * N + (col + kl_j * TILE)] : B, sizeof(float), (k0 + threadIdx.y < K && (col + kl_j * TILE) < N) ? 0 : sizeof(float));
        }
    }
    __pipeline_commit();
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int kl_cur = (k0 / TILE) & 1;
        __pipeline_wait_prior(0);
        __syncthreads();
        if ((k0 + TILE) < K) {
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++) {
                __pipeline_memcpy_async(&As[kl_cur ^ 1][(threadIdx.y + kl_i * TILE)][threadIdx.x], ((row + kl_i * TILE) < M && (k0 + TILE) + threadIdx.x < K) ? &A[(row + kl_i * TILE) * K + (k0 + TILE) + threadIdx.x] : A, sizeof(float), ((row + kl_i * TILE) < M && (k0 + TILE) + threadIdx.x < K) ? 0 : sizeof(float));
            }
            #pragma unroll
            for (int kl_j = 0; kl_j < 4; kl_j++) {
                __pipeline_memcpy_async(&Bs[kl_cur ^ 1][threadIdx.y][(threadIdx.x + kl_j * TILE)], ((k0 + TILE) + threadIdx.y < K && (col + kl_j * TILE) < N) ? &B[((k0 + TILE) + threadIdx.y) * N + (col + kl_j * TILE)] : B, sizeof(float), ((k0 + TILE) + threadIdx.y < K && (col + kl_j * TILE) < N) ? 0 : sizeof(float));
            }
        }
        __pipeline_commit();
        for (int kk = 0; kk < TILE; kk++) {
            float kl_a[4];
            float kl_b[4];
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++) kl_a[kl_i] = As[kl_cur][(threadIdx.y + kl_i * TILE)][kk];
            #pragma unroll
            for (int kl_j = 0; kl_j < 4; kl_j++) kl_b[kl_j] = Bs[kl_cur][kk][(threadIdx.x + kl_j * TILE)];
            #pragma unroll
            for (int kl_i = 0; kl_i < 4; kl_i++)
                #pragma unroll
                for (int kl_j = 0; kl_j < 4; kl_j++) acc[kl_i][kl_j] += kl_a[kl_i] * kl_b[kl_j];
        }
    }
    #pragma unroll
    for (int kl_i = 0; kl_i < 4; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 4; kl_j++) {
            if ((row + kl_i * TILE) < M && (col + kl_j * TILE) < N) C[(row + kl_i * TILE) * N + (col + kl_j * TILE)] = acc[kl_i][kl_j];
        }
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(TILE, TILE);
    dim3 grid(((N + TILE - 1) / TILE + 3) / 4, ((M + TILE - 1) / TILE + 3) / 4);
    sgemm_tiled<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
