// reduce_sum, naive: one thread per element, each adds its value to the result with atomicAdd.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void reduce_sum_naive(const float* x, float* out, int n)
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
    reduce_sum_naive<<<grid, BLOCK, 0, stream>>>(x, out, n);
}
