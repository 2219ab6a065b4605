// A byte histogram with one copy of every bin per lane of a warp, interleaved (mask form).
#include <cuda_runtime.h>
#include <stdint.h>

#define BINS 256
#define LANES 32

__global__ void hist_interleaved(const uint8_t* x, int* bins, int n)
{
    // privatize: interleaved lane copies
    __shared__ int h[BINS * LANES];
    for (int b = threadIdx.x; b < BINS * LANES; b += blockDim.x) h[b] = 0;
    __syncthreads();
    int* lane_h = &h[threadIdx.x & (LANES - 1)];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&lane_h[LANES * x[i]], 1);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        int c = 0;
        for (int l = 0; l < LANES; l++) c += h[b * LANES + (l + b) % LANES];
        if (c) atomicAdd(&bins[b], c);
    }
}

extern "C" void launch(const uint8_t* x, int* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, BINS * sizeof(int), stream);
    hist_interleaved<<<(n + 255) / 256, 256, 0, stream>>>(x, bins, n);
}
