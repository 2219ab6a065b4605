// test: apply block-reduce@count_pos:9:count | remove block-reduce@count_pos:29
#include <cuda_runtime.h>

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

// counts the positive values: one atomic per hit, two statements
__global__ void count_pos(const float* x, int* count, int n)
{
    int kl_part = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        if (x[i] > 0.0f)
            kl_part += 1;
        if (x[i] > 100.0f) kl_part += 1;
    }
    const int kl_total = kl_block_sum(kl_part);
    if (threadIdx.x == 0) atomicAdd(&count[0], kl_total);
}

extern "C" void launch(const float* x, int* count, int n, cudaStream_t stream)
{
    cudaMemsetAsync(count, 0, sizeof(int), stream);
    count_pos<<<264, dim3(512), 0, stream>>>(x, count, n);
}
