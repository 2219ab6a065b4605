// test: apply smem-tile@matmul:14 | remove smem-tile@matmul:16
// The textbook naive GEMM: a 2-D grid under a macro block size, the output guard around the
// whole computation, K, M and N of any size.
#include <cuda_runtime.h>

#define BLOCK 16

__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K)
{
    int row = blockIdx.y * BLOCK + threadIdx.y;
    int col = blockIdx.x * BLOCK + threadIdx.x;
    // smem-tile: BLOCK x BLOCK tiles of A and B in shared memory
    __shared__ float As[BLOCK][BLOCK];
    __shared__ float Bs[BLOCK][BLOCK];
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BLOCK) {
        As[threadIdx.y][threadIdx.x] = row < M && k0 + threadIdx.x < K ? A[row * K + (k0 + threadIdx.x)] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < K && col < N ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < BLOCK; kk++) {
            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(BLOCK, BLOCK);
    dim3 grid((N + BLOCK - 1) / BLOCK, (M + BLOCK - 1) / BLOCK);
    matmul<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
