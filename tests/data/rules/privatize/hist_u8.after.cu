// histogram, naive: one thread per value, each increments its bin in global memory.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK 256
#define BINS 256

__global__ void histogram_naive(const uint8_t* x, int32_t* bins, int n)
{
    // privatize: a per-block copy of 'bins' in shared memory, merged once per entry
    __shared__ int32_t bins_priv[256];
    for (int kl_i = threadIdx.x; kl_i < 256; kl_i += blockDim.x) bins_priv[kl_i] = 0;
    __syncthreads();
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        atomicAdd(&bins_priv[x[i]], 1);
    }
    __syncthreads();
    for (int kl_i = threadIdx.x; kl_i < 256; kl_i += blockDim.x)
        if (bins_priv[kl_i] != 0) atomicAdd(&bins[kl_i], bins_priv[kl_i]);
}

extern "C" void launch(const uint8_t* x, int32_t* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, BINS * sizeof(int32_t), stream);
    int grid = (n + BLOCK - 1) / BLOCK;
    histogram_naive<<<grid, BLOCK, 0, stream>>>(x, bins, n);
}
