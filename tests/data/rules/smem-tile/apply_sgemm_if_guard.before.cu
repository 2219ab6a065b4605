// test: apply smem-tile@matmul:14 | remove smem-tile@matmul:16
// The textbook naive GEMM: a 2-D grid under a macro block size, the output guard around the
// whole computation, K, M and N of any size.
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K)
{
    int row = blockIdx.y * BLOCK + threadIdx.y;
    int col = blockIdx.x * BLOCK + threadIdx.x;
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
    dim3 grid((N + BLOCK - 1) / BLOCK, (M + BLOCK - 1) / BLOCK);
    matmul<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
