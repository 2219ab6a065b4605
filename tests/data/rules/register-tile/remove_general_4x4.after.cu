// test: remove register-tile@mm4x4:12
// a 4 x 4 register tile written another way: a 2-D block, row-major tiles filled by strided loops,
// each thread's outputs contiguous, the store guarded in place
#include <cuda_runtime.h>

#define BT 64
#define KT 16
#define R 4

__global__ void mm4x4(const float* A, const float* B, float* C, int M, int N, int K)
{
    // smem-tile: 16 x 16 tiles of A and B in shared memory (one output per thread)
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    const int row = blockIdx.y * 16 + threadIdx.y;
    const int col = blockIdx.x * 16 + threadIdx.x;
    float c = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        As[threadIdx.y][threadIdx.x] = row < M && k0 + threadIdx.x < K ? A[row * K + (k0 + threadIdx.x)] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < K && col < N ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < 16; kk++) {
            c += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = c;
    }
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    mm4x4<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
