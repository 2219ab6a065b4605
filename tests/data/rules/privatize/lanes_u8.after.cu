// histogram, naive: one thread per value, each increments its bin in global memory.
#include <cuda_runtime.h>
#include <stdint.h>

#define BLOCK 256
#define BINS 256

__global__ void histogram_naive(const uint8_t* x, int32_t* bins, int n)
{
    // privatize: 32 per-block copies of 'bins' in shared memory, interleaved (entry e of copy c at e * 32 + c; lane l of a warp uses copy l % 32), merged once per entry
    __shared__ int32_t bins_priv[256 * 32];
    for (int kl_i = threadIdx.x; kl_i < 256 * 32; kl_i += blockDim.x) bins_priv[kl_i] = 0;
    __syncthreads();
    int32_t* bins_lane = bins_priv + threadIdx.x % 32;
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        atomicAdd(&bins_lane[x[i] * 32], 1);
    }
    __syncthreads();
    for (int kl_i = threadIdx.x; kl_i < 256; kl_i += blockDim.x) {
        int32_t kl_sum = 0;
        for (int kl_c = 0; kl_c < 32; kl_c++) kl_sum += bins_priv[kl_i * 32 + (kl_c + kl_i) % 32];
        if (kl_sum != 0) atomicAdd(&bins[kl_i], kl_sum);
    }
}

extern "C" void launch(const uint8_t* x, int32_t* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, BINS * sizeof(int32_t), stream);
    int grid = (n + BLOCK - 1) / BLOCK;
    histogram_naive<<<grid, BLOCK, 0, stream>>>(x, bins, n);
}
