// test: apply register-tile@gemm_macro:15 TM=8 TN=8 | remove register-tile@gemm_macro:14
// tiled sgemm indexing through a macro, an unrolled product loop, dim3 literals at the launch
#include <cuda_runtime.h>

#define BS 16
#define IDX(r, c, ld) ((r) * (ld) + (c))

__global__ void gemm_macro(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float sa[BS][BS];
    __shared__ float sb[BS][BS];
    int r = blockIdx.y * BS + threadIdx.y;
    int c = blockIdx.x * BS + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += BS) {
        sa[threadIdx.y][threadIdx.x] = (r < M && t + threadIdx.x < K) ? A[IDX(r, t + threadIdx.x, K)] : 0.0f;
        sb[threadIdx.y][threadIdx.x] = (t + threadIdx.y < K && c < N) ? B[IDX(t + threadIdx.y, c, N)] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BS; k++) {
            acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (r < M && c < N) C[IDX(r, c, N)] = acc;
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    gemm_macro<<<dim3((N + BS - 1) / BS, (M + BS - 1) / BS), dim3(BS, BS), 0, stream>>>(A, B, C, M, N, K);
}
