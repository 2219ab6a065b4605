#include <cuda_runtime.h>
#include <stdint.h>

#define BINS 256

__global__ void histogram_expert(const uint8_t* __restrict__ x, int32_t* __restrict__ bins, int n)
{
    // privatize: a shared copy of the 256 bins per block, merged once at the end
    __shared__ int32_t local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();

    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&local[x[i]], 1);
    }

    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        int32_t c = local[b];
        if (c) atomicAdd(&bins[b], c);
    }
}
