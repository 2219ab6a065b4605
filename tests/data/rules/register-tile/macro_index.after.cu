// test: apply register-tile@gemm_macro:15 TM=8 TN=8 | remove register-tile@gemm_macro:14
// tiled sgemm indexing through a macro, an unrolled product loop, dim3 literals at the launch
#include <cuda_runtime.h>

#define BS 16
#define IDX(r, c, ld) ((r) * (ld) + (c))

__global__ void gemm_macro(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float sa[8 * BS][BS];
    __shared__ float sb[BS][8 * BS];
    int r = (blockIdx.y * 8) * BS + threadIdx.y;
    int c = (blockIdx.x * 8) * BS + threadIdx.x;
    float acc[8][8];
    #pragma unroll
    for (int kl_i = 0; kl_i < 8; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 8; kl_j++) {
            acc[kl_i][kl_j] = 0.0f;
        }
    }
    for (int t = 0; t < K; t += BS) {
        #pragma unroll
        for (int kl_i = 0; kl_i < 8; kl_i++) {
            sa[(threadIdx.y + kl_i * BS)][threadIdx.x] = ((r + kl_i * BS) < M && t + threadIdx.x < K) ? A[IDX((r + kl_i * BS), t + threadIdx.x, K)] : 0.0f;
        }
        #pragma unroll
        for (int kl_j = 0; kl_j < 8; kl_j++) {
            sb[threadIdx.y][(threadIdx.x + kl_j * BS)] = (t + threadIdx.y < K && (c + kl_j * BS) < N) ? B[IDX(t + threadIdx.y, (c + kl_j * BS), N)] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BS; k++) {
            float kl_a[8];
            float kl_b[8];
            #pragma unroll
            for (int kl_i = 0; kl_i < 8; kl_i++) kl_a[kl_i] = sa[(threadIdx.y + kl_i * BS)][k];
            #pragma unroll
            for (int kl_j = 0; kl_j < 8; kl_j++) kl_b[kl_j] = sb[k][(threadIdx.x + kl_j * BS)];
            #pragma unroll
            for (int kl_i = 0; kl_i < 8; kl_i++)
                #pragma unroll
                for (int kl_j = 0; kl_j < 8; kl_j++) acc[kl_i][kl_j] += kl_a[kl_i] * kl_b[kl_j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int kl_i = 0; kl_i < 8; kl_i++) {
        #pragma unroll
        for (int kl_j = 0; kl_j < 8; kl_j++) {
            if ((r + kl_i * BS) < M && (c + kl_j * BS) < N) C[IDX((r + kl_i * BS), (c + kl_j * BS), N)] = acc[kl_i][kl_j];
        }
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    gemm_macro<<<dim3(((N + BS - 1) / BS + 7) / 8, ((M + BS - 1) / BS + 7) / 8), dim3(BS, BS), 0, stream>>>(A, B, C, M, N, K);
}
