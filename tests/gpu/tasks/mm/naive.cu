// mm, naive: one thread per output element, the dot product straight from global memory.
#include <cuda_runtime.h>

__global__ void mm_naive(const float *A, const float *B, float *C, int M, int N, int K)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= M || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    C[(size_t)i * N + j] = acc;
}

extern "C" void launch(const float *A, const float *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    dim3 block(32, 8), grid((N + 31) / 32, (M + 7) / 8);
    mm_naive<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
