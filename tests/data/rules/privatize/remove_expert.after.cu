#include <cuda_runtime.h>
#include <stdint.h>

#define BINS 256

__global__ void histogram_expert(const uint8_t* __restrict__ x, int32_t* __restrict__ bins, int n)
{

    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&bins[x[i]], 1);
    }

}
