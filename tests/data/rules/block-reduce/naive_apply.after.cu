// test: apply block-reduce@sum_naive:10:out | remove block-reduce@sum_naive:29
#include <cuda_runtime.h>

#define BLOCK 256

// block-reduce: the sum of v over a 1-D block of up to 1024 threads, valid in every thread
template <typename T>
__device__ __forceinline__ T kl_block_sum(T v)
{
    __shared__ T kl_sums[1024];
    kl_sums[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s <<= 1) {
        if (threadIdx.x % (2 * s) == 0 && threadIdx.x + s < blockDim.x) kl_sums[threadIdx.x] += kl_sums[threadIdx.x + s];
        __syncthreads();
    }
    v = kl_sums[0];
    __syncthreads();
    return v;
}

__global__ void sum_naive(const float* x, float* out, int n)
{
    float kl_part = 0;
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        kl_part += x[i];
    }
    const float kl_total = kl_block_sum(kl_part);
    if (threadIdx.x == 0) atomicAdd(out, kl_total);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    int grid = (n + BLOCK - 1) / BLOCK;
    sum_naive<<<grid, BLOCK, 0, stream>>>(x, out, n);
}
