// sgemm, naive, with the row on threadIdx.x: a warp strides through A and C.
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void sgemm_rows_x(const float* A, const float* B, float* C, int M, int N, int K)
{
    int row = blockIdx.x * BLOCK + threadIdx.x;
    int col = blockIdx.y * BLOCK + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK);
    dim3 grid((M + BLOCK - 1) / BLOCK, (N + BLOCK - 1) / BLOCK);
    sgemm_rows_x<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
