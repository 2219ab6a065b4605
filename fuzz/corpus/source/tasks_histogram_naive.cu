// histogram, naive: one thread per value, each increments its bin in global memory with atomicAdd.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK 256
#define BINS 256

__global__ void histogram_naive(const uint8_t* x, int32_t* bins, int n)
{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        atomicAdd(&bins[x[i]], 1);
    }
}

extern "C" void launch(const uint8_t* x, int32_t* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, BINS * sizeof(int32_t), stream);
    int grid = (n + BLOCK - 1) / BLOCK;
    histogram_naive<<<grid, BLOCK, 0, stream>>>(x, bins, n);
}
