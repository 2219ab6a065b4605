// test: apply block-reduce@sum_naive:10:out | remove block-reduce@sum_naive:29
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void sum_naive(const float* x, float* out, int n)
{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        atomicAdd(out, x[i]);
    }
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    int grid = (n + BLOCK - 1) / BLOCK;
    sum_naive<<<grid, BLOCK, 0, stream>>>(x, out, n);
}
