// test: apply register-tile@gemm_locals:16 TM=2 TN=8 | remove register-tile@gemm_locals:15
// tiled sgemm with ty/tx locals, size_t rows and columns and a constexpr tile
#include <cuda_runtime.h>

constexpr int TILE = 16;

__global__ void gemm_locals(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[2 * TILE][TILE];
    __shared__ float Bs[TILE][8 * TILE];
    const int ty = threadIdx.y;
    const int tx = threadIdx.x;
    const size_t row = (size_t)(blockIdx.y * 2) * TILE + ty;
    const size_t col = (size_t)(blockIdx.x * 8) * TILE + tx;
    float sum[2][8];
    #pragma unroll
    for (int kl_i = 0; kl_i < 2; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 8; kl_j++) {
            sum[kl_i][kl_j] = 0;
        }
    }
    for (int k0 = 0; k0 < K; k0 += TILE) {
        #pragma unroll
        for (int kl_i = 0; kl_i < 2; kl_i++) {
            As[(ty + kl_i * TILE)][tx] = ((row + kl_i * TILE) < (size_t)M && k0 + tx < K) ? A[(row + kl_i * TILE) * K + k0 + tx] : 0.0f;
        }
        #pragma unroll
        for (int kl_j = 0; kl_j < 8; kl_j++) {
            Bs[ty][(tx + kl_j * TILE)] = (k0 + ty < K && (col + kl_j * TILE) < (size_t)N) ? B[(size_t)(k0 + ty) * N + (col + kl_j * TILE)] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) {
            float kl_a[2];
            float kl_b[8];
            #pragma unroll
            for (int kl_i = 0; kl_i < 2; kl_i++) kl_a[kl_i] = As[(ty + kl_i * TILE)][kk];
            #pragma unroll
            for (int kl_j = 0; kl_j < 8; kl_j++) kl_b[kl_j] = Bs[kk][(tx + kl_j * TILE)];
            #pragma unroll
            for (int kl_i = 0; kl_i < 2; kl_i++)
                #pragma unroll
                for (int kl_j = 0; kl_j < 8; kl_j++) sum[kl_i][kl_j] += kl_a[kl_i] * kl_b[kl_j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int kl_i = 0; kl_i < 2; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 8; kl_j++) {
            if ((row + kl_i * TILE) < (size_t)M && (col + kl_j * TILE) < (size_t)N) {
                C[(row + kl_i * TILE) * N + (col + kl_j * TILE)] = sum[kl_i][kl_j];
            }
        }
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    const dim3 block(TILE, TILE);
    const dim3 grid(((N + TILE - 1) / TILE + 7) / 8, ((M + TILE - 1) / TILE + 1) / 2);
    gemm_locals<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
