// test: remove block-reduce@reduce_sum_kernel:35 | apply block-reduce@reduce_sum_kernel:26:out
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_BLOCKS = 4096;


// Sum over the block: shuffles, then across warps; valid in every thread.
__device__ __forceinline__ float block_sum(float v, float* part)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < WARPS; w++) r += part[w];
    __syncthreads();
    return r;
}

__global__ void reduce_sum_kernel(const float* x, float* out, int n)
{
    const size_t stride = (size_t)gridDim.x * THREADS;
    const size_t gtid = (size_t)blockIdx.x * THREADS + threadIdx.x;

    for (size_t j = gtid; j < (size_t)n; j += stride) atomicAdd(out, x[j]);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int grid = sms * 4 < MAX_BLOCKS ? sms * 4 : MAX_BLOCKS;
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    reduce_sum_kernel<<<grid, THREADS, 0, stream>>>(x, out, n);
}
